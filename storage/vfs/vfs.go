package vfs

import (
	"fmt"
	"io"
	"os"
	"syscall"
)

// File is an open file. ReadAt and WriteAt are positional and safe to call
// concurrently; the file has no seek offset.
type File interface {
	io.ReaderAt
	io.WriterAt
	io.Closer
	Truncate(size int64) error
	Sync() error
	Stat() (os.FileInfo, error)
}

// Usage is what Statfs reports about the filesystem holding a path.
type Usage struct {
	Total     uint64 // bytes
	Free      uint64 // bytes available to an unprivileged writer
	FilesFree uint64 // inodes available (0: not known)
	// Device identifies the file system (host and file system id; ""
	// when it cannot be told apart from others).
	Device string
}

// FS is a filesystem. Paths are plain OS-style paths.
type FS interface {
	// Create creates or truncates name for reading and writing.
	Create(name string) (File, error)
	// Open opens name read-only.
	Open(name string) (File, error)
	// OpenFile opens name with os.O_* flags (O_RDONLY, O_RDWR, O_CREATE,
	// O_EXCL, O_TRUNC are honoured by every implementation).
	OpenFile(name string, flag int, perm os.FileMode) (File, error)
	// OpenDir opens a directory so that Sync makes its entries durable.
	OpenDir(name string) (File, error)
	// Remove removes the file name; a missing one fails with an error
	// matching os.ErrNotExist. It removes files only (the operating
	// system's unlinks, in one system call, where os.Remove tries rmdir
	// after a failed unlink).
	Remove(name string) error
	Rename(oldname, newname string) error
	MkdirAll(dir string, perm os.FileMode) error
	Stat(name string) (os.FileInfo, error)
	// ReadDir returns the names in dir, sorted.
	ReadDir(dir string) ([]string, error)
	// Statfs reports the size and free space of the filesystem holding path.
	Statfs(path string) (Usage, error)
	// Lock takes an exclusive lock named by the file name (created if
	// missing) without waiting, held until the returned Closer is closed
	// or the process ends: flock(2) on a real disk, so that two processes
	// never serve one storage target. A lock held elsewhere fails with an
	// error matching ErrLocked.
	Lock(name string) (io.Closer, error)
}

// FSSyncer is an FS that can make everything written to the file system
// holding dir durable at once (syncfs(2)): cheaper, for a storage
// server's periodic background sync, than a fsync of each file written.
type FSSyncer interface {
	SyncFS(dir string) error
}

// ErrLocked is returned by Lock for a lock another holder has; it matches
// syscall.EWOULDBLOCK.
var ErrLocked = fmt.Errorf("vfs: locked by another process: %w", syscall.EWOULDBLOCK)
