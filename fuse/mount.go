package fuse

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hanwen/go-fuse/v2/fs"
	gofuse "github.com/hanwen/go-fuse/v2/fuse"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/weft-fs/weft/client"
	"github.com/weft-fs/weft/internal/bdi"
	"github.com/weft-fs/weft/metrics"
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
	// UnmountTimeout bounds each step of the shutdown (Server.Shutdown);
	// 0 = DefaultUnmountTimeout.
	UnmountTimeout time.Duration
	// JobIDVar says where the job id of each calling process comes from
	// (client.JobIDSource: "" none, "procname_uid", or an environment
	// variable such as SLURM_JOB_ID); servers count requests per job.
	JobIDVar client.JobIDSource
	// LogLevel and DefaultLogLevel: see client.Config.
	LogLevel        *slog.LevelVar
	DefaultLogLevel slog.Level
	// Metrics, if set, gets the client's gauges (metrics.RegisterClient:
	// the run-time parameters applied, storage requests under way).
	Metrics prometheus.Registerer
	// NoLeases turns off the metadata cache under leases (client.Config
	// Leases; docs/caching.md): every lookup and stat the kernel does not
	// answer itself then goes to the metadata leader.
	NoLeases bool
	// NoLocalReads turns off short-circuit local reads (client.Config
	// NoLocalReads; package storage/localread).
	NoLocalReads bool
	// BufferedLocalReads: large local reads through the page cache too
	// (client.Config BufferedLocalReads).
	BufferedLocalReads bool
}

// DefaultUnmountTimeout is how long each step of a shutdown may take
// before the next, harsher one (see Server.Shutdown).
const DefaultUnmountTimeout = 10 * time.Second

// ClientConfig returns the client part of the configuration.
func (c Config) ClientConfig() client.Config {
	return client.Config{MetaAddr: c.MetaAddr, Timeout: c.Timeout, CacheLimit: c.CacheLimit, Logger: c.Logger, Transport: c.Transport,
		LogLevel: c.LogLevel, DefaultLogLevel: c.DefaultLogLevel, Leases: !c.NoLeases,
		NoLocalReads: c.NoLocalReads, BufferedLocalReads: c.BufferedLocalReads}
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
	if cfg.Metrics != nil {
		if err := metrics.RegisterClient(cfg.Metrics, cl); err != nil {
			return errors.Join(fmt.Errorf("fuse: client metrics: %w", err), cl.Close())
		}
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
		err = srv.Shutdown(cfg.UnmountTimeout)
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
	dev        uint64 // the mount's device number: its FUSE connection is minor(dev)
	log        *slog.Logger

	waitOnce sync.Once
	served   chan struct{} // closed when the serving loops have ended
}

// Mount mounts a filesystem served by cl at cfg.Mountpoint (only the
// mount-related fields of cfg are used) and starts serving it. The caller
// unmounts with Server.Unmount and closes cl afterwards.
func Mount(cl *client.Client, cfg Config) (*Server, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	fsys := &filesystem{c: cl, log: log, creds: newCreds(cfg.JobIDVar), meta: cfg.MetaAddr}
	root := &node{fsys: fsys}
	fsys.nodes.Store(proto.RootIno, root)
	cl.OnLeaseInval(fsys.invalidate)
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
	s := &Server{srv: srv, mountpoint: cfg.Mountpoint, log: log, served: make(chan struct{})}
	var st unix.Stat_t
	if err := unix.Stat(cfg.Mountpoint, &st); err == nil {
		s.dev = st.Dev
	}
	return s, nil
}

// Wait blocks until the filesystem is unmounted.
func (s *Server) Wait() { <-s.loopsDone() }

// loopsDone returns a channel closed once go-fuse's serving loops ended
// (the kernel ended the connection: unmounted, or aborted).
func (s *Server) loopsDone() <-chan struct{} {
	s.waitOnce.Do(func() {
		go func() {
			s.srv.Wait()
			close(s.served)
		}()
	})
	return s.served
}

// Shutdown unmounts the file system and returns once it is no longer
// served, in bounded time whatever holds it, each step taking at most
// bound (0: DefaultUnmountTimeout), so at most about 3*bound in all:
//
//  1. unmount; it completes once the kernel ends the connection, which
//     ends the serving loops;
//  2. if the mount is busy (a file open on it) or the loops have not ended
//     (the mount lives on elsewhere, e.g. in another mount namespace),
//     detach it lazily (MNT_DETACH): it leaves this namespace at once;
//  3. if the loops still run, abort the FUSE connection (fusectl's
//     /sys/fs/fuse/connections/N/abort, when mounted): every process still
//     using the mount gets ENOTCONN;
//  4. if even that did not end them (no fusectl, or the connection is
//     held through a duplicate of the FUSE descriptor in another process),
//     return anyway: the connection ends when its last holder closes it.
//
// Each step that had to be taken is logged at warn, saying why. The error
// says what could not be done.
func (s *Server) Shutdown(bound time.Duration) error {
	if bound <= 0 {
		bound = DefaultUnmountTimeout
	}
	served := s.loopsDone()
	unmounted := make(chan error, 1)
	go func() { unmounted <- s.srv.Unmount() }()
	timer := time.NewTimer(bound)
	defer timer.Stop()
	var why string
	select {
	case err := <-unmounted:
		if err == nil {
			return nil
		}
		why = fmt.Sprintf("unmount failed (%v)", err)
	case <-timer.C:
		why = fmt.Sprintf("the FUSE connection did not end within %v of the unmount (the mount is still in use elsewhere, e.g. in another mount namespace)", bound)
	}
	switch err := unix.Unmount(s.mountpoint, unix.MNT_DETACH); {
	case errors.Is(err, unix.EINVAL):
		s.log.Warn("fuse: "+why+"; not mounted here any more, nothing to detach", "mountpoint", s.mountpoint)
	case err != nil:
		s.log.Warn("fuse: "+why+"; lazy detach failed too", "mountpoint", s.mountpoint, "err", err)
	default:
		s.log.Warn("fuse: "+why+"; detached lazily: gone from this namespace, the kernel drops it when its last user is gone", "mountpoint", s.mountpoint)
	}
	timer.Reset(bound)
	select {
	case <-served:
		return nil
	case <-timer.C:
	}
	if err := s.abort(); err != nil {
		s.log.Warn("fuse: the FUSE connection is still in use and cannot be aborted; exiting anyway", "mountpoint", s.mountpoint, "err", err)
		return fmt.Errorf("fuse: shutdown of %s: connection still in use after %v, abort: %w", s.mountpoint, 2*bound, err)
	}
	s.log.Warn(fmt.Sprintf("fuse: the FUSE connection was still in use %v after the lazy detach: aborted the FUSE connection (its users get ENOTCONN)", bound), "mountpoint", s.mountpoint, "connection", unix.Minor(s.dev))
	timer.Reset(bound)
	select {
	case <-served:
		return nil
	case <-timer.C:
		s.log.Warn("fuse: serving loops still running after the abort (the FUSE descriptor is held by another process); exiting anyway", "mountpoint", s.mountpoint)
		return fmt.Errorf("fuse: shutdown of %s: serving loops did not end within %v of aborting the connection", s.mountpoint, bound)
	}
}

// abort aborts the mount's FUSE connection through fusectl.
func (s *Server) abort() error {
	if s.dev == 0 {
		return errors.New("fuse: device number of the mount unknown")
	}
	p := fmt.Sprintf("/sys/fs/fuse/connections/%d/abort", unix.Minor(s.dev))
	if err := os.WriteFile(p, []byte("1"), 0); err != nil {
		return fmt.Errorf("fuse: abort connection (is fusectl mounted on /sys/fs/fuse/connections?): %w", err)
	}
	return nil
}
