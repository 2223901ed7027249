package fuse

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	gofuse "github.com/hanwen/go-fuse/v2/fuse"

	"github.com/weft-fs/weft/client"
	"github.com/weft-fs/weft/internal/bdi"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/transport"
)

// Config configures a mount. The first five fields are client.Config's.
type Config struct {
	MetaAddr   string
	Timeout    time.Duration       // per RPC; 0 = client.DefaultTimeout
	CacheLimit uint64              // write-behind memory; 0 = client.DefaultCacheLimit
	Logger     *slog.Logger        // nil = discard
	Transport  transport.Transport // nil = TCP

	Mountpoint string
	// AllowOther lets other users use the mount (FUSE allow_other). The
	// `weft mount` command defaults it to true.
	AllowOther bool
	// Debug logs every FUSE request.
	Debug bool
}

// ClientConfig returns the client part of the configuration.
func (c Config) ClientConfig() client.Config {
	return client.Config{MetaAddr: c.MetaAddr, Timeout: c.Timeout, CacheLimit: c.CacheLimit, Logger: c.Logger, Transport: c.Transport}
}

const (
	// dirEntryTimeout and attrTimeout bound how long the kernel trusts a
	// directory's name or any attributes without asking. Short, because
	// other mounts change things. Names of everything but directories are
	// not cached at all (entry timeout 0): close-to-open must also hold when
	// another mount renamed a new file over the name, and only a fresh
	// LOOKUP on open can see that. Directory names stay cached so a path
	// walk costs one LOOKUP for the last component, not one per component.
	dirEntryTimeout = time.Second
	attrTimeout     = time.Second
	maxIO           = 1 << 20
)

// Run mounts weft at cfg.Mountpoint and serves it until ctx is cancelled
// (then it unmounts) or the filesystem is unmounted from outside.
func Run(ctx context.Context, cfg Config) error {
	cl, err := client.New(ctx, cfg.ClientConfig())
	if err != nil {
		return err
	}
	// Mount only once the metadata server answers: a mount whose first
	// requests all fail is a dead mount the user has to clean up by hand.
	if err := waitForMeta(ctx, cl, cfg); err != nil {
		return errors.Join(err, cl.Close())
	}
	srv, err := Mount(cl, cfg)
	if err != nil {
		return errors.Join(err, cl.Close())
	}
	done := make(chan struct{})
	go func() {
		srv.Wait()
		close(done)
	}()
	select {
	case <-ctx.Done():
		err = srv.Unmount()
		<-done
	case <-done:
	}
	return errors.Join(err, cl.Close())
}

// waitForMeta asks the metadata server for the root until it answers,
// retrying for up to the RPC timeout, so that a mount started together with
// its servers (weft up, systemd) does not race them.
func waitForMeta(ctx context.Context, cl *client.Client, cfg Config) error {
	timeout := cfg.ClientConfig().Timeout
	if timeout <= 0 {
		timeout = client.DefaultTimeout
	}
	deadline := time.Now().Add(timeout)
	for {
		_, err := cl.GetAttr(ctx, proto.RootIno)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("fuse: metadata server %s did not answer within %v, not mounting: %w", cfg.MetaAddr, timeout, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Server is a mounted weft filesystem.
type Server struct {
	srv        *gofuse.Server
	mountpoint string
	log        *slog.Logger
}

// Mount mounts a filesystem served by cl at cfg.Mountpoint (only the
// mount-related fields of cfg are used) and starts serving it. The caller
// unmounts with Server.Unmount and closes cl afterwards.
func Mount(cl *client.Client, cfg Config) (*Server, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	fsys := &filesystem{c: cl, log: log, creds: newCreds(), meta: cfg.MetaAddr}
	root := &node{fsys: fsys}
	var et time.Duration // non-directories; see dirEntryTimeout
	at := attrTimeout
	opts := &fs.Options{
		MountOptions: gofuse.MountOptions{
			AllowOther:   cfg.AllowOther,
			MaxWrite:     maxIO,
			MaxReadAhead: maxIO,
			// The kernel checks mode bits against the attributes we return.
			Options:       []string{"default_permissions"},
			FsName:        "weft",
			Name:          "weft",
			Debug:         cfg.Debug,
			DirectMount:   true,
			MaxBackground: 64,
			// Locks are the metadata service's, across all mounts
			// (locks.go).
			EnableLocks: true,
			// No writeback cache (the default): every write reaches us
			// with its exact byte range, so unaligned writes from
			// several mounts to one file do not clobber each other.
		},
		EntryTimeout: &et,
		AttrTimeout:  &at,
		// No negative caching: a file created on another mount must be
		// visible to the next open here.
		NegativeTimeout: nil,
		NullPermissions: true,
		RootStableAttr:  &fs.StableAttr{Ino: uint64(proto.RootIno), Mode: syscall.S_IFDIR},
	}
	srv, err := mountRaw(fsys, cfg.Mountpoint, root, opts)
	if err != nil {
		return nil, fmt.Errorf("fuse: mount %s: %w", cfg.Mountpoint, err)
	}
	// MaxReadAhead can only lower the 128 KiB window the kernel offers in
	// FUSE_INIT; raising the mount's bdi window lets buffered sequential
	// reads arrive as 1 MiB requests (8x fewer round trips). Not needed for
	// correctness, so a failure (not root, no sysfs) only costs speed.
	if err := bdi.SetReadAhead(cfg.Mountpoint, maxIO); err != nil {
		log.Info("fuse: keeping the kernel's read-ahead window", "err", err)
	}
	return &Server{srv: srv, mountpoint: cfg.Mountpoint, log: log}, nil
}

// Wait blocks until the filesystem is unmounted.
func (s *Server) Wait() { s.srv.Wait() }

// Unmount unmounts the filesystem and waits for the serving loops to end. If
// the mount stays busy, it is detached lazily (MNT_DETACH): it disappears
// from the namespace at once and goes away when its last file is closed.
func (s *Server) Unmount() error {
	err := s.srv.Unmount()
	if err == nil {
		return nil
	}
	s.log.Warn("unmount failed; detaching lazily", "mountpoint", s.mountpoint, "err", err)
	if derr := syscall.Unmount(s.mountpoint, syscall.MNT_DETACH); derr != nil {
		return fmt.Errorf("fuse: unmount %s: %w (lazy: %v)", s.mountpoint, err, derr)
	}
	return nil
}
