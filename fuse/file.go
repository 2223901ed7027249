package fuse

import (
	"context"
	"syscall"

	gofuse "github.com/hanwen/go-fuse/v2/fuse"

	"github.com/weft-fs/weft/client"
)

// handle is an open regular file.
type handle struct {
	fsys *filesystem
	f    *client.File
}

// Read implements fs.FileReader.
func (h *handle) Read(ctx context.Context, dest []byte, off int64) (gofuse.ReadResult, syscall.Errno) {
	n, err := h.f.Read(ctx, dest, uint64(off))
	if err != nil {
		return nil, h.fsys.errno("read", err)
	}
	return gofuse.ReadResultData(dest[:n]), 0
}

// Write implements fs.FileWriter. Without writeback cache the kernel sends
// the exact range the application wrote (for O_APPEND at its idea of the
// end of file, which includes this mount's writes: see client.GetAttr).
func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	n, err := h.f.Write(ctx, data, uint64(off))
	if err != nil {
		return 0, h.fsys.errno("write", err)
	}
	return uint32(n), 0
}

// Flush implements fs.FileFlusher (every close of a descriptor).
func (h *handle) Flush(ctx context.Context) syscall.Errno {
	return h.fsys.errno("flush", h.f.Flush(ctx))
}

// Fsync implements fs.FileFsyncer.
func (h *handle) Fsync(ctx context.Context, _ uint32) syscall.Errno {
	return h.fsys.errno("fsync", h.f.Fsync(ctx))
}

// Release implements fs.FileReleaser.
func (h *handle) Release(ctx context.Context) syscall.Errno {
	return h.fsys.errno("release", h.f.Release(ctx))
}
