package storage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/weft-fs/weft/capability"
	"github.com/weft-fs/weft/jobstats"
	"github.com/weft-fs/weft/meta/metarpc"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/storage/storagerpc"
	"github.com/weft-fs/weft/storage/vfs"
	"github.com/weft-fs/weft/transport"
)

// DefaultHeartbeatInterval is how often a storage server reports usage.
const DefaultHeartbeatInterval = 2 * time.Second

// Config configures Run.
type Config struct {
	ListenAddr    string // host:port to serve on
	AdvertiseAddr string // address given to the metadata server; "" = the listener's address
	MetaAddr      string // metadata server
	Targets       []string
	// Capacity, if not 0, is a byte limit per target (tests use it to
	// provoke ENOSPC); 0 means what the disk has.
	Capacity          uint64
	HeartbeatInterval time.Duration // 0 = DefaultHeartbeatInterval
	Logger            *slog.Logger

	// Registry, if set, replaces the metarpc client for MetaAddr that Run
	// otherwise uses to register targets (tests pass a fake).
	Registry proto.TargetRegistry
	// FS is where targets live; nil = the real filesystem.
	FS vfs.FS
	// Transport serves requests; nil = transport.NewTCP().
	Transport transport.Transport
	// MaxOpenObjects per target; 0 = DefaultMaxOpen.
	MaxOpenObjects int
	// ReadBytesPerConn and ReadBytesPerServer bound the read buffers held
	// for one connection and for all (see storagerpc.HandlerOptions);
	// 0 = storagerpc.DefaultReadBytesPerConn (64 MiB) and
	// DefaultReadBytesPerServer (512 MiB).
	ReadBytesPerConn, ReadBytesPerServer int64
	// CapabilityKey is the key shared with the metadata server that
	// verifies clients' capabilities (capability.KeySize bytes, from the
	// key bundle). Nil: clients' data requests are all refused.
	CapabilityKey []byte
	// AllowUnauthenticated trusts peers of a transport without security
	// like servers (see storagerpc.Options). Tests only.
	AllowUnauthenticated bool
	// Domain is the failure domain of this server's targets (a rack, a
	// power feed): the copies and shards of a stripe are placed in
	// distinct domains. "": the server is its own domain.
	Domain string
	// Jobs counts the requests that name a job (see package jobstats);
	// nil: a table with the default bounds.
	Jobs *jobstats.Table
	// LogLevel, if set, is Logger's level: the run-time parameter
	// log.level.storage sets it (params.go), "" back to DefaultLogLevel.
	LogLevel        *slog.LevelVar
	DefaultLogLevel slog.Level
	// Scrub, if set, counts the scrub's bytes and corrupt objects
	// (metrics).
	Scrub ScrubObserver
	// LocalSocket, if set, is the path of a Unix socket on which the
	// server also serves short-circuit local reads (local.go) to clients
	// of its own host; "" = none.
	LocalSocket string

	capKey *capability.Key
}

// validate checks cfg and returns it with defaults filled in and target
// directories made absolute.
func (cfg Config) validate() (Config, error) {
	if cfg.FS == nil {
		cfg.FS = vfs.Default
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if cfg.Jobs == nil {
		cfg.Jobs = jobstats.New(jobstats.Options{Service: "storage"})
	}
	if cfg.ReadBytesPerConn < 0 || cfg.ReadBytesPerServer < 0 {
		return cfg, fmt.Errorf("storage: negative read buffer budget (%d per connection, %d per server)", cfg.ReadBytesPerConn, cfg.ReadBytesPerServer)
	}
	if cfg.HeartbeatInterval < 0 {
		return cfg, fmt.Errorf("storage: negative heartbeat interval %v", cfg.HeartbeatInterval)
	}
	if cfg.ListenAddr == "" {
		return cfg, errors.New("storage: no listen address")
	}
	if cfg.Registry == nil && cfg.MetaAddr == "" {
		return cfg, errors.New("storage: no metadata server address")
	}
	if len(cfg.Targets) == 0 {
		return cfg, errors.New("storage: no targets configured")
	}
	seen := make(map[string]string)
	dirs := make([]string, len(cfg.Targets))
	for i, d := range cfg.Targets {
		if d == "" {
			return cfg, errors.New("storage: empty target directory")
		}
		abs, err := filepath.Abs(d)
		if err != nil {
			return cfg, fmt.Errorf("storage: target %s: %w", d, err)
		}
		if prev, ok := seen[abs]; ok {
			return cfg, fmt.Errorf("storage: target directory %s given twice (%s, %s)", abs, prev, d)
		}
		seen[abs] = d
		parent := filepath.Dir(abs)
		if fi, err := cfg.FS.Stat(parent); err != nil {
			return cfg, fmt.Errorf("storage: target %s: parent directory %s: %w", d, parent, err)
		} else if !fi.IsDir() {
			return cfg, fmt.Errorf("storage: target %s: parent %s is not a directory", d, parent)
		}
		if fi, err := cfg.FS.Stat(abs); err == nil && !fi.IsDir() {
			return cfg, fmt.Errorf("storage: target %s is not a directory", d)
		} else if err != nil && !errors.Is(err, os.ErrNotExist) {
			return cfg, fmt.Errorf("storage: target %s: %w", d, err)
		}
		dirs[i] = abs
	}
	cfg.Targets = dirs
	if cfg.LocalSocket != "" {
		// Clients are told this path: it must not depend on their cwd.
		abs, err := filepath.Abs(cfg.LocalSocket)
		if err != nil {
			return cfg, fmt.Errorf("storage: local socket %s: %w", cfg.LocalSocket, err)
		}
		cfg.LocalSocket = abs
	}
	if cfg.CapabilityKey != nil {
		k, err := capability.NewKey(0, cfg.CapabilityKey)
		if err != nil {
			return cfg, fmt.Errorf("storage: capability key: %w", err)
		}
		cfg.capKey = k
	}
	return cfg, nil
}

// Run serves cfg.Targets on cfg.ListenAddr until ctx is cancelled. It
// registers every target with the metadata server (retrying with backoff
// while the server is unreachable: it may start later), serves a target as
// soon as its id is known (from target.json, or from its first
// registration), and heartbeats usage every HeartbeatInterval. On cancel it
// stops serving and closes the targets, and returns nil. It fails at once
// on a bad config, a target that cannot be opened, or a registry that
// refuses a target (EINVAL: wrong id or implausible usage; EPERM: its uuid
// belongs to another storage server; EACCES: this server may not
// register). An address the registry could not probe (EHOSTUNREACH) is
// retried like an unreachable registry.
func Run(ctx context.Context, cfg Config) error {
	cfg, err := cfg.validate()
	if err != nil {
		return err
	}
	tr := cfg.Transport
	if tr == nil {
		tr = transport.NewTCP()
	}
	log := cfg.Logger
	if cfg.Registry == nil {
		pool := transport.NewPool(tr, transport.PoolOptions{})
		defer pool.Close()
		cfg.Registry = metarpc.NewClient(pool, cfg.MetaAddr)
	}
	// Copy reads sources on other servers' targets through them, found
	// in the registry's target list (a metadata server's has one).
	var peers proto.StorageService
	if lister, ok := cfg.Registry.(interface {
		Targets(context.Context) ([]proto.TargetInfo, error)
	}); ok {
		pool := transport.NewPool(tr, transport.PoolOptions{})
		defer pool.Close()
		peers = storagerpc.NewClient(pool, (&peerResolver{list: lister.Targets}).resolve)
	}

	// Listen before opening the targets: a port already in use must fail
	// before a new target directory is formatted. Requests wait until the
	// targets are open: the clients of a restarted server know its
	// address and its targets' ids, and would otherwise be told for the
	// moment the opening takes (long on a loaded machine) that the server
	// serves no such target (ESTALE), which a reader of a plain file
	// would see as an error and an EC reader as a lost shard. A new
	// target (no id yet) is added to srv when it registers; until then
	// requests for it fail as for any unknown target (and no one sends
	// any: the metadata server learns of it only then).
	opened := make(chan struct{})
	var openedOnce sync.Once
	markOpened := func() { openedOnce.Do(func() { close(opened) }) }
	defer markOpened() // on a failed start, release the requests waiting
	srv := NewServer()
	if peers != nil {
		srv.SetPeers(peers)
	}
	var local storagerpc.LocalInfo // the local socket, if any (local.go)
	if cfg.LocalSocket != "" {
		id, err := newLocalID()
		if err != nil {
			return fmt.Errorf("storage: local socket id: %w", err)
		}
		local = storagerpc.LocalInfo{Path: cfg.LocalSocket, ID: id}
	}
	h := storagerpc.New(srv, storagerpc.Options{
		Logger: log, CapabilityKey: cfg.capKey, AllowUnauthenticated: cfg.AllowUnauthenticated,
		ReadBytesPerConn: cfg.ReadBytesPerConn, ReadBytesPerServer: cfg.ReadBytesPerServer,
		Jobs: cfg.Jobs, Local: local,
	})
	serve := func(ctx context.Context, op uint16, req []byte) ([]byte, error) {
		select {
		case <-opened:
		case <-ctx.Done():
			return nil, fmt.Errorf("storage: its targets are still being opened: %w", syscall.EAGAIN)
		}
		return h.Serve(ctx, op, req)
	}
	ln, err := tr.Listen(cfg.ListenAddr, serve)
	if err != nil {
		return fmt.Errorf("storage: listen on %s: %w", cfg.ListenAddr, err)
	}
	if local.Path != "" {
		ls, err := listenLocal(local.Path, local.ID, srv, h.AuthorizeLocal, log)
		if err != nil {
			ln.Close()
			return err
		}
		defer ls.Close()
		log.Info("storage: serving short-circuit local reads", "socket", local.Path)
	}
	var targets []*Target
	defer func() {
		ln.Close() // no request reaches a closed target
		for _, t := range targets {
			t.Close()
		}
	}()
	for _, dir := range cfg.Targets {
		t, err := OpenTarget(dir, TargetOptions{FS: cfg.FS, Capacity: cfg.Capacity, MaxOpen: cfg.MaxOpenObjects, Logger: log})
		if err != nil {
			return err
		}
		targets = append(targets, t)
		if t.ID() != 0 {
			if err := srv.Add(t); err != nil {
				return err
			}
		}
	}
	markOpened()

	addr := cfg.AdvertiseAddr
	if addr == "" {
		addr = ln.Addr()
	}
	log.Info("storage: serving", "addr", ln.Addr(), "advertise", addr, "targets", len(targets))

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fatal := make(chan error, len(targets))
	var wg sync.WaitGroup
	// The scrub: every target's passes share one pace; the objects found
	// corrupt, by the scrub or by reads, go to the metadata service.
	sc := newScrubber()
	rep := newScrubReporter()
	if cfg.Scrub != nil {
		sc.onBytes = cfg.Scrub.ScrubBytes
	}
	for _, t := range targets {
		t.SetCorruptHook(func(obj proto.ObjectID) {
			rep.found(t, obj)
			if cfg.Scrub != nil {
				cfg.Scrub.ScrubCorrupt(t.ID())
			}
		})
		wg.Go(func() { sc.loop(ctx, t) })
		wg.Go(func() { t.flushLoop(ctx, FlushInterval) })
	}
	if rec, ok := cfg.Registry.(proto.ScrubReceiver); ok {
		wg.Go(func() { rep.loop(ctx, srv, rec, log) })
	}
	wg.Go(func() { paramsLoop(ctx, cfg, sc) })
	for _, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := registerLoop(ctx, cfg, addr, srv, t); err != nil {
				fatal <- err
			}
		}()
	}
	select {
	case <-ctx.Done():
		err = nil
	case err = <-fatal:
	}
	cancel()
	wg.Wait()
	return err
}

// registerLoop registers t (retrying with backoff), starts serving it, then
// heartbeats until ctx ends. It returns an error only if the registry
// refuses the target.
func registerLoop(ctx context.Context, cfg Config, addr string, srv *Server, t *Target) error {
	log := cfg.Logger.With("target", t.Dir())
	backoff := 100 * time.Millisecond
	registered := false
	for {
		err := register(ctx, cfg, addr, srv, t)
		switch {
		case err == nil:
			if !registered {
				log.Info("storage: target registered", "id", t.ID())
			}
			registered = true
			backoff = cfg.HeartbeatInterval
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, ErrForeignFS):
			return err
		case errors.Is(err, syscall.EINVAL), errors.Is(err, syscall.EEXIST),
			errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EACCES):
			// Refusals that retrying does not change: a wrong id, usage
			// the registry finds implausible, a uuid registered by
			// another storage server, credentials that may not register.
			return fmt.Errorf("storage: target %s: registration refused: %w", t.Dir(), err)
		case registered:
			log.Warn("storage: heartbeat failed", "err", err)
			backoff = cfg.HeartbeatInterval
		default:
			log.Warn("storage: registration failed, retrying", "err", err, "in", backoff)
		}
		timer := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-timer.C:
		}
		if !registered {
			backoff = min(backoff*2, 5*time.Second)
		}
	}
}

// fsidSource is a registry that tells its file system id (metarpc.Client).
type fsidSource interface {
	FSID(ctx context.Context) (string, error)
}

// checkFSID makes sure, once per process and target, that t belongs to the
// registry's file system (recording it at the first registration). A
// registry that cannot say (a test fake) is not checked.
func checkFSID(ctx context.Context, cfg Config, t *Target) error {
	src, ok := cfg.Registry.(fsidSource)
	if !ok || t.fsidChecked.Load() {
		return nil
	}
	fsid, err := src.FSID(ctx)
	if errors.Is(err, syscall.ENOSYS) || (err == nil && fsid == "") {
		return nil // a metadata server without file system ids
	}
	if err != nil {
		return err
	}
	if err := t.CheckFSID(fsid); err != nil {
		return err
	}
	t.fsidChecked.Store(true)
	return nil
}

// register makes one RegisterTarget call (first registration or heartbeat).
func register(ctx context.Context, cfg Config, addr string, srv *Server, t *Target) error {
	u, err := t.Usage()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, max(10*time.Second, 2*cfg.HeartbeatInterval))
	defer cancel()
	if err := checkFSID(ctx, cfg, t); err != nil {
		return err
	}
	if t.ID() == 0 {
		// Clients may learn the id the reply carries before it arrives:
		// their requests wait for it (Server.target).
		done := srv.Registering()
		defer done()
	}
	info := proto.TargetInfo{ID: t.ID(), Addr: addr, Total: u.Total, Used: u.Used, Free: u.Free, Up: true, Domain: cfg.Domain, FSID: t.FSID(),
		Objects: uint64(max(u.Objects, 0)), FilesFree: u.FilesFree, Device: u.Device, IO: u.IO}
	id, err := cfg.Registry.RegisterTarget(ctx, t.UUID(), info)
	if err != nil {
		return err
	}
	if err := t.SetID(id); err != nil {
		return err
	}
	return srv.Add(t)
}
