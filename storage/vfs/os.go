package vfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Default is the real operating-system filesystem.
var Default FS = osFS{}

type osFS struct{}

func (osFS) Create(name string) (File, error) {
	return os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
}

func (osFS) Open(name string) (File, error) { return os.Open(name) }

func (osFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	return os.OpenFile(name, flag, perm)
}

func (osFS) OpenDir(name string) (File, error) { return os.Open(name) }

func (osFS) Remove(name string) error {
	return retryEINTR("remove", name, func() error { return syscall.Unlink(name) })
}

// retryEINTR runs call again while a signal interrupts it, and wraps its
// error as op on path.
func retryEINTR(op, path string, call func() error) error {
	for {
		err := call()
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return &os.PathError{Op: op, Path: path, Err: err}
		}
		return nil
	}
}

func (osFS) Rename(oldname, newname string) error        { return os.Rename(oldname, newname) }
func (osFS) MkdirAll(dir string, perm os.FileMode) error { return os.MkdirAll(dir, perm) }
func (osFS) Stat(name string) (os.FileInfo, error)       { return os.Stat(name) }

func (osFS) ReadDir(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	return names, nil
}

func (osFS) Statfs(path string) (Usage, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return Usage{}, &os.PathError{Op: "statfs", Path: path, Err: err}
	}
	bs := uint64(st.Bsize)
	return Usage{Total: st.Blocks * bs, Free: st.Bavail * bs, FilesFree: st.Ffree,
		Device: fmt.Sprintf("%s:%x.%x", machineID(), uint32(st.Fsid.X__val[0]), uint32(st.Fsid.X__val[1]))}, nil
}

// machineID names this host for Usage.Device: /etc/machine-id, else the
// host name.
var machineID = sync.OnceValue(func() string {
	if b, err := os.ReadFile("/etc/machine-id"); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		return strings.TrimSpace(string(b))
	}
	h, _ := os.Hostname()
	return h
})

func (osFS) Lock(name string) (io.Closer, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, &os.PathError{Op: "flock", Path: name, Err: ErrLocked}
		}
		return nil, &os.PathError{Op: "flock", Path: name, Err: err}
	}
	return f, nil // closing the file releases the lock
}

// SyncFS implements FSSyncer with syncfs(2): everything written to the
// file system holding dir, data and metadata, reaches its disk.
func (osFS) SyncFS(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return retryEINTR("syncfs", dir, func() error { return unix.Syncfs(int(f.Fd())) })
}
