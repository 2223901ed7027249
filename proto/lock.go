package proto

import "context"

// LockType is a lock's mode, with the values of Linux's F_RDLCK, F_WRLCK
// and F_UNLCK (which FUSE passes through).
type LockType uint8

const (
	LockRead   LockType = 0 // shared
	LockWrite  LockType = 1 // exclusive
	LockUnlock LockType = 2 // release; in a test's answer: no conflict
)

// LockEOF is the End of a lock that reaches to the end of the file,
// whatever its size (the kernel's OFFSET_MAX).
const LockEOF = 1<<63 - 1

// Lock is a file lock, or a request to take or release one. Locks are
// owned by a (session, Owner) pair: Owner is the kernel's lock owner (a
// process's file table for POSIX locks, an open file description for
// flock and OFD locks). Flock locks and byte-range (POSIX and OFD) locks
// are separate name spaces, as on Linux: one never conflicts with the
// other.
type Lock struct {
	Owner      uint64
	Flock      bool
	Type       LockType
	Start, End uint64 // byte range, End inclusive (LockEOF: to the end)
	Pid        uint32 // the holder's process id on its own host, for F_GETLK
}

// Conflicts reports whether a lock held by another owner (h) keeps l from
// being taken: same name space, overlapping ranges, and one of them
// exclusive.
func (l Lock) Conflicts(h Lock) bool {
	return l.Flock == h.Flock && l.Start <= h.End && h.Start <= l.End &&
		(l.Type == LockWrite || h.Type == LockWrite) &&
		l.Type != LockUnlock && h.Type != LockUnlock
}

// Apply returns what an owner that held held (its locks on one file)
// holds after the request l of the same owner: l's range is cut out of
// the owner's locks of l's name space (a write lock over part of a read
// lock splits it; flock locks always span the whole file) and l is added
// unless it is an unlock. released reports whether any held lock was cut
// or replaced, which may let a waiter through.
func (l Lock) Apply(held []Lock) (out []Lock, released bool) {
	out = make([]Lock, 0, len(held)+2)
	for _, h := range held {
		if h.Flock != l.Flock || h.End < l.Start || l.End < h.Start {
			out = append(out, h)
			continue
		}
		released = true
		if h.Start < l.Start {
			left := h
			left.End = l.Start - 1
			out = append(out, left)
		}
		if h.End > l.End {
			right := h
			right.Start = l.End + 1
			out = append(out, right)
		}
	}
	if l.Type != LockUnlock {
		out = append(out, l)
	}
	return out, released
}

// LockMode says what a Lock request does.
type LockMode uint8

const (
	LockSet     LockMode = 0 // take, change or release (F_SETLK)
	LockTest    LockMode = 1 // report a conflict, change nothing (F_GETLK)
	LockReclaim LockMode = 2 // take again a lock held before a metadata server restart
)

// LockService is the cluster-wide lock manager the metadata service keeps
// (see package meta, "Locks"), and the atomic append it offers.
type LockService interface {
	// Lock takes, changes or releases (Type LockUnlock) lk on ino for the
	// caller's session (LockSet), or only reports the first lock of
	// another owner that conflicts with lk (LockTest; Type LockUnlock:
	// none), or takes back a lock the session held before the server
	// restarted (LockReclaim, only in the grace period after the restart;
	// ESTALE otherwise). A conflict fails with EAGAIN and changes nothing;
	// so does taking a new lock during the grace period, while locks may
	// still be reclaimed. Locking needs an open handle of the session on
	// ino (EBADF).
	Lock(ctx context.Context, ino Ino, lk Lock, mode LockMode) (Lock, error)
	// LockWait returns once lk no longer conflicts, or after a bounded
	// time, or when ctx ends; it takes nothing (the caller then tries
	// Lock again), so a waiter that gave up holds nothing.
	LockWait(ctx context.Context, ino Ino, lk Lock) error
	// Append reserves n bytes at the end of regular file ino, after every
	// range reserved before: the reply is the file's attributes with Size
	// the end of the caller's range, [Size-n, Size). The caller writes it
	// and records it with WriteDone as any write. Needs an open write
	// handle of the session on ino (EBADF); EAGAIN in the grace period
	// after a restart.
	Append(ctx context.Context, ino Ino, n uint64) (Attr, error)
	// ReclaimAppend tells a restarted server, in its grace period, how far
	// the caller's reservations on ino reached (ESTALE outside it).
	ReclaimAppend(ctx context.Context, ino Ino, end uint64) error
}
