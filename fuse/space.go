package fuse

import (
	"context"
	"syscall"
)

// Allocate implements fs.FileAllocater: fallocate(2) (see
// client.File.Allocate for the modes). The kernel drops its cached pages
// of a punched or zeroed range and updates the size itself.
func (h *handle) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	return h.fsys.errno("fallocate", h.f.Allocate(ctx, off, size, mode))
}

// Lseek implements fs.FileLseeker: the kernel asks only for SEEK_DATA and
// SEEK_HOLE (client.File.Lseek).
func (h *handle) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	res, err := h.f.Lseek(ctx, off, int(whence))
	if err != nil {
		return 0, h.fsys.errno("lseek", err)
	}
	return res, 0
}
