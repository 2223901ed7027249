package meta

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/weft-fs/weft/jobstats"
	"github.com/weft-fs/weft/meta/metarpc"
	"github.com/weft-fs/weft/meta/store"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/storage/storagerpc"
	"github.com/weft-fs/weft/transport"
)

// Config configures Run.
type Config struct {
	DataDir          string        // required: an existing directory; the pebble database lives here
	ListenAddr       string        // required: host:port (port 0 picks a free one; see Ready)
	HeartbeatTimeout time.Duration // a target not heard from for this long is down; default 10s
	Logger           *slog.Logger  // default: discard

	// Storage removes the objects of deleted files. Nil (and no
	// NewStorage): Run builds a storagerpc client over its own pool.
	Storage proto.StorageService
	// NewStorage, used when Storage is nil, builds the storage client from
	// the server's resolver of target addresses, e.g.
	//	func(r) proto.StorageService { return storagerpc.NewClient(pool, r) }
	NewStorage func(resolve func(ctx context.Context, t proto.TargetID) (string, error)) proto.StorageService
	// OrphanGrace: see Options.OrphanGrace (default 30s).
	OrphanGrace time.Duration
	// SessionLease: see Options.SessionLease (default DefaultSessionLease).
	SessionLease time.Duration
	// LeaseTerm: see Options.LeaseTerm (default DefaultLeaseTerm).
	LeaseTerm time.Duration
	// RebuildAfter, RebuildRate, NoRebuildRate: see Options (defaults
	// DefaultRebuildAfter, DefaultRebuildRate).
	RebuildAfter     time.Duration
	RebuildRate      uint64
	NoRebuildRate    bool
	MovedObjectGrace time.Duration
	// StoreCache is the metadata store's block cache in bytes (0:
	// store.DefaultCacheSize): names, inodes and small files' copies read
	// from its tables stay there.
	StoreCache int64
	// Transport to listen on; default transport.NewTCP().
	Transport transport.Transport
	// Ready, if set, is called with the bound address once serving.
	Ready func(addr string)
	// Serving, if set, is called with the server once it serves (for what
	// runs beside it, such as the dashboard); the server stops when Run
	// returns.
	Serving func(*Server)
	// Access and AllowUnauthenticated: see Options.
	Access               Access
	AllowUnauthenticated bool
	// ProbeTimeout: see Options.ProbeTimeout (default DefaultProbeTimeout).
	ProbeTimeout time.Duration
	// CapabilityKey and CapabilityLifetime: see Options.
	CapabilityKey      []byte
	CapabilityLifetime time.Duration
	// AcceptRollback: see Options.AcceptRollback.
	AcceptRollback bool
	// JobStats, LogLevel and DefaultLogLevel: see Options.
	JobStats        jobstats.Options
	LogLevel        *slog.LevelVar
	DefaultLogLevel slog.Level

	// ID, if not 0, makes the server member ID of the replicated group
	// Peers (every member's id and address, this one's included; the same
	// on every member). Members serve clients and each other on their
	// Peers address; ListenAddr must be it (or empty: then it is).
	ID    uint64
	Peers Peers
	// Raft's timing: a tick every TickInterval (default 100ms); a follower
	// that hears no leader for ElectionTicks ticks (default 10; raft
	// randomizes it up to twice that) starts an election; the leader sends
	// heartbeats every HeartbeatTicks (default 1).
	TickInterval                  time.Duration
	ElectionTicks, HeartbeatTicks int
	// LeaseReads lets the leader answer reads for half an election
	// timeout after a quorum confirmed its leadership, instead of a
	// quorum round per burst of reads (Replica.ReadLease).
	LeaseReads bool
	// OnRole: see Replica.OnRole.
	OnRole func(leader bool)
}

// Validate checks the configuration and reports the first problem.
func (c *Config) Validate() error {
	if c.DataDir == "" {
		return errors.New("meta: Config.DataDir is required")
	}
	fi, err := os.Stat(c.DataDir)
	if err != nil {
		return fmt.Errorf("meta: data directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("meta: data directory %s is not a directory", c.DataDir)
	}
	if c.ID != 0 {
		addr, ok := c.Peers[c.ID]
		if !ok {
			return fmt.Errorf("meta: member id %d is not in the peer list %s", c.ID, c.Peers)
		}
		if c.ListenAddr == "" {
			c.ListenAddr = addr
		}
		if c.ListenAddr != addr {
			return fmt.Errorf("meta: member %d listens on %s but the peer list names %s for it", c.ID, c.ListenAddr, addr)
		}
		if c.TickInterval < 0 || c.ElectionTicks < 0 || c.HeartbeatTicks < 0 {
			return errors.New("meta: raft timing must not be negative")
		}
		if c.ElectionTicks != 0 && c.ElectionTicks <= max(c.HeartbeatTicks, 1) {
			return fmt.Errorf("meta: the election timeout (%d ticks) must be longer than the heartbeat interval (%d ticks)", c.ElectionTicks, max(c.HeartbeatTicks, 1))
		}
	} else if len(c.Peers) > 0 {
		return errors.New("meta: a peer list needs the member id of this server")
	}
	if c.ListenAddr == "" {
		return errors.New("meta: Config.ListenAddr is required")
	}
	if c.HeartbeatTimeout < 0 {
		return fmt.Errorf("meta: HeartbeatTimeout %v is negative", c.HeartbeatTimeout)
	}
	if c.ProbeTimeout < 0 {
		return fmt.Errorf("meta: ProbeTimeout %v is negative", c.ProbeTimeout)
	}
	if c.OrphanGrace < 0 {
		return fmt.Errorf("meta: OrphanGrace %v is negative", c.OrphanGrace)
	}
	if c.SessionLease < 0 {
		return fmt.Errorf("meta: SessionLease %v is negative", c.SessionLease)
	}
	return nil
}

// Run opens the metadata database in cfg.DataDir, serves the metadata RPCs
// on cfg.ListenAddr until ctx is cancelled, then shuts down cleanly: stop
// accepting, finish the requests in flight, close the database.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tr := cfg.Transport
	if tr == nil {
		tr = transport.NewTCP()
	}
	var (
		fresh bool
		err   error
	)
	if cfg.ID != 0 {
		if fresh, err = checkMemberDir(cfg.DataDir, cfg.ID, cfg.Peers); err != nil {
			return err
		}
	} else if err := checkSingleDir(cfg.DataDir); err != nil {
		return err
	}
	// A member's store has no WAL of its own: its raft log holds every
	// entry and is applied again from the store's applied index after a
	// crash (doc.go, "Durability of a member's two stores"). A single
	// server's store is its own record and keeps its WAL.
	st, err := store.OpenPebble(cfg.DataDir, store.PebbleOptions{Logger: log, NoWAL: cfg.ID != 0, CacheSize: cfg.StoreCache})
	if err != nil {
		return fmt.Errorf("meta: %w", err)
	}
	var rep *member
	if cfg.ID != 0 {
		rep, err = startMember(ctx, cfg, tr, st, fresh, log)
		if err != nil {
			st.Close()
			if fresh {
				// The directory was empty: leave it so.
				clearDir(cfg.DataDir)
			}
			return err
		}
	}
	var pool *transport.Pool
	if cfg.Storage == nil && cfg.NewStorage == nil {
		// The listener's transport, so that these calls authenticate
		// as this server when it has Security.
		tr := cfg.Transport
		if tr == nil {
			tr = transport.NewTCP()
		}
		pool = transport.NewPool(tr, transport.PoolOptions{})
		cfg.NewStorage = func(resolve func(ctx context.Context, t proto.TargetID) (string, error)) proto.StorageService {
			return storagerpc.NewClient(pool, resolve)
		}
	}
	closePool := func() error {
		if pool != nil {
			return pool.Close()
		}
		return nil
	}
	var replica *Replica
	if rep != nil {
		replica = rep.replica
	}
	srv, err := New(Options{
		Replica: replica,
		Store:   st, Storage: cfg.Storage, NewStorage: cfg.NewStorage, HeartbeatTimeout: cfg.HeartbeatTimeout,
		OrphanGrace: cfg.OrphanGrace, SessionLease: cfg.SessionLease, LeaseTerm: cfg.LeaseTerm,
		RebuildAfter: cfg.RebuildAfter, RebuildRate: cfg.RebuildRate, NoRebuildRate: cfg.NoRebuildRate,
		MovedObjectGrace: cfg.MovedObjectGrace, Logger: log, Access: cfg.Access,
		AllowUnauthenticated: cfg.AllowUnauthenticated,
		Probe:                ProbeAddr(tr), ProbeTimeout: cfg.ProbeTimeout,
		CapabilityKey: cfg.CapabilityKey, CapabilityLifetime: cfg.CapabilityLifetime,
		AcceptRollback: cfg.AcceptRollback, JobStats: cfg.JobStats,
		LogLevel: cfg.LogLevel, DefaultLogLevel: cfg.DefaultLogLevel,
	})
	if err != nil {
		closePool()
		rep.close()
		st.Close()
		return err
	}
	handler := metarpc.NewHandler(srv, srv, log)
	if rep != nil {
		handler = rep.handler(handler)
	}
	ln, err := tr.Listen(cfg.ListenAddr, func(ctx context.Context, op uint16, body []byte) ([]byte, error) {
		srv.requests.Add(1)
		return handler(ctx, op, body)
	})
	if err != nil {
		srv.Close()
		closePool()
		rep.close()
		st.Close()
		return fmt.Errorf("meta: %w", err)
	}
	if rep != nil {
		log.Info("meta: serving as a member of a replicated group", "addr", ln.Addr(), "data", cfg.DataDir, "id", cfg.ID, "peers", cfg.Peers.String(), "fsid", srv.FSID())
	} else {
		log.Info("meta: serving", "addr", ln.Addr(), "data", cfg.DataDir, "fsid", srv.FSID())
	}
	if cfg.Ready != nil {
		cfg.Ready(ln.Addr())
	}
	if cfg.Serving != nil {
		cfg.Serving(srv)
	}
	<-ctx.Done()
	groups, commands := srv.GroupStats()
	log.Info("meta: shutting down", "group_commits", groups, "commands", commands)
	errs := []error{ln.Close(), srv.Close(), closePool(), rep.close(), st.Close()}
	return errors.Join(errs...)
}
