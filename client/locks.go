package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/weft-fs/weft/proto"
)

// Lock kinds a lock owner holds on an inode.
const (
	heldPosix uint8 = 1 << iota // POSIX or OFD byte-range locks
	heldFlock                   // a flock lock
)

type lockKey struct {
	ino   proto.Ino
	owner uint64
}

// lockBook is what this client's lock owners hold, as the server granted
// it: so that closes release locks with no round trip when there are none
// (the common case), and so that the locks can be reclaimed after the
// metadata server restarted. It also counts the open Files each owner
// locked through.
type lockBook struct {
	mu    sync.Mutex
	held  map[lockKey][]proto.Lock
	users map[lockKey]int

	waiters chan struct{} // LockWait requests at the server (maxLockWaits)
}

func (b *lockBook) init() {
	b.held = map[lockKey][]proto.Lock{}
	b.users = map[lockKey]int{}
	b.waiters = make(chan struct{}, maxLockWaits)
}

// reset forgets every lock: the session that held them is gone, and the
// server released them with it.
func (b *lockBook) reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	clear(b.held)
}

// kinds returns the kinds of lock in held.
func kinds(held []proto.Lock) uint8 {
	var k uint8
	for _, l := range held {
		if l.Flock {
			k |= heldFlock
		} else {
			k |= heldPosix
		}
	}
	return k
}

// ClusterLocks reports whether the metadata service keeps locks and
// reserves appends (metarpc and meta.Server do; test fakes may not).
func (c *Client) ClusterLocks() bool { return c.locker != nil }

// lockRetryPause is how long a waiter pauses after a failed LockWait.
const lockRetryPause = 100 * time.Millisecond

// maxLockWaits bounds the LockWait requests one client has at the server
// at once: each holds a request slot of its connection (the transport
// bounds those, 256 per connection) for up to two seconds, and a crowd of
// waiters must not hold up the client's other requests, among them the
// unlock they wait for. Waiters beyond it poll every lockRetryPause.
const maxLockWaits = 32

var errTooManyWaits = errors.New("client: too many lock waits at the server")

// errNoLocks answers lock calls when the metadata service keeps no locks.
var errNoLocks = fmt.Errorf("client: the metadata service keeps no locks: %w", syscall.ENOLCK)

// Lock takes, changes or releases lk through this handle (F_SETLK, flock
// with LOCK_NB), or with test reports the first conflicting lock of another
// owner on any client (F_GETLK; Type LockUnlock: none). A conflict fails
// with EAGAIN. Locks are kept by the metadata service for the whole
// cluster; see package meta, "Locks".
func (f *File) Lock(ctx context.Context, lk proto.Lock, test bool) (proto.Lock, error) {
	mode := proto.LockSet
	if test {
		mode = proto.LockTest
	}
	if f.c.locker == nil {
		return proto.Lock{}, errNoLocks
	}
	if err := f.stale(ctx); err != nil {
		return proto.Lock{}, err
	}
	f.pinLocal(ctx, "a lock") // locks are taken through handles the server counts
	var flushErr error
	if !test {
		f.useOwner(lk.Owner)
		if lk.Type == proto.LockUnlock {
			// What this owner wrote under the lock is on the targets and
			// its size recorded before anyone else can take the lock.
			flushErr = f.Flush(ctx)
		}
	}
	rctx, cancel := f.c.rpcCtx(ctx)
	defer cancel()
	var out proto.Lock
	err := f.c.handleCall(rctx, f.ino, f.gen, func() (err error) {
		out, err = f.c.locker.Lock(rctx, f.ino, lk, mode)
		return err
	})
	if err != nil || mode == proto.LockTest {
		return out, err
	}
	f.c.locks.note(f.ino, lk)
	if lk.Type != proto.LockUnlock {
		f.revalidate(ctx)
	}
	return out, flushErr
}

// revalidate forgets what this client may have cached of the file (its
// read-ahead, the size the server had) once a lock was granted: whoever
// held the lock before flushed what it wrote when it let go, so a lock
// holder reads what the previous holder wrote, as with NFS. The kernel's
// page cache is the FUSE adapter's to drop.
func (f *File) revalidate(ctx context.Context) {
	if st := f.state(); st != nil {
		st.mu.Lock()
		st.dropRALocked()
		st.mu.Unlock()
	}
	if _, err := f.c.GetAttr(ctx, f.ino); err != nil {
		f.c.log.Warn("client: attributes after taking a lock", "ino", f.ino, "err", err)
	}
}

// LockWait is Lock that waits while the lock conflicts (F_SETLKW, flock
// without LOCK_NB) until it is granted or ctx ends (a signal: the FUSE
// interrupt), then failing with EINTR. The metadata service never grants a
// lock to a waiter on its own: each round asks it (LockWait, bounded) to
// answer once the conflict may be gone, then tries Lock again, so a waiter
// that gave up never ends up holding a lock.
func (f *File) LockWait(ctx context.Context, lk proto.Lock) error {
	for {
		_, err := f.Lock(ctx, lk, false)
		if !errors.Is(err, syscall.EAGAIN) {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("client: waiting for a lock on ino %d: %w", f.ino, syscall.EINTR)
		}
		select {
		case f.c.locks.waiters <- struct{}{}:
			wctx, cancel := context.WithTimeout(ctx, f.c.cfg.Timeout)
			err = f.c.locker.LockWait(wctx, f.ino, lk)
			cancel()
			<-f.c.locks.waiters
		default:
			// As many waits as maxLockWaits are at the server already:
			// this one polls instead of taking another request slot.
			err = errTooManyWaits
		}
		if err != nil && ctx.Err() == nil {
			// The wait failed (the server restarting or closing) or was
			// not sent: pause, then the next Lock either works or
			// reports what is wrong.
			t := time.NewTimer(lockRetryPause)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
		}
		if ctx.Err() != nil {
			return fmt.Errorf("client: waiting for a lock on ino %d: %w", f.ino, syscall.EINTR)
		}
	}
}

// useOwner records that owner locks through f, so that f's release drops
// the owner's flock and OFD locks once no other open File of this client
// has been used by it.
func (f *File) useOwner(owner uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.owners[owner] {
		return
	}
	if f.owners == nil {
		f.owners = map[uint64]bool{}
	}
	f.owners[owner] = true
	b := &f.c.locks
	b.mu.Lock()
	b.users[lockKey{f.ino, owner}]++
	b.mu.Unlock()
}

// note records a granted lock request.
func (b *lockBook) note(ino proto.Ino, lk proto.Lock) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := lockKey{ino, lk.Owner}
	if held, _ := lk.Apply(b.held[k]); len(held) > 0 {
		b.held[k] = held
	} else {
		delete(b.held, k)
	}
}

// forget drops the locks of the given kinds of owner on ino from the book
// and reports which kinds it had.
func (b *lockBook) forget(k lockKey, which uint8) uint8 {
	b.mu.Lock()
	defer b.mu.Unlock()
	held := b.held[k]
	had := kinds(held) & which
	if had == 0 {
		return 0
	}
	kept := held[:0:0]
	for _, l := range held {
		if kinds([]proto.Lock{l})&which == 0 {
			kept = append(kept, l)
		}
	}
	if len(kept) > 0 {
		b.held[k] = kept
	} else {
		delete(b.held, k)
	}
	return had
}

// unlockAll releases every lock of the given kinds that owner holds on ino.
func (c *Client) unlockAll(ctx context.Context, ino proto.Ino, owner uint64, kinds uint8) error {
	var errs []error
	rctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	for _, k := range []uint8{heldPosix, heldFlock} {
		if kinds&k == 0 {
			continue
		}
		lk := proto.Lock{Owner: owner, Flock: k == heldFlock, Type: proto.LockUnlock, Start: 0, End: proto.LockEOF}
		if _, err := c.locker.Lock(rctx, ino, lk, proto.LockSet); err != nil && !errors.Is(err, syscall.ESTALE) {
			// ESTALE: the session is gone, and its locks with it.
			errs = append(errs, fmt.Errorf("client: release the locks of owner %x on ino %d: %w", owner, ino, err))
		}
	}
	return errors.Join(errs...)
}

// FlushLocks releases the POSIX locks owner holds on the file: what close(2)
// of any descriptor of the file does to the locks of the calling process
// (the kernel names the process's lock owner in FUSE's FLUSH). OFD and
// flock locks have other owners and stay. Free when owner holds none here.
func (f *File) FlushLocks(ctx context.Context, owner uint64) error {
	if f.c.locker == nil {
		return nil
	}
	if f.c.locks.forget(lockKey{f.ino, owner}, heldPosix) == 0 {
		return nil
	}
	return f.c.unlockAll(ctx, f.ino, owner, heldPosix)
}

// releaseLocks drops, at the release of f (the last close of an open file
// description), the locks of every owner that locked through f and
// through no other File still open here: the flock and OFD locks owned by
// this description. A process's POSIX locks were already released by the
// flush of its close.
func (f *File) releaseLocks(ctx context.Context) error {
	f.mu.Lock()
	owners := f.owners
	f.owners = nil
	f.mu.Unlock()
	var errs []error
	b := &f.c.locks
	for owner := range owners {
		k := lockKey{f.ino, owner}
		b.mu.Lock()
		b.users[k]--
		last := b.users[k] <= 0
		if last {
			delete(b.users, k)
		}
		b.mu.Unlock()
		if !last {
			continue
		}
		if had := b.forget(k, heldPosix|heldFlock); had != 0 {
			errs = append(errs, f.c.unlockAll(ctx, f.ino, owner, had))
		}
	}
	return errors.Join(errs...)
}

// Append writes p at the true end of the file, whatever other clients
// appended (O_APPEND across mounts): the metadata service reserves
// len(p) bytes after everything reserved before (proto.LockService.Append)
// and the bytes then go through the write-behind buffer at the reserved
// offset like any write; WriteDone records them as it records any write.
// It returns the offset the bytes were written at. If the write fails
// after the reservation, the reserved range stays a hole (zeros), as an
// append cut short by a crash leaves it.
func (f *File) Append(ctx context.Context, p []byte) (uint64, int, error) {
	st := f.state()
	if st == nil {
		return 0, 0, syscall.EINVAL
	}
	if f.c.locker == nil {
		return 0, 0, errNoLocks
	}
	if len(p) == 0 {
		return 0, 0, nil
	}
	if err := f.stale(ctx); err != nil {
		return 0, 0, err
	}
	st.mu.Lock()
	err := st.err
	st.mu.Unlock()
	if err != nil {
		return 0, 0, err // reported before reserving: nothing left as a hole
	}
	n := uint64(len(p))
	var a proto.Attr
	for {
		rctx, cancel := f.c.rpcCtx(ctx)
		done := f.c.changing(0, "", f.ino)
		err = f.c.handleCall(rctx, f.ino, f.gen, func() (err error) {
			a, err = f.c.locker.Append(rctx, f.ino, n)
			return err
		})
		done()
		cancel()
		if !errors.Is(err, syscall.EAGAIN) {
			break
		}
		// The server restarted and is in its grace period, while the
		// clients reclaim their ranges: wait for its end, as a write to
		// an NFS server in its grace period waits, unless a signal
		// interrupts the write.
		t := time.NewTimer(lockRetryPause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return 0, 0, fmt.Errorf("client: append to ino %d: waiting for the metadata server's grace period to end: %w", f.ino, syscall.EINTR)
		}
	}
	if err != nil {
		return 0, 0, err
	}
	if a.Size < n {
		return 0, 0, fmt.Errorf("client: append to ino %d: the server answered size %d for %d bytes: %w", f.ino, a.Size, n, syscall.EIO)
	}
	off := a.Size - n
	st.mu.Lock()
	st.metaSize = max(st.metaSize, a.Size)
	st.mu.Unlock()
	w, err := f.Write(ctx, p, off)
	return off, w, err
}

// reclaimLocks takes every lock this client holds again, after the
// metadata server restarted and took its session back (in the grace
// period, before anyone else may take new locks). A lock that cannot be
// taken back is lost: logged at error level, as the application holding
// it is not told.
func (c *Client) reclaimLocks(ctx context.Context) {
	if c.locker == nil {
		return
	}
	b := &c.locks
	b.mu.Lock()
	all := map[lockKey][]proto.Lock{}
	for k, held := range b.held {
		all[k] = append([]proto.Lock(nil), held...)
	}
	b.mu.Unlock()
	n := 0
	for k, held := range all {
		for _, lk := range held {
			if _, err := c.locker.Lock(ctx, k.ino, lk, proto.LockReclaim); err != nil {
				c.log.Error("client: a lock held before the metadata server restarted is lost",
					"ino", k.ino, "start", lk.Start, "end", lk.End, "pid", lk.Pid, "err", err)
				b.mu.Lock()
				b.held[k], _ = proto.Lock{Owner: lk.Owner, Flock: lk.Flock, Type: proto.LockUnlock, Start: lk.Start, End: lk.End}.Apply(b.held[k])
				if len(b.held[k]) == 0 {
					delete(b.held, k)
				}
				b.mu.Unlock()
				continue
			}
			n++
		}
	}
	if n > 0 {
		c.log.Warn("client: reclaimed this mount's locks after the metadata server restarted", "locks", n)
	}
}

// reclaimAppends tells the metadata server, after it restarted and took
// this client's session back, how far this client wrote in each file it
// has open (its append reservations included), so that appends from any
// client go on beyond it.
func (c *Client) reclaimAppends(ctx context.Context) {
	if c.locker == nil {
		return
	}
	c.mu.Lock()
	ends := map[proto.Ino]uint64{}
	for ino, st := range c.open {
		st.mu.Lock()
		if st.end > 0 {
			ends[ino] = st.end
		}
		st.mu.Unlock()
	}
	c.mu.Unlock()
	for ino, end := range ends {
		if err := c.locker.ReclaimAppend(ctx, ino, end); err != nil && !errors.Is(err, syscall.EBADF) {
			// EBADF: no write handle here, so no appends either.
			c.log.Error("client: could not tell the restarted metadata server how far this mount wrote; appends from other mounts may overwrite it",
				"ino", ino, "end", end, "err", err)
		}
	}
}
