package meta

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/weft-fs/weft/proto"
)

// lockWaitBound bounds how long one LockWait keeps a server goroutine: a
// waiter that is not woken by a change within it is answered anyway and
// asks again (it polls), so a waiter that vanished costs at most this.
const lockWaitBound = 2 * time.Second

// MaxLocksPerSession bounds the locks one client session holds at once
// (every byte range counts), so that no client can make the server hold
// unbounded memory; beyond it Lock fails with ENOLCK.
const MaxLocksPerSession = 1 << 16

// lockOwner is who holds a lock: the kernel's lock owner within a client
// session. Lock owners are only unique within one mount, so the session is
// part of the name.
type lockOwner struct {
	sess  session
	owner uint64
}

// heldLock is one granted lock.
type heldLock struct {
	who lockOwner
	lk  proto.Lock
}

// inodeLocks are the locks held on one inode, and the channel closed (and
// replaced) whenever any of them is released or weakened, which wakes the
// LockWait calls waiting on the inode.
type inodeLocks struct {
	held    []heldLock
	changed chan struct{}
}

// lockTable is the cluster-wide lock manager: every flock, POSIX and OFD
// lock of every mount, kept in memory (see doc.go, "Locks").
type lockTable struct {
	mu     sync.Mutex
	inode  map[proto.Ino]*inodeLocks
	perSes map[session]int // locks held per session, for MaxLocksPerSession
	max    int
}

func newLockTable() *lockTable {
	return &lockTable{inode: map[proto.Ino]*inodeLocks{}, perSes: map[session]int{}, max: MaxLocksPerSession}
}

// countLocked adds n to the locks sess holds.
func (t *lockTable) countLocked(sess session, n int) {
	if c := t.perSes[sess] + n; c > 0 {
		t.perSes[sess] = c
	} else {
		delete(t.perSes, sess)
	}
}

// conflictLocked returns the first lock of another owner that keeps who
// from taking lk.
func (t *lockTable) conflictLocked(ino proto.Ino, who lockOwner, lk proto.Lock) (heldLock, bool) {
	il := t.inode[ino]
	if il == nil {
		return heldLock{}, false
	}
	for _, h := range il.held {
		if h.who != who && lk.Conflicts(h.lk) {
			return h, true
		}
	}
	return heldLock{}, false
}

// set takes, changes or releases lk for who on ino. A conflict fails with
// EAGAIN and changes nothing. Within one owner a new lock replaces what
// the owner held in its range (proto.Lock.Apply).
func (t *lockTable) set(ino proto.Ino, who lockOwner, lk proto.Lock) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if lk.Type != proto.LockUnlock {
		if h, ok := t.conflictLocked(ino, who, lk); ok {
			return errnof(syscall.EAGAIN, "inode %d: range %d-%d is locked by pid %d of %q", ino, h.lk.Start, h.lk.End, h.lk.Pid, h.who.sess.name)
		}
	}
	il := t.inode[ino]
	if il == nil {
		if lk.Type == proto.LockUnlock {
			return nil
		}
		il = &inodeLocks{changed: make(chan struct{})}
		t.inode[ino] = il
	}
	var mine []proto.Lock
	kept := make([]heldLock, 0, len(il.held)+1)
	for _, h := range il.held {
		if h.who == who {
			mine = append(mine, h.lk)
		} else {
			kept = append(kept, h)
		}
	}
	before := len(mine)
	mine, released := lk.Apply(mine)
	if grow := len(mine) - before; grow > 0 && t.perSes[who.sess]+grow > t.max {
		if len(il.held) == 0 {
			delete(t.inode, ino)
		}
		return errnof(syscall.ENOLCK, "session %x of %q holds %d locks, the most one session may", who.sess.id[:4], who.sess.name, t.perSes[who.sess])
	}
	t.countLocked(who.sess, len(mine)-before)
	for _, m := range mine {
		kept = append(kept, heldLock{who: who, lk: m})
	}
	il.held = kept
	if released || len(kept) == 0 {
		t.wakeLocked(ino, il)
	}
	return nil
}

// wakeLocked wakes the waiters on ino and forgets the inode once it has
// no locks left.
func (t *lockTable) wakeLocked(ino proto.Ino, il *inodeLocks) {
	close(il.changed)
	il.changed = make(chan struct{})
	if len(il.held) == 0 {
		delete(t.inode, ino)
	}
}

// test returns the first lock of another owner that conflicts with lk, or
// a lock of type LockUnlock if there is none.
func (t *lockTable) test(ino proto.Ino, who lockOwner, lk proto.Lock) proto.Lock {
	t.mu.Lock()
	defer t.mu.Unlock()
	if h, ok := t.conflictLocked(ino, who, lk); ok {
		return h.lk
	}
	return proto.Lock{Type: proto.LockUnlock, Flock: lk.Flock}
}

// wait returns once lk does not conflict on ino, or with ctx's error when
// ctx ends. It takes nothing.
func (t *lockTable) wait(ctx context.Context, ino proto.Ino, who lockOwner, lk proto.Lock) error {
	for {
		t.mu.Lock()
		_, conflict := t.conflictLocked(ino, who, lk)
		var changed chan struct{}
		if conflict {
			changed = t.inode[ino].changed
		}
		t.mu.Unlock()
		if !conflict {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// dropSessionInode releases every lock of sess on ino (its last handle on
// the inode was released).
func (t *lockTable) dropSessionInode(sess session, ino proto.Ino) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.dropLocked(ino, func(h heldLock) bool { return h.who.sess == sess })
}

// dropSession releases every lock of sess (its session ended or expired)
// and returns how many it held.
func (t *lockTable) dropSession(sess session) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for ino := range t.inode {
		n += t.dropLocked(ino, func(h heldLock) bool { return h.who.sess == sess })
	}
	return n
}

func (t *lockTable) dropLocked(ino proto.Ino, drop func(heldLock) bool) int {
	il := t.inode[ino]
	if il == nil {
		return 0
	}
	kept := il.held[:0:0]
	for _, h := range il.held {
		if !drop(h) {
			kept = append(kept, h)
		} else {
			t.countLocked(h.who.sess, -1)
		}
	}
	n := len(il.held) - len(kept)
	if n > 0 {
		il.held = kept
		t.wakeLocked(ino, il)
	}
	return n
}

// count returns the number of locks held on ino (for tests).
func (t *lockTable) count(ino proto.Ino) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if il := t.inode[ino]; il != nil {
		return len(il.held)
	}
	return 0
}

// checkLock validates a lock request from the wire.
func checkLock(lk proto.Lock) error {
	if lk.Type > proto.LockUnlock {
		return errnof(syscall.EINVAL, "lock type %d", lk.Type)
	}
	if lk.Start > lk.End || lk.End > proto.LockEOF {
		return errnof(syscall.EINVAL, "lock range %d-%d", lk.Start, lk.End)
	}
	return nil
}

// lockCaller authorizes a lock request: the caller's session must be
// known and, for a remote client, hold an open handle on ino (locks are
// taken through open files; the open checked the permissions). Then it
// runs do with the lock's owner, still under the server's mutex, so that
// no lock is granted to a session that expires or drops its last handle
// meanwhile (both release the session's locks under that mutex).
func (s *Server) lockCaller(ctx context.Context, ino proto.Ino, lk proto.Lock, do func(lockOwner) error) error {
	if err := checkLock(lk); err != nil {
		return err
	}
	// On a replicated server only the leader keeps locks (the read
	// barrier: a follower or a deposed leader answers EAGAIN).
	cl, err := s.reader(ctx)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkSessionLocked(cl.sess); err != nil {
		return err
	}
	if cl.sess.remote && s.sessOpens[cl.sess][ino].n == 0 {
		return errnof(syscall.EBADF, "lock on inode %d without an open handle of session %x", ino, cl.sess.id[:4])
	}
	return do(lockOwner{sess: cl.sess, owner: lk.Owner})
}

// errGrace refuses new locks while locks held before a restart may still
// be reclaimed.
func errGrace(ino proto.Ino) error {
	return errnof(syscall.EAGAIN, "inode %d: no new locks in the grace period after a restart, while clients reclaim theirs", ino)
}

// Lock implements proto.LockService.
func (s *Server) Lock(ctx context.Context, ino proto.Ino, lk proto.Lock, mode proto.LockMode) (proto.Lock, error) {
	out := proto.Lock{Type: proto.LockUnlock}
	err := s.lockCaller(ctx, ino, lk, func(who lockOwner) error {
		switch mode {
		case proto.LockTest:
			out = s.locks.test(ino, who, lk)
			return nil
		case proto.LockReclaim:
			if !s.inGrace() {
				return errnof(syscall.ESTALE, "inode %d: locks can be reclaimed only in the grace period after a restart", ino)
			}
		case proto.LockSet:
			if lk.Type != proto.LockUnlock && s.inGrace() {
				return errGrace(ino)
			}
		default:
			return errnof(syscall.EINVAL, "lock mode %d", mode)
		}
		return s.locks.set(ino, who, lk)
	})
	if err != nil {
		return proto.Lock{}, err
	}
	return out, nil
}

// LockWait implements proto.LockService: it waits at most lockWaitBound,
// and during the grace period after a restart until the period ends.
func (s *Server) LockWait(ctx context.Context, ino proto.Ino, lk proto.Lock) error {
	var who lockOwner
	if err := s.lockCaller(ctx, ino, lk, func(w lockOwner) error { who = w; return nil }); err != nil {
		return err
	}
	if lk.Type == proto.LockUnlock {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, lockWaitBound)
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel) // the server closing ends the wait
	defer stop()
	var err error
	if s.inGrace() {
		t := time.NewTimer(time.Until(time.Unix(0, s.graceUntil.Load())))
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	} else {
		err = s.locks.wait(ctx, ino, who, lk)
	}
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("meta: lock wait on inode %d: %w: %w", ino, err, syscall.EINTR)
	}
	return nil
}

// LockCount returns the number of locks held on ino (for tests and tools).
func (s *Server) LockCount(ino proto.Ino) int { return s.locks.count(ino) }
