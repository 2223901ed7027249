package fuse

import (
	"context"
	"errors"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
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

// CopyFileRange implements fs.NodeCopyFileRanger: copy_file_range(2)
// between two open weft files, done by the storage servers
// (client.CopyRange). The kernel drops its cached pages of the copied
// range and updates the size itself; on EOPNOTSUPP it copies through the
// mount instead.
func (n *node) CopyFileRange(ctx context.Context, fhIn fs.FileHandle, offIn uint64, out *fs.Inode, fhOut fs.FileHandle, offOut uint64, size uint64, flags uint64) (uint32, syscall.Errno) {
	in, ok1 := fhIn.(*handle)
	dst, ok2 := fhOut.(*handle)
	if !ok1 || !ok2 || flags != 0 {
		return 0, syscall.EINVAL
	}
	size = min(size, 1<<30) // the reply counts in 32 bits; callers loop on short copies
	done, err := n.fsys.c.CopyRange(ctx, in.f, offIn, dst.f, offOut, size)
	if errors.Is(err, syscall.EOPNOTSUPP) {
		n.fsys.log.Debug("fuse: copy_file_range left to the kernel", "err", err)
	}
	if err != nil {
		return 0, n.fsys.errno("copy_file_range", err)
	}
	return uint32(done), 0
}
