package meta

import (
	"context"
	"errors"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/weft-fs/weft/proto"
)

// lockEnv is a server with two client sessions, a and b, each holding a
// read-write handle on file f.
func lockEnv(t *testing.T, mod ...func(*Options)) (e *env, a, b context.Context, f proto.Ino) {
	e = newEnv(t, mod...)
	e.addTarget("t1", 1<<30)
	a, b = remote("a", 1), remote("b", 2)
	for i, c := range []context.Context{a, b} {
		_, err := e.srv.OpenSession(c, nil)
		e.must(err)
		attr, _, _, err := e.srv.CreateOpen(c, proto.CreateIn{Parent: proto.RootIno, Name: "f", Mode: 0o666}, proto.AccessReadWrite)
		e.must(err)
		if i == 0 {
			f = attr.Ino
		}
	}
	return e, a, b, f
}

func wr(owner uint64, start, end uint64) proto.Lock {
	return proto.Lock{Owner: owner, Type: proto.LockWrite, Start: start, End: end, Pid: uint32(owner)}
}

func rd(owner uint64, start, end uint64) proto.Lock {
	return proto.Lock{Owner: owner, Type: proto.LockRead, Start: start, End: end, Pid: uint32(owner)}
}

func un(owner uint64, start, end uint64) proto.Lock {
	return proto.Lock{Owner: owner, Type: proto.LockUnlock, Start: start, End: end}
}

// TestLockConflicts: locks of one session hold against another's, byte
// ranges split, flock is a name space of its own, a test reports the
// conflicting lock, and only sessions with a handle on the file may lock.
func TestLockConflicts(t *testing.T) {
	e, a, b, f := lockEnv(t)
	set := func(c context.Context, lk proto.Lock, want error) {
		t.Helper()
		_, err := e.srv.Lock(c, f, lk, proto.LockSet)
		if !errors.Is(err, want) && !(want == nil && err == nil) {
			t.Fatalf("lock %+v: %v, want %v", lk, err, want)
		}
	}
	set(a, wr(1, 0, 99), nil)
	set(b, wr(1, 50, 59), syscall.EAGAIN) // same owner number, other session
	set(b, rd(2, 99, 99), syscall.EAGAIN)
	set(b, wr(2, 100, 109), nil)
	got, err := e.srv.Lock(b, f, wr(2, 0, proto.LockEOF), proto.LockTest)
	e.must(err)
	if got != wr(1, 0, 99) {
		t.Fatalf("test: %+v, want a's lock", got)
	}
	set(a, un(1, 20, 79), nil) // leaves 0-19 and 80-99
	set(b, wr(2, 30, 39), nil)
	set(b, wr(2, 10, 29), syscall.EAGAIN)
	if got, _ := e.srv.Lock(b, f, wr(2, 85, 85), proto.LockTest); got != wr(1, 80, 99) {
		t.Fatalf("test after a split: %+v", got)
	}
	// The same owner may change its own lock's type over part of it.
	set(a, rd(1, 0, 9), nil)
	set(b, rd(2, 0, 9), nil)
	set(b, rd(2, 10, 10), syscall.EAGAIN)
	// flock locks and byte-range locks do not meet.
	fl := proto.Lock{Owner: 3, Flock: true, Type: proto.LockWrite, End: proto.LockEOF}
	set(b, fl, nil)
	fl.Owner = 4
	set(a, fl, syscall.EAGAIN)
	if got, _ := e.srv.Lock(a, f, wr(1, 200, 300), proto.LockTest); got.Type != proto.LockUnlock {
		t.Fatalf("test of a free range: %+v", got)
	}

	// No handle on the inode: EBADF; an unknown session: ESTALE; a
	// malformed lock: EINVAL.
	d, err := e.srv.Mkdir(ctx, proto.RootIno, "d", 0o777, 0, 0)
	e.must(err)
	if _, err := e.srv.Lock(a, d.Ino, wr(1, 0, 0), proto.LockSet); !errors.Is(err, syscall.EBADF) {
		t.Fatalf("lock without a handle: %v", err)
	}
	if _, err := e.srv.Lock(remote("c", 3), f, wr(1, 0, 0), proto.LockSet); !errors.Is(err, syscall.ESTALE) {
		t.Fatalf("lock from an unknown session: %v", err)
	}
	if _, err := e.srv.Lock(a, f, wr(1, 5, 4), proto.LockSet); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("lock with end before start: %v", err)
	}
	if _, err := e.srv.Lock(a, f, proto.Lock{Type: 7}, proto.LockSet); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("lock of type 7: %v", err)
	}
}

// TestLockRelease: a session's locks go when it closes or expires, and
// when its last handle on the file is released.
func TestLockRelease(t *testing.T) {
	var clock atomic.Int64 // the leases' clock, moved by the test
	e, a, b, f := lockEnv(t, func(o *Options) {
		o.SessionLease = 100 * time.Millisecond
		o.leaseClock = func() time.Time { return time.Unix(0, clock.Load()) }
	})
	free := func() bool {
		got, err := e.srv.Lock(b, f, wr(2, 0, proto.LockEOF), proto.LockTest)
		e.must(err)
		return got.Type == proto.LockUnlock
	}
	// Expiry (a is not renewed).
	_, err := e.srv.Lock(a, f, wr(1, 0, 9), proto.LockSet)
	e.must(err)
	if free() {
		t.Fatal("a's lock does not show")
	}
	clock.Add(int64(60 * time.Millisecond))
	_, err = e.srv.RenewSession(b)
	e.must(err)
	clock.Add(int64(60 * time.Millisecond)) // a's lease is over, b's is not
	waitFor(t, "a's session to expire and its lock to go", free)

	// The last handle's release.
	_, err = e.srv.Lock(b, f, wr(2, 0, 9), proto.LockSet)
	e.must(err)
	if e.srv.LockCount(f) != 1 {
		t.Fatalf("%d locks, want 1", e.srv.LockCount(f))
	}
	e.must(e.srv.Release(b, f))
	if n := e.srv.LockCount(f); n != 0 {
		t.Fatalf("%d locks after the session's last handle was released", n)
	}
}

// TestLockWait: a waiter is answered when the conflicting lock goes, and
// with EINTR when its ctx ends; it never takes the lock itself.
func TestLockWait(t *testing.T) {
	e, a, b, f := lockEnv(t)
	_, err := e.srv.Lock(a, f, wr(1, 0, proto.LockEOF), proto.LockSet)
	e.must(err)

	cctx, cancel := context.WithCancel(b)
	done := make(chan error, 1)
	go func() { done <- e.srv.LockWait(cctx, f, wr(2, 0, 0)) }()
	cancel()
	if err := <-done; !errors.Is(err, syscall.EINTR) {
		t.Fatalf("cancelled wait: %v, want EINTR", err)
	}

	go func() { done <- e.srv.LockWait(b, f, wr(2, 0, 0)) }()
	_, err = e.srv.Lock(a, f, un(1, 0, proto.LockEOF), proto.LockSet)
	e.must(err)
	e.must(<-done)
	if n := e.srv.LockCount(f); n != 0 {
		t.Fatalf("the waiter holds %d locks; it must take none", n)
	}
}

// TestLockReclaim: after a restart, in the grace period, new locks are
// refused and a client that re-registered its session takes its locks
// back; outside the grace period reclaims are refused.
func TestLockReclaim(t *testing.T) {
	e, a, b, f := lockEnv(t)
	if _, err := e.srv.Lock(a, f, wr(1, 0, 9), proto.LockReclaim); !errors.Is(err, syscall.ESTALE) {
		t.Fatalf("reclaim outside a grace period: %v", err)
	}
	_, err := e.srv.Lock(a, f, wr(1, 0, 9), proto.LockSet)
	e.must(err)
	e.restart()
	if e.srv.LockCount(f) != 0 {
		t.Fatal("locks survived a restart in memory")
	}
	for _, c := range []context.Context{a, b} {
		_, err := e.srv.OpenSession(c, []proto.OpenHandle{{Ino: f, Count: 1, Write: true}})
		e.must(err)
	}
	if _, err := e.srv.Lock(b, f, wr(2, 50, 59), proto.LockSet); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("new lock in the grace period: %v, want EAGAIN", err)
	}
	_, err = e.srv.Lock(a, f, wr(1, 0, 9), proto.LockReclaim)
	e.must(err)
	if _, err := e.srv.Lock(b, f, wr(2, 5, 5), proto.LockReclaim); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("conflicting reclaim: %v, want EAGAIN", err)
	}
	if got, _ := e.srv.Lock(b, f, wr(2, 0, 0), proto.LockTest); got != wr(1, 0, 9) {
		t.Fatalf("test after the reclaim: %+v", got)
	}
}

// TestAppend: appends from two sessions are placed one after the other,
// whatever the recorded size says meanwhile; a retried request gets its
// first range; appending needs a write handle; after a restart appends
// wait for the grace period, in which clients reclaim their ends.
func TestAppend(t *testing.T) {
	e, a, b, f := lockEnv(t, func(o *Options) { o.OrphanGrace = 300 * time.Millisecond })
	a1, err := e.srv.Append(a, f, 10)
	e.must(err)
	b1, err := e.srv.Append(b, f, 5)
	e.must(err)
	if a1.Size != 10 || b1.Size != 15 {
		t.Fatalf("ends after appends of 10 and 5: %d, %d", a1.Size, b1.Size)
	}
	// a records its range; the next append still goes after b's.
	w, err := e.srv.WriteDone(a, f, 10, 0, proto.NoBlocks)
	e.must(err)
	if w.Size != 10 {
		t.Fatalf("recorded size %d, want 10", w.Size)
	}
	retry := proto.WithRequest(a, proto.Cred{}, proto.SessionID{1}, 77, "")
	a2, err := e.srv.Append(retry, f, 1)
	e.must(err)
	again, err := e.srv.Append(retry, f, 1)
	e.must(err)
	if a2.Size != 16 || again.Size != 16 {
		t.Fatalf("append and its retry end at %d and %d, want 16 and 16", a2.Size, again.Size)
	}
	c := remote("c", 3)
	_, err = e.srv.OpenSession(c, nil)
	e.must(err)
	_, _, err = e.srv.Open(c, f, proto.AccessRead)
	e.must(err)
	if _, err := e.srv.Append(c, f, 1); !errors.Is(err, syscall.EBADF) {
		t.Fatalf("append through a read-only handle: %v", err)
	}
	if _, err := e.srv.Append(a, f, 0); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("append of 0 bytes: %v", err)
	}
	if err := e.srv.ReclaimAppend(a, f, 100); !errors.Is(err, syscall.ESTALE) {
		t.Fatalf("append reclaim outside a grace period: %v", err)
	}

	e.restart()
	for _, c := range []context.Context{a, b} {
		_, err := e.srv.OpenSession(c, []proto.OpenHandle{{Ino: f, Count: 1, Write: true}})
		e.must(err)
	}
	if _, err := e.srv.Append(b, f, 1); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("append in the grace period: %v, want EAGAIN", err)
	}
	e.must(e.srv.ReclaimAppend(b, f, 16))
	waitFor(t, "the grace period to end", func() bool {
		_, err := e.srv.Append(b, f, 4)
		return err == nil
	})
	if got, _ := e.srv.Append(a, f, 1); got.Size != 21 {
		t.Fatalf("append after the grace period ends at %d, want 21 (after the reclaimed 16 and 4)", got.Size)
	}
	// Setting the size starts appends from there.
	_, err = e.srv.SetAttr(a, f, proto.SetAttrIn{Valid: proto.SetSize | proto.SetHandle, Size: 0})
	e.must(err)
	if got, _ := e.srv.Append(a, f, 3); got.Size != 3 {
		t.Fatalf("append after truncating to 0 ends at %d, want 3", got.Size)
	}
}

// TestLockBound: a session cannot hold more than the table's bound; a
// refused lock changes nothing, and released locks count no more.
func TestLockBound(t *testing.T) {
	e, a, b, f := lockEnv(t)
	e.srv.locks.max = 3
	for i := range uint64(3) {
		_, err := e.srv.Lock(a, f, wr(1, 10*i, 10*i), proto.LockSet)
		e.must(err)
	}
	if _, err := e.srv.Lock(a, f, wr(1, 100, 100), proto.LockSet); !errors.Is(err, syscall.ENOLCK) {
		t.Fatalf("lock over the bound: %v, want ENOLCK", err)
	}
	// Replacing a lock in place does not grow; another session has its own bound.
	_, err := e.srv.Lock(a, f, rd(1, 0, 0), proto.LockSet)
	e.must(err)
	_, err = e.srv.Lock(b, f, wr(2, 200, 200), proto.LockSet)
	e.must(err)
	_, err = e.srv.Lock(a, f, un(1, 0, proto.LockEOF), proto.LockSet)
	e.must(err)
	_, err = e.srv.Lock(a, f, wr(1, 100, 100), proto.LockSet)
	e.must(err)
	if n := e.srv.LockCount(f); n != 2 {
		t.Fatalf("%d locks, want 2", n)
	}
}
