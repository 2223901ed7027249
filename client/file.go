package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/weft-fs/weft/layout"
	"github.com/weft-fs/weft/proto"
)

// inodeState is what this client knows about a regular file that is open
// (or being truncated) here. All handles of one inode on one client share it,
// so that reads through one handle see writes through another, and the
// kernel is told one consistent size.
//
// Invariants (under mu):
//   - open holds the accepted bytes not yet sent (see coalesce.go): pairwise
//     disjoint extents, each within one chunk, none overlapping a write in
//     flight; inflight holds every send whose storage RPCs have not
//     finished, no two of them overlapping. A write is accepted only once
//     it overlaps nothing in flight, so overlapping writes reach storage in
//     the order they were accepted.
//   - held is the bytes of open plus inflight: what this inode holds of
//     the client budget, at most Client.perFile unless a single write is
//     larger.
//   - end is the highest byte written through this client since the file
//     was opened here (reset by truncate); the file's size as this client
//     reports it is max(metaSize, end).
//   - doneEnd <= end is the highest byte of those writes that reached
//     storage (their sends finished without error; copies and fallocate,
//     which are done when they return): what a WriteDone may record. A
//     size recorded past it would cover bytes still on their way to the
//     objects (a write of another handle, accepted after a flush drained),
//     which a crash then, or a read meanwhile, finds missing.
//   - dirty says some acknowledged write has not been recorded by WriteDone.
//   - err is the first failed background write, not yet reported by a
//     write, flush or fsync.
//   - a timer is armed (timerArmed) whenever open is not empty.
type inodeState struct {
	c    *Client
	ino  proto.Ino
	gen  uint64 // the file's generation: part of every object's name
	refs int    // guarded by Client.mu

	// doneMu serializes writeDone: one WriteDone of this inode in flight
	// at a time. Two in flight at once (the kernel's late RELEASE of an
	// earlier handle flushing while a futimens settles) could be applied
	// in either order, so the one that covered the writes could land
	// after the explicit time set the other let through, and move the
	// mtime it set. A truncate holds it too (beginTruncate to
	// endTruncate), or a late WriteDone would undo it.
	doneMu sync.Mutex

	// truncates counts the truncates this client began on the file: a
	// read that saw one begin meanwhile may have read an object as the
	// truncate left it for a moment (checkLength, readEpoch). Atomic, so
	// that a read takes no lock to note it.
	truncates atomic.Uint64

	mu sync.Mutex
	// job is the job (proto.WithJob) of the latest read or write through
	// this client: write-behind sends and read-ahead fetches, which run
	// in the background, are counted for it (jobid.go).
	job       string
	cond      *sync.Cond
	layout    layout.Layout
	metaSize  uint64
	end       uint64
	doneEnd   uint64
	dirty     bool
	seq       uint64 // counts accepted writes, so a WriteDone knows what it covered
	lastWrite int64  // unix ns of the last accepted write (reported as mtime while dirty)
	allocEnd  uint64 // the end of the furthest range fallocate reserved here (objects may hold blocks past the size)
	unsynced  map[int]bool
	// written is, per stripe, the end of the bytes this client sent to
	// its objects since the last truncate: with metaSize, what Flush
	// knows the objects already reach (sized.go).
	written    map[int]uint64
	open       []*extent
	inflight   []*pendingWrite
	held       uint64
	timer      *time.Timer
	timerArmed bool
	truncating int
	err        error
	// overQuota: the last WriteDone was refused with EDQUOT (quota.go):
	// writes past the recorded size fail with EDQUOT until one succeeds.
	overQuota bool
	ra        readAhead

	caps caps // the capabilities its storage requests carry (capability.go)
	// alloc: the objects' block counts known from write replies
	// (allocated.go).
	alloc allocCounts

	// strict: a write that misses an object fails instead of marking the
	// object stale (a restripe's new objects, migrate.go).
	strict bool

	// moved is a generation other than gen the metadata service named for
	// the inode (0: none): a restripe may have replaced these objects, so
	// each handle on this state asks to follow it (follow.go).
	moved atomic.Uint64

	// shadow (valid while shadowOK) is what this client wrote to a file
	// it opened at size 0, to offer as the file's copy; small is the
	// file's content from the service's copy, served to reads (both
	// copies.go).
	shadow   []byte
	shadowOK bool
	offered  atomic.Bool
	small    []byte
}

type pendingWrite struct {
	off, end uint64
	job      string // see inodeState.job
}

func (st *inodeState) overlaps(off, end uint64) bool {
	for _, p := range st.inflight {
		if p.off < end && off < p.end {
			return true
		}
	}
	return false
}

// drainLocked sends the open extents and waits until no write is in
// flight: everything accepted so far has reached storage (or failed).
func (st *inodeState) drainLocked() {
	st.pushAllLocked()
	for len(st.inflight) > 0 {
		st.cond.Wait()
	}
}

func (st *inodeState) size() uint64 { return max(st.metaSize, st.end) }

func (st *inodeState) mergeAttr(a *proto.Attr) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.metaSize = a.Size
	a.Size = st.size()
	if st.dirty && st.lastWrite > a.Mtime {
		a.Mtime = st.lastWrite
		a.Ctime = max(a.Ctime, st.lastWrite)
	}
	if st.end == 0 && !st.dirty && len(a.Layout.Targets) > 0 {
		st.layout = a.Layout.Clone()
	} else if slices.Equal(st.layout.Targets, a.Layout.Targets) {
		// The server's stale marks include every mark this client made
		// (it marks there first); a repair cleared the others.
		st.layout.Stale = slices.Clone(a.Layout.Stale)
	}
}

func (st *inodeState) setLayout(l layout.Layout) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.end == 0 && !st.dirty {
		st.layout = l.Clone()
	}
}

// beginTruncate stops new writes from being issued, waits for the ones in
// flight and returns the layout to truncate. It also waits for a WriteDone
// under way and holds off new ones until endTruncate (doneMu): a WriteDone
// of writes before the truncate (the kernel's late RELEASE of an earlier
// handle flushing) that the metadata server applied after the truncate
// would set the size back up to what it covered (fsx: "Size error").
func (st *inodeState) beginTruncate() layout.Layout {
	st.doneMu.Lock()
	st.mu.Lock()
	defer st.mu.Unlock()
	st.truncating++
	st.truncates.Add(1)
	st.drainLocked()
	st.dropRALocked()
	st.noShadowLocked()
	st.c.noteChange(st.ino)
	return st.layout
}

func (st *inodeState) endTruncate() {
	st.mu.Lock()
	st.truncating--
	st.cond.Broadcast()
	st.mu.Unlock()
	st.doneMu.Unlock()
}

func (st *inodeState) truncated(a *proto.Attr, size uint64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.metaSize = a.Size
	st.end = min(st.end, size)
	st.doneEnd = min(st.doneEnd, size)
	clear(st.written) // every object is its share of size now
	st.allocEnd = min(st.allocEnd, size)
	if st.dirty {
		a.Mtime = max(a.Mtime, st.lastWrite)
	}
	if a.Blocks > 0 {
		// The server's block count is only an upper bound now: have the
		// next flush count and report the real one, with the truncate's
		// mtime as the last change (a close later does not move it).
		st.dirty = true
		st.seq++
		st.lastWrite = max(st.lastWrite, a.Mtime)
	}
}

// newFile makes the handle for an inode the metadata server just opened
// for want, with a its fresh attributes and cap its capability; for a
// regular file it takes a reference on the shared state, adds the
// capability to it and overlays this client's unreported writes on a.
func (c *Client) newFile(ctx context.Context, a *proto.Attr, cap, data []byte, mark uint64, want proto.Access, gen uint64) *File {
	f := &File{c: c, ino: a.Ino, gen: gen, want: want}
	if c.sess != nil {
		c.sess.opened(a.Ino, gen, want.Has(proto.AccessWrite))
	}
	if a.IsRegular() {
		st := c.acquire(a, data, mark)
		if want != 0 {
			st.setCap(newHeldCap(ctx, cap, want))
		}
		f.view.Store(&fileView{st: st})
	}
	return f
}

// acquire returns the shared state of ino, creating it from attrs fresh from
// Open (or merging them into the existing one), and takes a reference.
// data is the file's copy the open answered (nil: none), mark the inode's
// change counter before the open was sent (changeMark).
func (c *Client) acquire(a *proto.Attr, data []byte, mark uint64) *inodeState {
	c.mu.Lock()
	st := c.open[a.Ino]
	if st == nil || st.gen != a.Gen {
		// None yet, or one for an earlier generation of the file: of a
		// file a restripe replaced (its handles follow it to this state,
		// follow.go) or of another file that had the number (reused after
		// a metadata rollback), whose handles the service refuses to
		// follow. Either way it is no longer found by number.
		if st != nil {
			st.moved.Store(a.Gen)
		}
		st = &inodeState{c: c, ino: a.Ino, gen: a.Gen, unsynced: map[int]bool{}, written: map[int]uint64{}}
		st.cond = sync.NewCond(&st.mu)
		st.layout = a.Layout.Clone()
		st.metaSize = a.Size
		_, copies := c.copies.get()
		st.shadowOK = copies && a.Size == 0      // nothing to offer to a service without copies
		st.installCopyLocked(data, a.Size, mark) // nobody else has st yet
		c.open[a.Ino] = st
		st.refs++
		c.mu.Unlock()
		return st
	}
	st.refs++
	c.mu.Unlock()
	st.mergeAttr(a)
	st.mu.Lock()
	st.dropRALocked() // close-to-open: nothing fetched before this open is served after it
	st.installCopyLocked(data, a.Size, mark)
	st.mu.Unlock()
	return st
}

func (c *Client) unref(st *inodeState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st.refs--
	if st.refs == 0 {
		if c.open[st.ino] == st {
			delete(c.open, st.ino)
		}
		st.mu.Lock()
		st.pushAllLocked() // normally empty: the last handle was flushed
		st.stopTimerLocked()
		st.dropRALocked()
		st.mu.Unlock()
		st.stopCaps()
		if f, ok := c.storage.(forgetter); ok {
			f.Forget(st.ino) // short-circuit reads' descriptors of its objects
		}
	}
}

// forgetter is a storage client that keeps something per file until told
// the file was closed (localread.Reader's descriptors).
type forgetter interface{ Forget(ino proto.Ino) }

// File is an open handle on a file. Its methods are safe for concurrent use.
type File struct {
	c *Client
	// view is the inode state the handle reads and writes through (nil
	// for files that are not regular: no data path); a restripe's follow
	// replaces it (follow.go).
	view     atomic.Pointer[fileView]
	followMu sync.Mutex   // serializes follows and the release's last look at view
	want     proto.Access // what it was opened for (a follow asks for the same)
	ino      proto.Ino
	gen      uint64      // the session generation it was opened in (session.go)
	local    *localOpens // opened from the lease cache (cached.go); nil: opened by the server
	mu       sync.Mutex
	released bool
	owners   map[uint64]bool // lock owners that locked through it (locks.go); guarded by mu
}

// fileView is a handle's inode state with its sequential-read state.
type fileView struct {
	st *inodeState
	ra raStream // guarded by st.mu
}

// state returns the inode state the handle uses now (nil: not a regular
// file).
func (f *File) state() *inodeState {
	if v := f.view.Load(); v != nil {
		return v.st
	}
	return nil
}

// Open opens ino for want (see OpenAccess): the metadata server checks the
// caller's permission (EACCES), registers the handle (an unlinked file
// lives until its last handle is released) and returns fresh attributes,
// which is where close-to-open consistency starts, and the capability the
// file's storage requests carry. The returned attributes include this
// client's unreported writes.
func (c *Client) Open(ctx context.Context, ino proto.Ino, want proto.Access) (*File, proto.Attr, error) {
	rctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	var (
		a   proto.Attr
		cap []byte
	)
	var data []byte
	mark := c.changeMark(ino)
	gen, err := c.withSession(rctx, func() (err error) {
		a, cap, data, err = c.openMeta(rctx, ino, want)
		return err
	})
	if err != nil {
		return nil, proto.Attr{}, err
	}
	if want == proto.AccessRead {
		c.demand.opened(ino)
		if data != nil && c.leases != nil {
			c.leases.openedFromLeader(ino)
			if c.readAheadOK() {
				if i, ok := c.ahead.missed(ino); ok {
					c.readAhead(ctx, i, ino)
				}
			}
		}
	}
	return c.newFile(ctx, &a, cap, data, mark, want, gen), a, nil
}

// Stale returns an error matching ESTALE if the handle belongs to a
// metadata session that expired: the server dropped the handle and may
// have reclaimed its file, so nothing may go through it.
func (f *File) Stale() error { return f.stale(context.Background()) }

// stale is Stale, first making sure the session is not older than its
// lease (session.validate).
func (f *File) stale(ctx context.Context) error {
	s := f.c.sess
	if s == nil {
		return nil
	}
	if err := s.validate(ctx); err != nil {
		return err
	}
	if s.gen.Load() != f.gen {
		return s.staleErr(f.ino)
	}
	return nil
}

// Ino returns the file's inode number.
func (f *File) Ino() proto.Ino { return f.ino }

// Size returns the file size as this client sees it.
func (f *File) Size() uint64 {
	st := f.state()
	if st == nil {
		return 0
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.size()
}

// Write acknowledges p at off once it is copied into the write-behind
// buffer. The bytes are merged with this client's other unsent writes to
// the file that they touch and sent to the storage targets in the
// background, one RPC per chunk (see coalesce.go). A write overlapping one
// in flight waits for it, so overlapping writes reach storage in order.
// The first background failure is returned by the next Write, Flush or
// Fsync.
func (f *File) Write(ctx context.Context, p []byte, off uint64) (int, error) {
	st := f.state()
	if st == nil {
		return 0, syscall.EINVAL
	}
	if err := f.stale(ctx); err != nil {
		return 0, err
	}
	n := uint64(len(p))
	if n == 0 {
		return 0, nil
	}
	if err := st.dropOffered(ctx, f.gen); err != nil {
		return 0, err
	}
	end := off + n
	if end < off {
		return 0, syscall.EFBIG
	}
	c := f.c
	st.mu.Lock()
	if err := st.err; err != nil {
		st.mu.Unlock()
		return 0, err
	}
	if err := st.quotaCheckLocked(end); err != nil {
		st.mu.Unlock()
		return 0, err
	}
	if st.layout.StripeSize == 0 || len(st.layout.Targets) == 0 {
		st.mu.Unlock()
		return 0, fmt.Errorf("client: ino %d has no usable layout (%v): %w", st.ino, st.layout, syscall.EIO)
	}
	st.mu.Unlock()

	if !c.budget.tryAcquire(n) {
		// Bytes this file buffers may be what the budget waits for.
		st.mu.Lock()
		st.pushAllLocked()
		st.mu.Unlock()
		c.budget.acquire(n)
	}
	st.mu.Lock()
	for {
		if err := st.err; err != nil {
			st.mu.Unlock()
			c.budget.release(n)
			return 0, err
		}
		fits := st.held == 0 || st.held+n <= c.perFile.Load()
		if st.truncating == 0 && !st.overlaps(off, end) && fits {
			break
		}
		if !fits {
			st.pushAllLocked()
		}
		st.cond.Wait()
	}
	now := time.Now().UnixNano()
	st.job = proto.JobFrom(ctx)
	c.noteChange(st.ino)
	st.shadowLocked(p, off)
	added := st.bufferLocked(p, off, now)
	st.held += added
	st.end = max(st.end, end)
	st.dirty = true
	st.dropRALocked()
	st.seq++
	st.lastWrite = now
	st.mu.Unlock()
	if added < n {
		c.budget.release(n - added) // overwrote bytes already buffered
	}
	return len(p), nil
}

// writeBehind sends one extent (pw, its bytes in buf) and then gives its
// memory back.
func (c *Client) writeBehind(st *inodeState, pw *pendingWrite, l layout.Layout, exts []layout.Extent, buf []byte) {
	defer c.wg.Done()
	ctx, cancel := context.WithTimeout(withJob(c.base, pw.job), c.cfg.Timeout)
	err := c.writeExtents(ctx, st, l, "write", pw.off, buf[:pw.end-pw.off], exts)
	cancel()
	if err != nil {
		c.log.Warn("background write failed", "ino", st.ino, "err", err)
	}
	st.mu.Lock()
	for i, p := range st.inflight {
		if p == pw {
			st.inflight = append(st.inflight[:i], st.inflight[i+1:]...)
			break
		}
	}
	st.held -= pw.end - pw.off
	if err == nil {
		st.doneEnd = max(st.doneEnd, pw.end)
	} else {
		// The shadow holds bytes the objects may lack now: it is
		// never offered (copies.go).
		st.noShadowLocked()
		if st.err == nil {
			st.err = err
		}
	}
	st.cond.Broadcast()
	st.mu.Unlock()
	c.bufs.Put(buf)
	c.budget.release(pw.end - pw.off)
}

// writeExtents writes p, the bytes at file offset off, to st's objects
// under layout l (exts: l's extents of the range; what names the write in
// errors): an EC range through ecWrite, other layouts extent by extent on
// every fresh copy of its stripe.
func (c *Client) writeExtents(ctx context.Context, st *inodeState, l layout.Layout, what string, off uint64, p []byte, exts []layout.Extent) error {
	if l.Kind == layout.EC {
		return c.ecWrite(ctx, st, l, off, p)
	}
	return parallel(len(exts), func(i int) error {
		e := exts[i]
		data := p[e.FileOff-off:][:e.Len]
		return c.onStripe(ctx, st, l, e.Stripe, fmt.Sprintf("%s [%d,+%d) to", what, e.FileOff, e.Len), func(ctx context.Context, t proto.TargetID, obj proto.ObjectID) error {
			return st.withCap(ctx, proto.AccessWrite, func(ctx context.Context) error {
				return c.writeObject(ctx, st, t, obj, e.ObjOff, data)
			})
		})
	})
}

// Read reads into p from off. It waits for this client's in-flight writes
// that overlap the range, clamps to the file size and fetches the stripe
// units concurrently; holes and short objects read as zeros.
func (f *File) Read(ctx context.Context, p []byte, off uint64) (int, error) {
	bufs, release, err := f.ReadBufs(ctx, p, off)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, b := range bufs {
		if len(b) > 0 && &b[0] != &p[n] {
			copy(p[n:], b)
		}
		n += len(b)
	}
	release()
	return n, nil
}

// ReadBufs is Read without the copy out of read-ahead chunks: it returns
// the bytes read as consecutive slices, each either into p or into a
// fetched read-ahead chunk. The chunks stay referenced (their memory is
// neither reused nor given back to the budget) until release is called,
// which the caller must do exactly once when it no longer reads the
// slices. On error there is nothing to release (release is nil).
//
// A handle opened before a restripe follows the file to its new objects
// (follow.go): when the service named a new generation, before the read,
// and when the read found its objects gone, reading again once.
func (f *File) ReadBufs(ctx context.Context, p []byte, off uint64) (bufs [][]byte, release func(), err error) {
	if f.state() == nil {
		return nil, nil, syscall.EINVAL
	}
	if err := f.stale(ctx); err != nil {
		return nil, nil, err
	}
	if err := f.followIfMoved(ctx); err != nil {
		return nil, nil, err
	}
	bufs, release, err = f.readBufs(ctx, p, off)
	if errors.Is(err, errMoved) {
		if ferr := f.follow(ctx); ferr != nil {
			return nil, nil, fmt.Errorf("%w (%w)", err, ferr)
		}
		bufs, release, err = f.readBufs(ctx, p, off)
	}
	return bufs, release, err
}

func (f *File) readBufs(ctx context.Context, p []byte, off uint64) (bufs [][]byte, release func(), err error) {
	v := f.view.Load()
	st := v.st
	st.mu.Lock()
	for {
		// Unsent writes of this client in the range go out first, so the
		// read sees them.
		st.pushLocked(off, off+uint64(len(p)))
		if st.truncating == 0 && !st.overlaps(off, off+uint64(len(p))) {
			break
		}
		st.cond.Wait()
	}
	size := st.size()
	if off >= size || len(p) == 0 {
		st.mu.Unlock()
		return nil, noRelease, nil
	}
	if n, ok := st.readSmallLocked(p, off, size); ok {
		st.mu.Unlock()
		return [][]byte{p[:n]}, noRelease, nil
	}
	st.job = proto.JobFrom(ctx)
	pieces := f.c.readAheadLocked(st, &v.ra, p, off, size)
	l := st.layout
	st.mu.Unlock()
	n := min(uint64(len(p)), size-off)
	p = p[:n]
	if len(l.Targets) == 0 || l.StripeSize == 0 {
		clear(p)
		return [][]byte{p}, noRelease, nil
	}
	ctx, cancel := f.c.rpcCtx(ctx)
	defer cancel()
	if pieces != nil {
		return f.readPieces(ctx, st, l, pieces, p, off)
	}
	if err := f.c.readRange(ctx, st, l, off, p); err != nil {
		return nil, nil, err
	}
	return [][]byte{p}, noRelease, nil
}

func noRelease() {}

// readPieces serves a read split by readAheadLocked: pieces covered by a
// chunk are served from it once it is fetched (and still current), the
// others are read directly into p.
func (f *File) readPieces(ctx context.Context, st *inodeState, l layout.Layout, pieces []raPiece, p []byte, off uint64) (_ [][]byte, _ func(), err error) {
	unref := func() {
		for _, pc := range pieces {
			if pc.ch != nil {
				pc.ch.unref()
			}
		}
	}
	defer func() {
		if err != nil {
			unref()
		}
	}()
	for i := range pieces {
		pc := &pieces[i]
		if pc.ch == nil {
			continue
		}
		select {
		case <-pc.ch.done:
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("client: read ino %d at %d: waiting for read-ahead: %w", st.ino, pc.off, syscall.ETIMEDOUT)
		}
	}
	// A write or truncate accepted while we waited dropped the chunks it
	// made stale: read those pieces directly.
	st.mu.Lock()
	for i := range pieces {
		pc := &pieces[i]
		if pc.ch != nil && (pc.ch.err != nil || st.ra.chunks[pc.ch.off] != pc.ch) {
			pc.ch.unref()
			pc.ch = nil
		}
	}
	st.mu.Unlock()
	var direct []int
	bufs := make([][]byte, len(pieces))
	for i, pc := range pieces {
		if pc.ch != nil {
			bufs[i] = pc.ch.buf[pc.off-pc.ch.off : pc.end-pc.ch.off]
		} else {
			bufs[i] = p[pc.off-off : pc.end-off]
			direct = append(direct, i)
		}
	}
	err = parallel(len(direct), func(j int) error {
		pc := pieces[direct[j]]
		return f.c.readRange(ctx, st, l, pc.off, p[pc.off-off:pc.end-off])
	})
	if err != nil {
		return nil, nil, err
	}
	return bufs, unref, nil
}

// readRange fills p with the file bytes at off, fetching stripe units
// concurrently; holes and short objects read as zeros.
func (c *Client) readRange(ctx context.Context, st *inodeState, l layout.Layout, off uint64, p []byte) error {
	ctx = st.readEpoch(ctx)
	exts := l.Extents(off, uint64(len(p)))
	if l.Kind == layout.EC {
		return c.ecReadRange(ctx, st, l, off, p, exts)
	}
	return c.readExtents(ctx, st, l, off, p, exts)
}

// readExtents reads extents exts of the file into p (which holds the
// file from off) concurrently; what an object lacks reads as zeros.
func (c *Client) readExtents(ctx context.Context, st *inodeState, l layout.Layout, off uint64, p []byte, exts []layout.Extent) error {
	return parallel(len(exts), func(i int) error {
		e := exts[i]
		dst := p[e.FileOff-off:][:e.Len]
		got, err := c.readExtent(ctx, st, l, e, dst)
		if err != nil {
			return err
		}
		clear(dst[got:])
		return nil
	})
}

// takeErr returns and clears the latched write error: it is reported once,
// by the flush or fsync that comes after it.
func (st *inodeState) takeErrLocked() error {
	err := st.err
	st.err = nil
	return err
}

// Flush sends the unsent writes, waits for the writes in flight, reports a failed one, and records the
// written size and mtime on the metadata server (WriteDone). After Flush
// returns nil, every write acknowledged before it is readable by any client
// that opens the file afterwards.
func (f *File) Flush(ctx context.Context) error {
	st := f.state()
	if st == nil {
		return nil
	}
	if err := f.stale(ctx); err != nil {
		return err
	}
	st.mu.Lock()
	st.drainLocked()
	st.dropRALocked()
	if err := st.takeErrLocked(); err != nil {
		st.mu.Unlock()
		return err
	}
	st.mu.Unlock()
	return f.writeDone(ctx)
}

func (f *File) writeDone(ctx context.Context) error { return f.state().writeDone(ctx, f.gen) }

// writeDone records the acknowledged writes on the metadata server, if
// there are any not yet recorded: the highest byte written and the time of
// the last write, which becomes the file's mtime (so a close long after the
// last write does not move mtime). gen is the session generation the call
// belongs to (handleCall). A WriteDone already in flight is waited for
// first (doneMu): returning while it is out would let a caller order an
// operation (an explicit mtime) before it.
func (st *inodeState) writeDone(ctx context.Context, gen uint64) error {
	st.doneMu.Lock()
	defer st.doneMu.Unlock()
	st.mu.Lock()
	if !st.dirty {
		st.mu.Unlock()
		return nil
	}
	// Only what reached storage: a write accepted since the caller
	// drained may still be on its way, and then this WriteDone does not
	// cover it (dirty stays set for the flush after it).
	seq, end, mtime := st.seq, st.doneEnd, st.lastWrite
	settled := len(st.open) == 0 && len(st.inflight) == 0
	ext := st.extendsLocked(end)
	l, span := st.layout, max(st.size(), st.allocEnd)
	offer := st.offerLocked(end, settled)
	st.mu.Unlock()
	c := st.c
	if err := c.extendObjects(ctx, st, l, ext, end); err != nil {
		return err
	}
	rctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	blocks := st.allocatedBlocks(rctx, l, span)
	a, offered, err := st.recordWrite(rctx, gen, end, mtime, blocks, offer)
	st.noteQuota(err)
	if err != nil {
		return err
	}
	st.mu.Lock()
	if offered {
		// Offered (taken or refused): the service takes a copy only from
		// a file's first WriteDone.
		st.noShadowLocked()
		st.offered.Store(true)
	}
	st.metaSize = a.Size
	if settled && st.seq == seq {
		st.dirty = false
	}
	st.mu.Unlock()
	return nil
}

// settle makes the metadata server's attributes account for every write
// this client accepted so far: it sends them, waits for them and records
// them (writeDone). It is what an explicit time set does first, so that
// writes buffered before it cannot move the mtime it sets. A failed
// background write is left latched for the next write, close or fsync to
// report, and nothing is recorded then.
func (st *inodeState) settle(ctx context.Context, gen uint64) error {
	st.mu.Lock()
	st.drainLocked()
	failed := st.err != nil
	st.mu.Unlock()
	if failed {
		return nil
	}
	return st.writeDone(ctx, gen)
}

// Fsync sends the unsent writes, waits for the writes in flight, makes every object written since
// the last fsync durable (StorageService.Sync, concurrently), then records
// the size with WriteDone. Data is acknowledged (durable and visible to
// other clients) once Fsync or Flush returns nil.
func (f *File) Fsync(ctx context.Context) error {
	st := f.state()
	if st == nil {
		return nil
	}
	if err := f.stale(ctx); err != nil {
		return err
	}
	st.mu.Lock()
	st.drainLocked()
	if err := st.takeErrLocked(); err != nil {
		st.mu.Unlock()
		return err
	}
	stripes := make([]int, 0, len(st.unsynced))
	for s := range st.unsynced {
		stripes = append(stripes, s)
	}
	clear(st.unsynced)
	l := st.layout
	st.mu.Unlock()

	if len(stripes) > 0 {
		rctx, cancel := f.c.rpcCtx(ctx)
		err := parallel(len(stripes), func(i int) error {
			if l.Kind == layout.EC {
				return f.c.ecSync(rctx, st, l, stripes[i])
			}
			return f.c.onStripe(rctx, st, l, stripes[i], "sync", func(ctx context.Context, t proto.TargetID, obj proto.ObjectID) error {
				return st.withCap(ctx, proto.AccessWrite, func(ctx context.Context) error {
					return f.c.storage.Sync(ctx, t, obj)
				})
			})
		})
		cancel()
		if err != nil {
			st.mu.Lock()
			for _, s := range stripes {
				st.unsynced[s] = true
			}
			st.mu.Unlock()
			return err
		}
	}
	return f.writeDone(ctx)
}

// Release drops the handle: writes still unreported are flushed (the kernel
// normally flushes before releasing) and the metadata server's open handle
// is dropped. Release is idempotent.
func (f *File) Release(ctx context.Context) error {
	f.mu.Lock()
	if f.released {
		f.mu.Unlock()
		return nil
	}
	f.released = true
	f.mu.Unlock()

	var errs []error
	f.followMu.Lock() // no follow moves the handle after this look
	st := f.state()
	f.followMu.Unlock()
	if st != nil {
		errs = append(errs, f.Flush(ctx))
		f.c.unref(st)
	}
	errs = append(errs, f.releaseLocks(ctx))
	if f.c.sess != nil && !f.c.sess.released(f.ino, f.gen, f.local) {
		// A stale handle (the server dropped it with its session), or
		// one the server never counted (opened from the cache).
		return errors.Join(errs...)
	}
	rctx, cancel := f.c.rpcCtx(ctx)
	defer cancel()
	errs = append(errs, f.c.meta.Release(rctx, f.ino))
	return errors.Join(errs...)
}

// Truncate changes the size through this handle (ftruncate): it is ordered
// after the writes this client acknowledged before it.
func (f *File) Truncate(ctx context.Context, size uint64) (proto.Attr, error) {
	if err := f.stale(ctx); err != nil {
		return proto.Attr{}, err
	}
	return f.c.SetAttr(ctx, f.ino, proto.SetAttrIn{Valid: proto.SetSize, Size: size})
}
