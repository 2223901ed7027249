package fuseceiling

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/weft-fs/weft/internal/bdi"
)

// Options of the ceiling mount.
const (
	MaxWrite     = 1 << 20
	MaxReadAhead = 1 << 20
)

// Mount is a mounted pass-through file system.
type Mount struct {
	Mountpoint string
	Backing    string
	server     *fuse.Server
}

// New mounts a loopback of backing at mountpoint and serves it from this
// process until Unmount.
func New(backing, mountpoint string) (*Mount, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(backing, &st); err != nil {
		return nil, fmt.Errorf("fuseceiling: backing directory %s: %w", backing, err)
	}
	root := &fs.LoopbackRoot{Path: backing, Dev: uint64(st.Dev)}
	root.NewNode = func(r *fs.LoopbackRoot, _ *fs.Inode, _ string, _ *syscall.Stat_t) fs.InodeEmbedder {
		return &node{LoopbackNode: fs.LoopbackNode{RootData: r}}
	}
	root.RootNode = root.NewNode(root, nil, "", &st)
	sec := time.Second
	srv, err := fs.Mount(mountpoint, root.RootNode, &fs.Options{
		EntryTimeout: &sec,
		AttrTimeout:  &sec,
		MountOptions: fuse.MountOptions{
			MaxWrite:     MaxWrite,
			MaxReadAhead: MaxReadAhead,
			FsName:       "weft-fuse-ceiling",
			Name:         "loopback",
			DirectMount:  true, // mount(2) when root, else fusermount
		},
	})
	if err != nil {
		return nil, fmt.Errorf("fuseceiling: mount %s: %w", mountpoint, err)
	}
	// The same read-ahead window as a weft mount (see internal/bdi), so the
	// ceiling is not handicapped on buffered reads; best effort there too.
	_ = bdi.SetReadAhead(mountpoint, MaxReadAhead)
	return &Mount{Mountpoint: mountpoint, Backing: backing, server: srv}, nil
}

// Unmount unmounts, retrying while the mount is busy, and finally detaches
// it lazily; it then waits for the server to finish (bounded by ctx).
func (m *Mount) Unmount(ctx context.Context) error {
	var err error
	for range 10 {
		if err = m.server.Unmount(); err == nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
			continue
		}
		break
	}
	if err != nil {
		if derr := syscall.Unmount(m.Mountpoint, syscall.MNT_DETACH); derr != nil {
			return fmt.Errorf("fuseceiling: unmount %s: %w (lazy: %v)", m.Mountpoint, err, derr)
		}
	}
	done := make(chan struct{})
	go func() { m.server.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("fuseceiling: waiting for the server of %s: %w", m.Mountpoint, ctx.Err())
	}
}

// node is a loopback node whose files never use kernel passthrough.
type node struct{ fs.LoopbackNode }

var (
	_ fs.NodeOpener  = (*node)(nil)
	_ fs.NodeCreater = (*node)(nil)
)

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fl, errno := n.LoopbackNode.Open(ctx, flags)
	return noPassthrough(fh), fl, errno
}

func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	in, fh, fl, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	return in, noPassthrough(fh), fl, errno
}

// file hides the loopback file's backing descriptor from go-fuse, which
// would otherwise hand it to the kernel (FOPEN_PASSTHROUGH) and take the
// daemon out of the data path.
type file struct{ *fs.LoopbackFile }

func (file) PassthroughFd() (int, bool) { return -1, false }

func noPassthrough(fh fs.FileHandle) fs.FileHandle {
	if lf, ok := fh.(*fs.LoopbackFile); ok {
		return file{lf}
	}
	return fh
}

// IsTmpfs reports whether dir is on tmpfs (the intended backing store).
func IsTmpfs(dir string) bool {
	var s syscall.Statfs_t
	if err := syscall.Statfs(dir, &s); err != nil {
		return false
	}
	const tmpfsMagic = 0x01021994
	return s.Type == tmpfsMagic
}

// PipeMaxSize reads fs.pipe-max-size: go-fuse splices 1 MiB read replies
// only when it is at least 2 MiB.
func PipeMaxSize() (int, error) {
	b, err := os.ReadFile("/proc/sys/fs/pipe-max-size")
	if err != nil {
		return 0, err
	}
	var n int
	if _, err := fmt.Sscan(string(b), &n); err != nil {
		return 0, errors.New("fuseceiling: cannot parse fs.pipe-max-size")
	}
	return n, nil
}
