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

// LockService is the cluster-wide lock manager the metadata service keeps
// (see package meta, "Locks"), and the atomic append it offers.
type LockService interface {
	// Lock takes, changes or releases (Type LockUnlock) lk on ino for the
	// caller's session, or with test only reports the first lock of
	// another owner that conflicts with lk (Type LockUnlock: none). A
	// conflict fails with EAGAIN and changes nothing. Taking a lock needs
	// an open handle of the session on ino (EBADF).
	Lock(ctx context.Context, ino Ino, lk Lock, test bool) (Lock, error)
	// LockWait returns once lk no longer conflicts, or after a bounded
	// time, or when ctx ends; it takes nothing (the caller then tries
	// Lock again), so a waiter that gave up holds nothing.
	LockWait(ctx context.Context, ino Ino, lk Lock) error
	// Append reserves n bytes at the end of regular file ino: the size
	// grows by n atomically and the reply is the new attributes, so the
	// reserved range is [Size-n, Size). Needs an open write handle of the
	// session on ino (EBADF).
	Append(ctx context.Context, ino Ino, n uint64) (Attr, error)
}
