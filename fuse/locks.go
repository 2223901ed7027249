package fuse

import (
	"context"
	"fmt"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	gofuse "github.com/hanwen/go-fuse/v2/fuse"

	"github.com/weft-fs/weft/client"
	"github.com/weft-fs/weft/proto"
)

// The kernel hands every lock request to the daemon once the mount
// announces lock support (MountOptions.EnableLocks: FUSE_POSIX_LOCKS and
// FUSE_FLOCK_LOCKS): fcntl F_GETLK/F_SETLK/F_SETLKW and their OFD forms,
// and flock(2), which the kernel sends as a whole-file lock with
// FUSE_LK_FLOCK set in the flags. The lock owner is the process's file
// table for POSIX locks and the open file description for OFD and flock
// locks. The kernel keeps no lock state of its own for such a mount, so it
// also does not release POSIX locks at close: it names the closing
// process's lock owner in FLUSH instead, and the daemon releases them
// there. go-fuse does not pass FLUSH's lock owner to the file handle;
// rawFS below takes it from the request and hands it over keyed by the
// request's cancel channel, which is unique per request in flight and
// reaches the handle as fuse.Context.Cancel.

// rawFS is the node file system with FLUSH's lock owner passed on.
type rawFS struct {
	gofuse.RawFileSystem
	owners *sync.Map // cancel channel -> lock owner of the FLUSH in flight
}

func (r rawFS) Flush(_ <-chan struct{}, in *gofuse.FlushIn) gofuse.Status {
	cancel := make(chan struct{}) // unique, never closed: see uninterrupted
	r.owners.Store((<-chan struct{})(cancel), in.LockOwner)
	defer r.owners.Delete((<-chan struct{})(cancel))
	return r.RawFileSystem.Flush(cancel, in)
}

// Requests that change state are served with a cancel channel that never
// closes (uninterrupted): the kernel's INTERRUPT of such a request is
// ignored, as the FUSE protocol allows. A signal to the caller (any
// signal: the Go runtime sends its own threads SIGURG to preempt
// goroutines) makes the kernel interrupt the request it waits in, and
// answering that with EINTR means "not done" — but a create, rename or
// write already sent to the servers may be applied whatever the mount
// answers, and a caller that retries on EINTR (Go's os package does)
// would then get EEXIST or ENOENT for its own success. They end by
// themselves, bounded by the RPC timeouts. Reads, lookups and lock waits
// (F_SETLKW: an interrupt must be able to cancel it) stay interruptible.
var uninterrupted <-chan struct{} // nil: never closed

func (r rawFS) SetAttr(_ <-chan struct{}, in *gofuse.SetAttrIn, out *gofuse.AttrOut) gofuse.Status {
	return r.RawFileSystem.SetAttr(uninterrupted, in, out)
}

func (r rawFS) Mknod(_ <-chan struct{}, in *gofuse.MknodIn, name string, out *gofuse.EntryOut) gofuse.Status {
	return r.RawFileSystem.Mknod(uninterrupted, in, name, out)
}

func (r rawFS) Mkdir(_ <-chan struct{}, in *gofuse.MkdirIn, name string, out *gofuse.EntryOut) gofuse.Status {
	return r.RawFileSystem.Mkdir(uninterrupted, in, name, out)
}

func (r rawFS) Unlink(_ <-chan struct{}, h *gofuse.InHeader, name string) gofuse.Status {
	return r.RawFileSystem.Unlink(uninterrupted, h, name)
}

func (r rawFS) Rmdir(_ <-chan struct{}, h *gofuse.InHeader, name string) gofuse.Status {
	return r.RawFileSystem.Rmdir(uninterrupted, h, name)
}

func (r rawFS) Rename(_ <-chan struct{}, in *gofuse.RenameIn, oldName, newName string) gofuse.Status {
	return r.RawFileSystem.Rename(uninterrupted, in, oldName, newName)
}

func (r rawFS) Link(_ <-chan struct{}, in *gofuse.LinkIn, name string, out *gofuse.EntryOut) gofuse.Status {
	return r.RawFileSystem.Link(uninterrupted, in, name, out)
}

func (r rawFS) Symlink(_ <-chan struct{}, h *gofuse.InHeader, target, name string, out *gofuse.EntryOut) gofuse.Status {
	return r.RawFileSystem.Symlink(uninterrupted, h, target, name, out)
}

func (r rawFS) SetXAttr(_ <-chan struct{}, in *gofuse.SetXAttrIn, attr string, data []byte) gofuse.Status {
	return r.RawFileSystem.SetXAttr(uninterrupted, in, attr, data)
}

func (r rawFS) RemoveXAttr(_ <-chan struct{}, h *gofuse.InHeader, attr string) gofuse.Status {
	return r.RawFileSystem.RemoveXAttr(uninterrupted, h, attr)
}

func (r rawFS) Create(_ <-chan struct{}, in *gofuse.CreateIn, name string, out *gofuse.CreateOut) gofuse.Status {
	return r.RawFileSystem.Create(uninterrupted, in, name, out)
}

func (r rawFS) Tmpfile(_ <-chan struct{}, in *gofuse.CreateIn, out *gofuse.CreateOut) gofuse.Status {
	return r.RawFileSystem.Tmpfile(uninterrupted, in, out)
}

// Open registers an open with the metadata service (and may truncate).
func (r rawFS) Open(_ <-chan struct{}, in *gofuse.OpenIn, out *gofuse.OpenOut) gofuse.Status {
	return r.RawFileSystem.Open(uninterrupted, in, out)
}

func (r rawFS) SetLk(_ <-chan struct{}, in *gofuse.LkIn) gofuse.Status {
	return r.RawFileSystem.SetLk(uninterrupted, in)
}

func (r rawFS) Write(_ <-chan struct{}, in *gofuse.WriteIn, data []byte) (uint32, gofuse.Status) {
	return r.RawFileSystem.Write(uninterrupted, in, data)
}

func (r rawFS) Writev(_ <-chan struct{}, in *gofuse.WriteIn, data [][]byte) (uint32, gofuse.Status) {
	return r.RawFileSystem.Writev(uninterrupted, in, data)
}

func (r rawFS) CopyFileRange(_ <-chan struct{}, in *gofuse.CopyFileRangeIn) (uint32, gofuse.Status) {
	return r.RawFileSystem.CopyFileRange(uninterrupted, in)
}

func (r rawFS) Fsync(_ <-chan struct{}, in *gofuse.FsyncIn) gofuse.Status {
	return r.RawFileSystem.Fsync(uninterrupted, in)
}

func (r rawFS) FsyncDir(_ <-chan struct{}, in *gofuse.FsyncIn) gofuse.Status {
	return r.RawFileSystem.FsyncDir(uninterrupted, in)
}

func (r rawFS) Fallocate(_ <-chan struct{}, in *gofuse.FallocateIn) gofuse.Status {
	return r.RawFileSystem.Fallocate(uninterrupted, in)
}

// mountRaw is fs.Mount with rawFS in between.
func mountRaw(fsys *filesystem, dir string, root fs.InodeEmbedder, opts *fs.Options) (*gofuse.Server, error) {
	raw := rawFS{RawFileSystem: fs.NewNodeFS(root, opts), owners: &fsys.flushOwners}
	srv, err := gofuse.NewServer(raw, dir, &opts.MountOptions)
	if err != nil {
		return nil, err
	}
	go srv.Serve()
	if err := srv.WaitMount(); err != nil {
		return nil, err
	}
	return srv, nil
}

// flushOwner returns the lock owner of the FLUSH being served with ctx.
func (f *filesystem) flushOwner(ctx context.Context) (uint64, bool) {
	fc, ok := ctx.(*gofuse.Context)
	if !ok {
		return 0, false
	}
	v, ok := f.flushOwners.Load(fc.Cancel)
	if !ok {
		return 0, false
	}
	return v.(uint64), true
}

// fuseLock converts a lock from the kernel.
func fuseLock(owner uint64, lk *gofuse.FileLock, flags uint32) (proto.Lock, syscall.Errno) {
	l := proto.Lock{Owner: owner, Flock: flags&gofuse.LK_FLOCK != 0, Start: lk.Start, End: min(lk.End, proto.LockEOF), Pid: lk.Pid}
	switch lk.Typ {
	case syscall.F_RDLCK:
		l.Type = proto.LockRead
	case syscall.F_WRLCK:
		l.Type = proto.LockWrite
	case syscall.F_UNLCK:
		l.Type = proto.LockUnlock
	default:
		return l, syscall.EINVAL
	}
	if l.Start > l.End {
		return l, syscall.EINVAL
	}
	return l, 0
}

// Getlk implements fs.FileGetlker (F_GETLK, F_OFD_GETLK): the first lock
// of another owner, on any mount, that conflicts.
func (h *handle) Getlk(ctx context.Context, owner uint64, lk *gofuse.FileLock, flags uint32, out *gofuse.FileLock) syscall.Errno {
	l, errno := fuseLock(owner, lk, flags)
	if errno != 0 {
		return errno
	}
	c, err := h.f.Lock(h.fsys.creds.with(ctx), l, true)
	if err != nil {
		return h.fsys.errno("getlk", err)
	}
	*out = gofuse.FileLock{Typ: syscall.F_UNLCK}
	if c.Type != proto.LockUnlock {
		out.Start, out.End, out.Pid = c.Start, c.End, c.Pid
		out.Typ = syscall.F_RDLCK
		if c.Type == proto.LockWrite {
			out.Typ = syscall.F_WRLCK
		}
	}
	return 0
}

// Setlk implements fs.FileSetlker (F_SETLK, F_OFD_SETLK, flock with
// LOCK_NB, and unlocks): EAGAIN if another owner on any mount holds a
// conflicting lock.
func (h *handle) Setlk(ctx context.Context, owner uint64, lk *gofuse.FileLock, flags uint32) syscall.Errno {
	l, errno := fuseLock(owner, lk, flags)
	if errno != 0 {
		return errno
	}
	_, err := h.f.Lock(h.fsys.creds.with(ctx), l, false)
	if err == nil {
		h.granted(l)
	}
	return h.lockErrno("setlk", err)
}

// granted drops the kernel's cached pages and attributes of the file once
// a lock was taken: the previous holder's writes must be read from the
// targets (see client.File.Lock).
func (h *handle) granted(l proto.Lock) {
	if l.Type != proto.LockUnlock && h.inode != nil {
		_ = h.inode.NotifyContent(0, 0)
	}
}

// Setlkw implements fs.FileSetlkwer (F_SETLKW, F_OFD_SETLKW, flock
// without LOCK_NB): waits until the lock is granted, or fails with EINTR
// when the kernel interrupts the request (the process got a signal).
func (h *handle) Setlkw(ctx context.Context, owner uint64, lk *gofuse.FileLock, flags uint32) syscall.Errno {
	l, errno := fuseLock(owner, lk, flags)
	if errno != 0 {
		return errno
	}
	err := h.f.LockWait(h.fsys.creds.with(ctx), l) // still cancelled by an interrupt
	if err == nil {
		h.granted(l)
	}
	return h.lockErrno("setlkw", err)
}

// lockErrno is errno without logging the answers a lock call is expected
// to give (a conflict, an interrupt).
func (h *handle) lockErrno(op string, err error) syscall.Errno {
	if errno, ok := client.Errno(err); ok && (errno == syscall.EAGAIN || errno == syscall.EINTR) {
		return errno
	}
	return h.fsys.errno(op, err)
}

// flushLocks releases the POSIX locks of the closing process (the FLUSH's
// lock owner) on the file.
func (h *handle) flushLocks(ctx context.Context) error {
	owner, ok := h.fsys.flushOwner(ctx)
	if !ok {
		return nil
	}
	if err := h.f.FlushLocks(ctx, owner); err != nil {
		return fmt.Errorf("fuse: release locks at close: %w", err)
	}
	return nil
}

// appendWrite writes data at the true end of the file, wherever the
// kernel thought the end was (off): O_APPEND across mounts. When the
// kernel's idea was wrong (another mount appended), its cached attributes
// are dropped so that it asks for the real size (attributes only: pages
// cannot be invalidated while the kernel waits for this reply, and an
// appending handle is direct I/O, see openFlags).
func (h *handle) appendWrite(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	at, n, err := h.f.Append(ctx, data)
	if err != nil {
		return uint32(n), h.fsys.errno("append", err)
	}
	if at != uint64(off) && h.inode != nil {
		_ = h.inode.NotifyContent(-1, 0) // attributes only
	}
	return uint32(n), 0
}
