package fuse

import (
	"context"
	"errors"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	gofuse "github.com/hanwen/go-fuse/v2/fuse"

	"github.com/weft-fs/weft/client"
	"github.com/weft-fs/weft/proto"
)

// handle is an open regular file.
type handle struct {
	fsys *filesystem
	f    *client.File
	// appending: opened with O_APPEND, so every write goes to the true
	// end of the file (locks.go, appendWrite); inode is the file's node.
	appending bool
	inode     *fs.Inode
	// job is the job of the process that opened the handle: its writes
	// are counted for it (with writeback caching the kernel may send them
	// from another thread, so the writer's own pid is not reliable).
	job string
	// uncached: opened with O_DIRECT. Its reads are marked so
	// (proto.WithUncached): read from a local object's file, they bypass
	// this host's page cache too, as the application asked.
	uncached bool
}

func newHandle(fsys *filesystem, f *client.File, inode *fs.Inode, flags uint32, job string) *handle {
	// A metadata service without Append (test fakes) leaves O_APPEND to
	// the kernel's idea of the end of file, which is right on one mount.
	appending := flags&syscall.O_APPEND != 0 && fsys.c.ClusterLocks()
	return &handle{fsys: fsys, f: f, inode: inode, appending: appending, job: job, uncached: flags&syscall.O_DIRECT != 0}
}

// openFlags returns the FOPEN flags of the open reply. An appending
// handle is direct I/O: the kernel would otherwise put each appended
// record into its page cache at its own idea of the end of file, not
// where the metadata server placed it (appendWrite).
func (h *handle) openFlags(flags uint32) uint32 {
	if h.appending {
		flags = flags&^gofuse.FOPEN_KEEP_CACHE | gofuse.FOPEN_DIRECT_IO
	}
	return flags
}

// Read implements fs.FileReader. The reply is written to the kernel
// straight from the client's buffers (read-ahead chunks included) with one
// writev: see bufsResult.
func (h *handle) Read(ctx context.Context, dest []byte, off int64) (gofuse.ReadResult, syscall.Errno) {
	ctx = h.fsys.creds.withJob(ctx)
	if h.uncached {
		ctx = proto.WithUncached(ctx)
	}
	bufs, release, err := h.f.ReadBufs(ctx, dest, uint64(off))
	if err != nil {
		return nil, h.fsys.errno("read", err)
	}
	n := 0
	for _, b := range bufs {
		n += len(b)
	}
	return &bufsResult{bufs: bufs, n: n, release: release}, 0
}

// bufsResult is a read reply made of slices that may point into
// read-ahead chunks, held until go-fuse calls Done (after writing the
// reply, or when it drops a failed one). It has go-fuse's Slices method,
// so go-fuse writes header and slices with one writev instead of first
// trying to splice (a pipe round trip that fails for memory buffers) or
// copying the slices together.
type bufsResult struct {
	bufs    [][]byte
	n       int
	release func()
}

func (r *bufsResult) Size() int { return r.n }

func (r *bufsResult) Slices() ([][]byte, gofuse.Status) { return r.bufs, gofuse.OK }

// Bytes concatenates the slices (go-fuse uses it only where it cannot
// write vectors).
func (r *bufsResult) Bytes(buf []byte) ([]byte, gofuse.Status) {
	if len(r.bufs) == 1 {
		return r.bufs[0], gofuse.OK
	}
	buf = buf[:0]
	for _, b := range r.bufs {
		buf = append(buf, b...)
	}
	return buf, gofuse.OK
}

func (r *bufsResult) Done() {
	if r.release != nil {
		r.release()
		r.release = nil
	}
}

// Write implements fs.FileWriter. Without writeback cache the kernel sends
// the exact range the application wrote. A handle opened with O_APPEND
// ignores the kernel's offset and writes at the end the metadata server
// reserves (appendWrite).
func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if h.job != "" {
		ctx = proto.WithJob(ctx, h.job)
	}
	if h.appending {
		return h.appendWrite(ctx, data, off)
	}
	n, err := h.f.Write(ctx, data, uint64(off))
	if err != nil {
		return 0, h.fsys.errno("write", err)
	}
	return uint32(n), 0
}

// Flush implements fs.FileFlusher (every close of a descriptor).
func (h *handle) Flush(ctx context.Context) syscall.Errno {
	// Without the job id: a FLUSH may come from a process in execve
	// closing its close-on-exec files (creds.withoutJob).
	err := h.f.Flush(h.fsys.creds.withoutJob(ctx))
	// The closing process's locks go after its data is flushed; the
	// request's own ctx names its lock owner.
	return h.fsys.errno("flush", errors.Join(err, h.flushLocks(ctx)))
}

// Fsync implements fs.FileFsyncer.
func (h *handle) Fsync(ctx context.Context, _ uint32) syscall.Errno {
	ctx = h.fsys.creds.with(ctx)
	return h.fsys.errno("fsync", h.f.Fsync(ctx))
}

// Release implements fs.FileReleaser.
func (h *handle) Release(ctx context.Context) syscall.Errno {
	ctx = h.fsys.creds.withoutJob(ctx) // may follow a close at execve, like Flush
	return h.fsys.errno("release", h.f.Release(ctx))
}
