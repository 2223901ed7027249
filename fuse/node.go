package fuse

import (
	"context"
	"log/slog"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	gofuse "github.com/hanwen/go-fuse/v2/fuse"

	"github.com/weft-fs/weft/client"
	"github.com/weft-fs/weft/proto"
)

// filesystem is shared by all nodes of one mount.
type filesystem struct {
	c     *client.Client
	log   *slog.Logger
	creds *creds // the calling process's credentials, for every metadata call
	meta  string // the metadata server's address (user.weft.meta)
	// flushOwners passes FLUSH's lock owner to the handle (locks.go).
	flushOwners sync.Map
	// nodes maps the inodes the kernel knows to their nodes, for the
	// metadata leader's invalidations (leases.go).
	nodes sync.Map // proto.Ino -> *node
}

// errno converts a client error for the kernel; errors that are not errnos
// become EIO and are logged.
func (f *filesystem) errno(op string, err error) syscall.Errno {
	if err == nil {
		return 0
	}
	e, ok := client.Errno(err)
	if !ok {
		f.log.Error("fuse: operation failed", "op", op, "err", err)
	}
	return e
}

// node is one weft inode in go-fuse's tree. go-fuse keys nodes by
// StableAttr.Ino, which is the weft inode number, so hard links share a node.
type node struct {
	fs.Inode
	fsys *filesystem

	// What the kernel was last told about size and mtime: when Open finds
	// them changed, the kernel's cached attributes are invalidated
	// (close-to-open across mounts).
	mu        sync.Mutex
	seen      bool
	seenSize  uint64
	seenMtime int64

	// The attributes the previous Open on this mount got. The kernel's page
	// cache of the file may be kept (FOPEN_KEEP_CACHE) only when the next
	// Open finds all three unchanged: every data change made elsewhere moves
	// ctime (WriteDone, truncate), which no client can set back, unlike
	// mtime. Changes made here keep the page cache right by themselves
	// (writes go through it, truncate cuts it), and they move ctime too, so
	// they only cost a re-read.
	opened               bool
	openSize             uint64
	openMtime, openCtime int64

	// A directory's attributes as this mount's last create or remove in it
	// returned them. The kernel drops a directory's cached attributes after
	// every change in it and asks again (GETATTR) at the next path walk;
	// that question is answered from here for up to attrTimeout, as the
	// kernel itself would have answered from its cache. Any other change
	// made here to the directory clears it (stale).
	fresh      proto.Attr
	freshUntil time.Time
}

// setFresh records a directory's attributes just returned by a change in
// it; a zero Attr (the server did not say) clears them.
func (n *node) setFresh(a proto.Attr) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if a.Ino != n.ino() || !a.IsDir() {
		n.fresh, n.freshUntil = proto.Attr{}, time.Time{}
		return
	}
	if n.freshUntil.IsZero() || a.Ctime >= n.fresh.Ctime {
		n.fresh, n.freshUntil = a, time.Now().Add(attrTimeout)
	}
}

// stale forgets the recorded attributes: this mount changed the directory
// in a way whose reply did not carry them.
func (n *node) stale() {
	n.mu.Lock()
	n.fresh, n.freshUntil = proto.Attr{}, time.Time{}
	n.mu.Unlock()
}

// freshAttr returns the recorded attributes if still valid.
func (n *node) freshAttr() (proto.Attr, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.freshUntil.IsZero() || time.Now().After(n.freshUntil) {
		return proto.Attr{}, false
	}
	return n.fresh, true
}

// staleNode clears the recorded attributes of an fs.InodeEmbedder that is
// one of ours.
func staleNode(e fs.InodeEmbedder) {
	if nn, ok := e.(*node); ok {
		nn.stale()
	}
}

var (
	_ fs.NodeLookuper       = (*node)(nil)
	_ fs.NodeGetattrer      = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeMknoder        = (*node)(nil)
	_ fs.NodeMkdirer        = (*node)(nil)
	_ fs.NodeRmdirer        = (*node)(nil)
	_ fs.NodeUnlinker       = (*node)(nil)
	_ fs.NodeRenamer        = (*node)(nil)
	_ fs.NodeLinker         = (*node)(nil)
	_ fs.NodeSymlinker      = (*node)(nil)
	_ fs.NodeReadlinker     = (*node)(nil)
	_ fs.NodeOpener         = (*node)(nil)
	_ fs.NodeOpendirHandler = (*node)(nil)
	_ fs.NodeStatfser       = (*node)(nil)
	_ fs.NodeGetxattrer     = (*node)(nil)
	_ fs.NodeSetxattrer     = (*node)(nil)
	_ fs.NodeListxattrer    = (*node)(nil)
	_ fs.NodeRemovexattrer  = (*node)(nil)
	_ fs.NodeOnForgetter    = (*node)(nil)
	_ fs.FileReaddirenter   = (*dirHandle)(nil)
	_ fs.FileLookuper       = (*dirHandle)(nil)
	_ fs.FileSeekdirer      = (*dirHandle)(nil)
	_ fs.FileFsyncdirer     = (*dirHandle)(nil)
	_ fs.FileReader         = (*handle)(nil)
	_ fs.FileWriter         = (*handle)(nil)
	_ fs.FileFlusher        = (*handle)(nil)
	_ fs.FileFsyncer        = (*handle)(nil)
	_ fs.FileReleaser       = (*handle)(nil)
)

func (n *node) ino() proto.Ino { return proto.Ino(n.StableAttr().Ino) }

// note records what the kernel is told about a, for Open's invalidation.
func (n *node) note(a proto.Attr) {
	n.mu.Lock()
	n.seen, n.seenSize, n.seenMtime = true, a.Size, a.Mtime
	n.mu.Unlock()
}

func fillAttr(out *gofuse.Attr, a proto.Attr) {
	out.Ino = uint64(a.Ino)
	out.Size = a.Size
	out.Blocks = (a.Size + 511) / 512
	if a.IsRegular() {
		out.Blocks = a.Blocks // what the targets hold (holes are free), as last reported
	}
	out.Atime, out.Atimensec = uint64(a.Atime/1e9), uint32(a.Atime%1e9)
	out.Mtime, out.Mtimensec = uint64(a.Mtime/1e9), uint32(a.Mtime%1e9)
	out.Ctime, out.Ctimensec = uint64(a.Ctime/1e9), uint32(a.Ctime%1e9)
	out.Mode = a.Mode
	out.Nlink = a.Nlink
	out.Uid, out.Gid = a.Uid, a.Gid
	out.Rdev = a.Rdev
	out.Blksize = 4096
	if a.IsRegular() && a.Layout.StripeSize > 0 {
		// st_blksize is the preferred I/O size: a stripe unit, capped
		// at what one FUSE request carries.
		out.Blksize = uint32(min(a.Layout.StripeSize, maxIO))
	}
}

// child returns the tree node for a, creating it if the kernel does not
// know it yet, and fills out.
func (n *node) child(ctx context.Context, a proto.Attr, out *gofuse.EntryOut) *fs.Inode {
	fillAttr(&out.Attr, a)
	if a.IsDir() {
		out.SetEntryTimeout(dirEntryTimeout)
	}
	ch := n.NewInode(ctx, &node{fsys: n.fsys}, fs.StableAttr{Mode: a.Mode & syscall.S_IFMT, Ino: uint64(a.Ino)})
	if cn, ok := ch.Operations().(*node); ok {
		cn.note(a)
		if known := n.fsys.track(a.Ino, cn); known != cn {
			// The kernel knows the inode already: go-fuse keeps its
			// node and drops cn, and this reply told the kernel a, so
			// the kept node must note it, or its next Open would take
			// the kernel's attributes for stale and drop them.
			known.note(a)
		}
	}
	return ch
}

// caller returns the uid and gid of the FUSE request's process. The server
// takes ownership of new inodes from the credentials in ctx (creds.with);
// these go in the requests' uid and gid fields, which it ignores.
func caller(ctx context.Context) (uid, gid uint32) {
	if c, ok := gofuse.FromContext(ctx); ok {
		return c.Uid, c.Gid
	}
	return 0, 0
}

// Lookup implements fs.NodeLookuper.
func (n *node) Lookup(ctx context.Context, name string, out *gofuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx = n.fsys.creds.with(ctx)
	a, err := n.fsys.c.Lookup(ctx, n.ino(), name)
	if err != nil {
		return nil, n.fsys.errno("lookup", err)
	}
	return n.child(ctx, a, out), 0
}

// Getattr implements fs.NodeGetattrer.
func (n *node) Getattr(ctx context.Context, _ fs.FileHandle, out *gofuse.AttrOut) syscall.Errno {
	if a, ok := n.freshAttr(); ok {
		fillAttr(&out.Attr, a)
		n.note(a)
		return 0
	}
	ctx = n.fsys.creds.with(ctx) // only calls to the server need them
	a, err := n.fsys.c.GetAttr(ctx, n.ino())
	if err != nil {
		return n.fsys.errno("getattr", err)
	}
	fillAttr(&out.Attr, a)
	n.note(a)
	return 0
}

// Setattr implements fs.NodeSetattrer. A size change (truncate or
// ftruncate) is ordered after this mount's acknowledged writes by the
// client.
func (n *node) Setattr(ctx context.Context, fh fs.FileHandle, in *gofuse.SetAttrIn, out *gofuse.AttrOut) syscall.Errno {
	ctx = n.fsys.creds.with(ctx)
	var s proto.SetAttrIn
	if m, ok := in.GetMode(); ok {
		s.Valid |= proto.SetMode
		s.Mode = m & 0o7777
	}
	if u, ok := in.GetUID(); ok {
		s.Valid |= proto.SetUid
		s.Uid = u
	}
	if g, ok := in.GetGID(); ok {
		s.Valid |= proto.SetGid
		s.Gid = g
	}
	if sz, ok := in.GetSize(); ok {
		s.Valid |= proto.SetSize
		s.Size = sz
	}
	if in.Valid&gofuse.FATTR_ATIME != 0 {
		if in.Valid&gofuse.FATTR_ATIME_NOW != 0 {
			s.Valid |= proto.SetAtimeNow
		} else {
			s.Valid |= proto.SetAtime
			s.Atime = int64(in.Atime)*1e9 + int64(in.Atimensec)
		}
	}
	if in.Valid&gofuse.FATTR_MTIME != 0 {
		if in.Valid&gofuse.FATTR_MTIME_NOW != 0 {
			s.Valid |= proto.SetMtimeNow
		} else {
			s.Valid |= proto.SetMtime
			s.Mtime = int64(in.Mtime)*1e9 + int64(in.Mtimensec)
		}
	}
	if in.Valid&gofuse.FATTR_CTIME != 0 {
		s.Valid |= proto.SetCtime
		s.Ctime = int64(in.Ctime)*1e9 + int64(in.Ctimensec)
	}
	n.stale()
	var a proto.Attr
	var err error
	if s.Valid != 0 && fh != nil {
		// ftruncate, or open with O_TRUNC: the open handle stands in for
		// write permission (see proto.SetHandle).
		s.Valid |= proto.SetHandle
		if h, ok := fh.(*handle); ok {
			if err := h.f.Stale(); err != nil {
				return n.fsys.errno("setattr", err)
			}
		}
	}
	if s.Valid == 0 {
		a, err = n.fsys.c.GetAttr(ctx, n.ino())
	} else {
		a, err = n.fsys.c.SetAttr(ctx, n.ino(), s)
	}
	if err != nil {
		return n.fsys.errno("setattr", err)
	}
	fillAttr(&out.Attr, a)
	n.note(a)
	return 0
}

// Create implements fs.NodeCreater: create and open in one step.
func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *gofuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	ctx = n.fsys.creds.with(ctx)
	uid, gid := caller(ctx)
	if mode&syscall.S_IFMT == 0 {
		mode |= syscall.S_IFREG
	}
	f, a, pa, err := n.fsys.c.CreateOpen(ctx, proto.CreateIn{
		Parent: n.ino(), Name: name, Mode: mode, Uid: uid, Gid: gid,
		Exclusive: flags&syscall.O_EXCL != 0,
	}, client.OpenAccess(flags))
	n.setFresh(pa)
	if err != nil {
		return nil, nil, 0, n.fsys.errno("create", err)
	}
	ch := n.child(ctx, a, out)
	h := newHandle(n.fsys, f, ch, flags, proto.JobFrom(ctx))
	return ch, h, h.openFlags(0), 0
}

// Mknod implements fs.NodeMknoder (fifos, sockets, device nodes, files).
func (n *node) Mknod(ctx context.Context, name string, mode uint32, dev uint32, out *gofuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx = n.fsys.creds.with(ctx)
	uid, gid := caller(ctx)
	n.stale()
	a, err := n.fsys.c.Create(ctx, proto.CreateIn{Parent: n.ino(), Name: name, Mode: mode, Rdev: dev, Uid: uid, Gid: gid, Exclusive: true})
	if err != nil {
		return nil, n.fsys.errno("mknod", err)
	}
	return n.child(ctx, a, out), 0
}

// Mkdir implements fs.NodeMkdirer.
func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *gofuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx = n.fsys.creds.with(ctx)
	uid, gid := caller(ctx)
	n.stale()
	a, err := n.fsys.c.Mkdir(ctx, n.ino(), name, mode&0o7777, uid, gid)
	if err != nil {
		return nil, n.fsys.errno("mkdir", err)
	}
	return n.child(ctx, a, out), 0
}

// Rmdir implements fs.NodeRmdirer.
func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	ctx = n.fsys.creds.with(ctx)
	pa, err := n.fsys.c.RmdirAt(ctx, n.ino(), name)
	n.setFresh(pa)
	return n.fsys.errno("rmdir", err)
}

// Unlink implements fs.NodeUnlinker. An open file stays usable: the server
// keeps it until its last Release, and the kernel keeps the node.
func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	ctx = n.fsys.creds.with(ctx)
	pa, err := n.fsys.c.UnlinkAt(ctx, n.ino(), name)
	n.setFresh(pa)
	return n.fsys.errno("unlink", err)
}

// Rename implements fs.NodeRenamer (flags as in renameat2).
func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	ctx = n.fsys.creds.with(ctx)
	np := proto.Ino(newParent.EmbeddedInode().StableAttr().Ino)
	n.stale()
	staleNode(newParent)
	if ch := n.GetChild(name); ch != nil {
		staleNode(ch.Operations()) // a moved directory's ".." and ctime change
	}
	if ch := newParent.EmbeddedInode().GetChild(newName); ch != nil {
		staleNode(ch.Operations())
	}
	return n.fsys.errno("rename", n.fsys.c.Rename(ctx, n.ino(), name, np, newName, flags))
}

// Link implements fs.NodeLinker.
func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *gofuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx = n.fsys.creds.with(ctx)
	ino := proto.Ino(target.EmbeddedInode().StableAttr().Ino)
	n.stale()
	a, err := n.fsys.c.Link(ctx, ino, n.ino(), name)
	if err != nil {
		return nil, n.fsys.errno("link", err)
	}
	return n.child(ctx, a, out), 0
}

// Symlink implements fs.NodeSymlinker.
func (n *node) Symlink(ctx context.Context, target, name string, out *gofuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx = n.fsys.creds.with(ctx)
	uid, gid := caller(ctx)
	n.stale()
	a, err := n.fsys.c.Symlink(ctx, n.ino(), name, target, uid, gid)
	if err != nil {
		return nil, n.fsys.errno("symlink", err)
	}
	return n.child(ctx, a, out), 0
}

// Readlink implements fs.NodeReadlinker.
func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	ctx = n.fsys.creds.with(ctx)
	t, err := n.fsys.c.Readlink(ctx, n.ino())
	if err != nil {
		return nil, n.fsys.errno("readlink", err)
	}
	return []byte(t), 0
}

// Open implements fs.NodeOpener. The attributes come fresh from the metadata
// server, or from this mount's lease cache for an open the client makes
// there (client.OpenCached: the lease makes them the leader's); if they
// differ from what the kernel was last told, its cached attributes are
// invalidated, and the reply never asks to keep the page cache, so a
// reader sees what writers closed before this open.
func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	ctx = n.fsys.creds.with(ctx)
	want := client.OpenAccess(flags)
	// A read-only open of an empty file this mount holds under a lease,
	// or of a small one whose copy its lookup brought, needs nothing from
	// the leader (client.OpenCached); O_DIRECT and O_TRUNC opens always
	// ask.
	var (
		f  *client.File
		a  proto.Attr
		ok bool
	)
	if flags&(syscall.O_DIRECT|syscall.O_TRUNC) == 0 {
		f, a, ok = n.fsys.c.OpenCached(ctx, n.ino(), want)
	}
	if !ok {
		var err error
		if f, a, err = n.fsys.c.Open(ctx, n.ino(), want); err != nil {
			return nil, 0, n.fsys.errno("open", err)
		}
	}
	n.mu.Lock()
	changed := n.seen && (n.seenSize != a.Size || n.seenMtime != a.Mtime)
	keep := n.opened && n.openSize == a.Size && n.openMtime == a.Mtime && n.openCtime == a.Ctime
	n.opened, n.openSize, n.openMtime, n.openCtime = true, a.Size, a.Mtime, a.Ctime
	n.mu.Unlock()
	if changed {
		// Offset -1: attributes only; the page cache is dropped by the
		// kernel because FOPEN_KEEP_CACHE is not set (keep is false).
		_ = n.NotifyContent(-1, 0)
		n.note(a)
	}
	var fuseFlags uint32
	if keep && !changed {
		fuseFlags = gofuse.FOPEN_KEEP_CACHE
	}
	h := newHandle(n.fsys, f, n.EmbeddedInode(), flags, proto.JobFrom(ctx))
	return h, h.openFlags(fuseFlags), 0
}

// Statfs implements fs.NodeStatfser: usage summed over the storage targets.
func (n *node) Statfs(ctx context.Context, out *gofuse.StatfsOut) syscall.Errno {
	ctx = n.fsys.creds.with(ctx)
	s, err := n.fsys.c.StatFS(ctx)
	if err != nil {
		return n.fsys.errno("statfs", err)
	}
	const bs = 4096
	out.Bsize, out.Frsize = bs, bs
	out.Blocks = s.Total / bs
	out.Bfree = s.Free / bs
	out.Bavail = s.Free / bs
	out.Files = s.Files + s.FilesFree
	out.Ffree = s.FilesFree
	out.NameLen = 255
	return 0
}
