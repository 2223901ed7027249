package vfs

import (
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// DataFinder is implemented by Files that know where their data is (a
// wrapper passes it on from the file it wraps).
type DataFinder interface {
	// NextData returns the first range [start, end) at or after off that
	// may hold data (the rest of the file up to the next hole), or io.EOF
	// when only holes follow off.
	NextData(off int64) (start, end int64, err error)
}

// NextData returns the first range [start, end) of f at or after off that
// may hold data, skipping holes, or io.EOF if there is none. A real file
// asks the kernel (lseek SEEK_DATA and SEEK_HOLE), so that a sparse file's
// holes cost nothing to skip; a File that cannot tell reports everything
// from off to its end as data. Callers get correct results either way:
// holes read as zeros.
func NextData(f File, off int64) (start, end int64, err error) {
	switch f := f.(type) {
	case DataFinder:
		return f.NextData(off)
	case *os.File:
		rc, err := f.SyscallConn()
		if err != nil {
			return 0, 0, err
		}
		var serr error
		// lseek moves the file offset, which nothing uses: Files are
		// read and written positionally.
		err = rc.Control(func(fd uintptr) {
			start, serr = unix.Seek(int(fd), off, unix.SEEK_DATA)
			if serr == nil {
				end, serr = unix.Seek(int(fd), start, unix.SEEK_HOLE)
			}
		})
		if err == nil {
			err = serr
		}
		switch {
		case errors.Is(err, unix.ENXIO):
			return 0, 0, io.EOF // only holes (or nothing) past off
		case err == nil:
			return start, end, nil
		case !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.EOPNOTSUPP):
			return 0, 0, &os.PathError{Op: "seek", Path: f.Name(), Err: err}
		}
		// The filesystem cannot seek to data: treat it all as data.
	}
	fi, err := f.Stat()
	if err != nil {
		return 0, 0, err
	}
	if off >= fi.Size() {
		return 0, 0, io.EOF
	}
	return off, fi.Size(), nil
}
