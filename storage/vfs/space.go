package vfs

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// Spacer is implemented by Files that can free or reserve ranges
// themselves (a wrapper passes it on from the file it wraps).
type Spacer interface {
	// Punch makes [off, off+n) read as zeros, freeing its storage where
	// the file system can; the size does not change.
	Punch(off, n int64) error
	// Allocate reserves storage for [off, off+n), growing the file to
	// off+n if it is shorter; bytes already there are kept.
	Allocate(off, n int64) error
}

// Punch makes [off, off+n) of f read as zeros without changing its size.
// A real file punches a hole (fallocate PUNCH_HOLE|KEEP_SIZE), so the
// range costs no space; a File that cannot is written zeros. The range is
// clipped to the file's size.
func Punch(f File, off, n int64) error {
	switch f := f.(type) {
	case Spacer:
		return f.Punch(off, n)
	case *os.File:
		err := fallocate(f, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
		if !errors.Is(err, unix.EOPNOTSUPP) {
			return err
		}
	}
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	end := min(off+n, fi.Size())
	zeros := make([]byte, min(end-off, 1<<20))
	for off < end {
		k := min(int64(len(zeros)), end-off)
		if _, err := f.WriteAt(zeros[:k], off); err != nil {
			return err
		}
		off += k
	}
	return nil
}

// Allocate reserves storage for [off, off+n) of f and grows it to off+n if
// it is shorter. A real file asks the file system (fallocate mode 0), so a
// later write there cannot fail for lack of space; a File that cannot is
// only grown.
func Allocate(f File, off, n int64) error {
	switch f := f.(type) {
	case Spacer:
		return f.Allocate(off, n)
	case *os.File:
		err := fallocate(f, 0, off, n)
		if !errors.Is(err, unix.EOPNOTSUPP) {
			return err
		}
	}
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.Size() < off+n {
		return f.Truncate(off + n)
	}
	return nil
}

func fallocate(f *os.File, mode uint32, off, n int64) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = unix.Fallocate(int(fd), mode, off, n) }); err != nil {
		return err
	}
	if ferr != nil {
		return &os.PathError{Op: "fallocate", Path: f.Name(), Err: ferr}
	}
	return nil
}
