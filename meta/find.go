package meta

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"path"
	"slices"
	"syscall"

	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/wire"
)

// Find walks the tree below start (depth first, entries in name order)
// and returns up to max entries that match f, and a cursor to continue
// from (nil when the walk is done). It does at most findBudget directory
// reads per call, so one call never holds the server for long; a call may
// return fewer than max entries (even none) with a cursor.
//
// The walk acts for the caller: it lists only directories the caller may
// read and descends only into those it may search, as find(1) would (a
// directory it may not list is skipped, as find(1) reports and skips it).
// The cursor is signed with a key of this server process: a cursor that
// was changed, or that comes from before a restart, is refused with
// EINVAL (the client starts over).
func (s *Server) Find(ctx context.Context, start proto.Ino, f proto.FindFilter, cursor []byte, max int) ([]proto.Found, []byte, error) {
	cl, err := s.reader(ctx)
	if err != nil {
		return nil, nil, err
	}
	if max <= 0 || max > MaxReadDir {
		max = MaxReadDir
	}
	if f.Name != "" {
		if _, err := path.Match(f.Name, ""); err != nil {
			return nil, nil, errnof(syscall.EINVAL, "find: bad -name pattern %q", f.Name)
		}
	}
	var stack []findFrame
	var out []proto.Found
	if cursor == nil {
		a, err := s.readInode(start)
		if err != nil {
			return nil, nil, err
		}
		if findMatches(&f, "", &a.Attr) {
			out = append(out, proto.Found{Path: ".", Attr: a.Attr})
		}
		if a.IsDir() && f.MaxDepth != 0 {
			stack = []findFrame{{ino: start, rel: ".", depth: 1}}
		}
	} else if stack, err = s.decodeFindCursor(cursor); err != nil {
		return nil, nil, err
	}
	for reads := 0; len(stack) > 0 && len(out) < max && reads < findBudget; reads++ {
		top := &stack[len(stack)-1]
		d, err := s.readInode(top.ino)
		if err == nil && maySearch(cl.cred, &d.Attr) != nil {
			err = errnof(syscall.EACCES, "search")
		}
		var ents []proto.DirEntry
		if err == nil {
			ents, err = s.ReadDir(ctx, top.ino, top.after, findChunk)
		}
		if err != nil && !errors.Is(err, syscall.ENOENT) && !errors.Is(err, syscall.ENOTDIR) && !errors.Is(err, syscall.EACCES) {
			return nil, nil, err
		}
		if err != nil || len(ents) == 0 {
			// Gone, not a directory any more, not ours to list, or done.
			stack = stack[:len(stack)-1]
			continue
		}
		frame := *top
		done := len(ents) < findChunk // the directory has no more entries
		var sub []findFrame
		for i, e := range ents {
			rel := path.Join(frame.rel, e.Name)
			if findMatches(&f, e.Name, &e.Attr) {
				out = append(out, proto.Found{Path: rel, Attr: e.Attr})
			}
			if e.Attr.IsDir() && (f.MaxDepth < 0 || frame.depth < f.MaxDepth) {
				sub = append(sub, findFrame{ino: e.Attr.Ino, rel: rel, depth: frame.depth + 1})
			}
			stack[len(stack)-1].after = e.Name
			if len(out) >= max && i < len(ents)-1 {
				done = false
				break
			}
		}
		if done {
			stack = stack[:len(stack)-1]
		}
		// Subdirectories go on the stack above their parent, first one on
		// top: the parent's remaining entries come after them.
		slices.Reverse(sub)
		stack = append(stack, sub...)
	}
	if len(stack) == 0 {
		return out, nil, nil
	}
	return out, s.encodeFindCursor(stack), nil
}

// findBudget bounds the directory reads of one Find call, findChunk the
// entries of one read.
const (
	findBudget = 256
	findChunk  = 1024
)

type findFrame struct {
	ino   proto.Ino
	rel   string // path below the start
	after string // the last name listed in it
	depth int32  // of its entries below the start
}

func findMatches(f *proto.FindFilter, name string, a *proto.Attr) bool {
	if f.Name != "" {
		// The start itself ("") has no name of its own to match.
		if ok, _ := path.Match(f.Name, name); !ok || name == "" {
			return false
		}
	}
	switch f.Type {
	case 'f':
		if !a.IsRegular() {
			return false
		}
	case 'd':
		if !a.IsDir() {
			return false
		}
	case 'l':
		if a.Mode&syscall.S_IFMT != syscall.S_IFLNK {
			return false
		}
	}
	if !f.Size.Matches(int64(a.Size)) || !f.Mtime.Matches(a.Mtime) {
		return false
	}
	if (f.Uid != nil && *f.Uid != a.Uid) || (f.Gid != nil && *f.Gid != a.Gid) {
		return false
	}
	if f.StripeCount.Op != 0 || f.Target != nil {
		if !a.IsRegular() || !f.StripeCount.Matches(int64(len(a.Layout.Targets))) {
			return false
		}
		if f.Target != nil && !slices.Contains(a.Layout.Targets, *f.Target) {
			return false
		}
	}
	return true
}

// findCursorVersion is the format of a find cursor:
//
//	u8 version, u32 n frames: u64 ino, str rel, str after, u32 depth;
//	then 32 bytes of HMAC-SHA256 of all that with the server's find key.
const findCursorVersion = 1

func (s *Server) encodeFindCursor(stack []findFrame) []byte {
	e := wire.NewEncoder(64)
	e.U8(findCursorVersion)
	e.U32(uint32(len(stack)))
	for _, f := range stack {
		e.U64(uint64(f.ino))
		e.String(f.rel)
		e.String(f.after)
		e.U32(uint32(f.depth))
	}
	return s.findMAC(e.B)
}

func (s *Server) decodeFindCursor(b []byte) ([]findFrame, error) {
	if len(b) < sha256.Size || !hmac.Equal(s.findMAC(b[:len(b)-sha256.Size]), b) {
		return nil, errnof(syscall.EINVAL, "find: cursor not made by this server (changed, or the server restarted): start over")
	}
	d := wire.NewDecoder(b[:len(b)-sha256.Size])
	if v := d.U8(); v != findCursorVersion {
		return nil, errnof(syscall.EINVAL, "find: cursor version %d", v)
	}
	n := d.Count(1<<20, 8+4+4+4)
	stack := make([]findFrame, n)
	for i := range stack {
		stack[i] = findFrame{ino: proto.Ino(d.U64()), rel: d.String(), after: d.String(), depth: int32(d.U32())}
	}
	if err := d.Done(); err != nil {
		return nil, errnof(syscall.EINVAL, "find: cursor: %v", err)
	}
	return stack, nil
}

// findMAC returns b with its MAC appended.
func (s *Server) findMAC(b []byte) []byte {
	s.findKeyOnce.Do(func() { rand.Read(s.findKey[:]) })
	m := hmac.New(sha256.New, s.findKey[:])
	m.Write(b)
	return m.Sum(append([]byte(nil), b...))
}
