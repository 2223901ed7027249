package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/weft-fs/weft/dashboard"
	"github.com/weft-fs/weft/internal/units"
	"github.com/weft-fs/weft/meta"
	"github.com/weft-fs/weft/meta/store"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/storage/storagerpc"
	"github.com/weft-fs/weft/transport"
)

// metaOptions are the settings of `weft meta`; the toml tags are the keys of
// its --config file.
type metaOptions struct {
	Listen           string         `toml:"listen"`
	Data             string         `toml:"data"`
	HeartbeatTimeout units.Duration `toml:"heartbeat_timeout"`
	SessionLease     units.Duration `toml:"session_lease"`
	LeaseTerm        units.Duration `toml:"lease_term"`
	OrphanGrace      units.Duration `toml:"orphan_grace"`
	RebuildAfter     units.Duration `toml:"rebuild_after"`
	RebuildRate      units.Size     `toml:"rebuild_rate"`
	MovedGrace       units.Duration `toml:"moved_object_grace"`
	HTTP             string         `toml:"http"`
	StoreCache       units.Size     `toml:"store_cache"`
	// AcceptRollback is a flag only: serving an older store is a decision
	// for one start, not a setting to leave in a file.
	AcceptRollback bool `toml:"-"`
	// A member of a replicated group: its id and every member's id and
	// address ("1=h1:7400,2=h2:7400,3=h3:7400"); raft's timing.
	ID             uint64         `toml:"id"`
	Peers          string         `toml:"peers"`
	RaftTick       units.Duration `toml:"raft_tick"`
	ElectionTicks  int            `toml:"election_ticks"`
	HeartbeatTicks int            `toml:"heartbeat_ticks"`
	LeaseReads     bool           `toml:"lease_reads"`
	// FollowerGoMaxProcs is GOMAXPROCS while this member follows (0:
	// --gomaxprocs throughout).
	FollowerGoMaxProcs int `toml:"follower_gomaxprocs"`
	peers              meta.Peers
	accessOptions
	jobstatsOptions
	daemonOptions
}

// accessOptions are the client allow-list and root squash (meta.Access).
type accessOptions struct {
	RootSquash       bool     `toml:"root_squash"`
	SquashUid        uint32   `toml:"squash_uid"`
	SquashGid        uint32   `toml:"squash_gid"`
	RootSquashExempt []string `toml:"root_squash_exempt"`
	ClientNetworks   []string `toml:"client_networks"`
}

func (a *accessOptions) addFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&a.RootSquash, "root-squash", false, "treat requests of clients' root as --squash-uid/--squash-gid")
	a.SquashUid, a.SquashGid = meta.DefaultSquashID, meta.DefaultSquashID
	fs.Uint32Var(&a.SquashUid, "squash-uid", a.SquashUid, "the uid a squashed root becomes")
	fs.Uint32Var(&a.SquashGid, "squash-gid", a.SquashGid, "the gid a squashed root becomes")
	fs.StringSliceVar(&a.RootSquashExempt, "root-squash-exempt", nil, "client networks (CIDR) whose root is not squashed")
	fs.StringSliceVar(&a.ClientNetworks, "client-networks", nil, "the only networks (CIDR) clients may connect from (default: any)")
}

func (a *accessOptions) access() (meta.Access, error) {
	exempt, err := meta.ParsePrefixes(a.RootSquashExempt)
	if err != nil {
		return meta.Access{}, fmt.Errorf("--root-squash-exempt: %w", err)
	}
	nets, err := meta.ParsePrefixes(a.ClientNetworks)
	if err != nil {
		return meta.Access{}, fmt.Errorf("--client-networks: %w", err)
	}
	if a.SquashUid == 0 || a.SquashGid == 0 {
		return meta.Access{}, fmt.Errorf("--squash-uid and --squash-gid must not be 0 (root)")
	}
	return meta.Access{RootSquash: a.RootSquash, SquashUid: a.SquashUid, SquashGid: a.SquashGid,
		RootSquashExempt: exempt, ClientNetworks: nets}, nil
}

func newMetaCmd() *cobra.Command { return metaCommand(runMeta) }

// metaCommand builds the command around run, which tests replace to inspect the
// resolved options without starting anything.
func metaCommand(run func(context.Context, *metaOptions) error) *cobra.Command {
	var (
		o          metaOptions
		configPath string
	)
	cmd := &cobra.Command{
		Use:   "meta --data DIR [--listen HOST:PORT | --id N --peers 1=H1:P,2=H2:P,3=H3:P]",
		Short: "Run the metadata server",
		Long: `Run the metadata server: it keeps the namespace (directories, inodes,
layouts) in a pebble database under --data and the registry of storage
targets. It serves until SIGINT or SIGTERM, then shuts down cleanly.

Alone (--listen), it is the whole metadata service. With --id and --peers
it is one member of a replicated group of 3 (or 5) servers that keep the
same namespace with raft: start every member with the same --peers and its
own --id and empty --data directory. It listens on its own address from
--peers; clients, storage servers and tools take the list of addresses
(--meta h1:7400,h2:7400,h3:7400) and find the leader themselves. The
group serves while a majority of its members run.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.resolve(cmd, configPath); err != nil {
				return explainConfig(cmd, configPath, &o, err)
			}
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			return run(ctx, &o)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&configPath, "config", "", "TOML config file (keys: "+keyList(&o)+"); flags override it")
	fs.StringVar(&o.Listen, "listen", "127.0.0.1:7400", "address to serve on (host:port)")
	fs.StringVar(&o.Data, "data", "", "directory holding the metadata database (must exist)")
	o.HeartbeatTimeout = units.Duration(10 * time.Second)
	fs.Var(&o.HeartbeatTimeout, "heartbeat-timeout", "a storage target not heard from for this long is reported down")
	o.SessionLease = units.Duration(meta.DefaultSessionLease)
	fs.Var(&o.SessionLease, "session-lease", "a client session (a mount) not renewed for this long expires: its open files are closed and its locks released")
	o.LeaseTerm = units.Duration(meta.DefaultLeaseTerm)
	fs.Var(&o.LeaseTerm, "lease-term", "mounts cache lookups and attributes under metadata leases; a change waits at most this long for a mount that stopped answering to drop what it cached")
	o.OrphanGrace = units.Duration(meta.DefaultOrphanGrace)
	fs.StringVar(&o.HTTP, "http", "", "serve the web dashboard (health, capacity, throughput, clients) on http://ADDR/, e.g. 127.0.0.1:7480 (default off; it names client hosts: keep it on the management network)")
	fs.Var(&o.OrphanGrace, "orphan-grace", "after a restart, how long mounts have to re-register their open files and locks (no new locks meanwhile) before unlinked files nobody holds are deleted")
	o.RebuildAfter = units.Duration(meta.DefaultRebuildAfter)
	fs.Var(&o.RebuildAfter, "rebuild-after", "a storage target down for this long is marked out and its objects are rebuilt on other targets (0: never by itself, only weft target out)")
	o.RebuildRate = units.Size(meta.DefaultRebuildRate)
	fs.Var(&o.RebuildRate, "rebuild-rate", "bytes per second the rebuild copies at most, over all targets (0: no limit; weft target rebuild-rate changes it while it runs)")
	o.MovedGrace = units.Duration(meta.DefaultMovedObjectGrace)
	o.StoreCache = units.Size(store.DefaultCacheSize)
	fs.Var(&o.StoreCache, "store-cache", "memory for the metadata store's block cache: names, inodes and small files' copies read from its tables (at least 8MiB; a namespace of millions of files whose hot part is scattered wants more)")
	fs.Var(&o.MovedGrace, "moved-object-grace", "an object moved off a target that still serves (weft target drain) is removed there this long after the move, for readers that opened the file before")
	fs.Uint64Var(&o.ID, "id", 0, "this member's id in --peers (a replicated group)")
	fs.StringVar(&o.Peers, "peers", "", "every member of the replicated group as ID=HOST:PORT,... (the same on every member)")
	o.RaftTick = units.Duration(100 * time.Millisecond)
	fs.Var(&o.RaftTick, "raft-tick", "raft's clock tick (replicated group)")
	fs.IntVar(&o.ElectionTicks, "election-ticks", 10, "ticks without a leader before a member calls an election (raft randomizes between this and twice it)")
	fs.IntVar(&o.HeartbeatTicks, "heartbeat-ticks", 1, "ticks between the leader's heartbeats")
	fs.IntVar(&o.FollowerGoMaxProcs, "follower-gomaxprocs", 0, "threads running Go code at once while this member is a follower (it serves no clients then, and applies the leader's changes one at a time); as leader it runs with --gomaxprocs. 0: --gomaxprocs throughout; weft up gives its members 1")
	fs.BoolVar(&o.LeaseReads, "lease-reads", true, "the leader answers reads for half an election timeout after a quorum confirmed it leads (false: a quorum round for every burst of reads)")
	fs.BoolVar(&o.AcceptRollback, "accept-rollback", false,
		"serve a store that has fewer changes than it had durably applied before (an older backup restored on purpose)")
	o.accessOptions.addFlags(fs)
	o.jobstatsOptions.addFlags(fs)
	o.daemonOptions.addFlags(fs)
	return cmd
}

// resolve applies the config file and checks every setting, so that a
// mistake is reported before anything starts.
func (o *metaOptions) resolve(cmd *cobra.Command, configPath string) error {
	if err := loadConfig(cmd, configPath, o); err != nil {
		return err
	}
	if o.Peers != "" || o.ID != 0 {
		if o.Peers == "" || o.ID == 0 {
			return fmt.Errorf("--id and --peers go together (a member of a replicated group)")
		}
		p, err := meta.ParsePeers(o.Peers)
		if err != nil {
			return fmt.Errorf("--peers: %w", err)
		}
		for id, a := range p {
			if err := checkAddr(fmt.Sprintf("peers (member %d)", id), a, false); err != nil {
				return err
			}
		}
		self, ok := p[o.ID]
		if !ok {
			return fmt.Errorf("--id %d is not one of the members in --peers %s", o.ID, p)
		}
		if !cmd.Flags().Changed("listen") && o.Listen == "127.0.0.1:7400" {
			o.Listen = self // a member listens on its own address in --peers
		}
		if o.Listen != self {
			return fmt.Errorf("--listen %s: member %d's address in --peers is %s (leave --listen out)", o.Listen, o.ID, self)
		}
		if o.RaftTick <= 0 || o.ElectionTicks < 2 || o.HeartbeatTicks < 1 || o.ElectionTicks <= o.HeartbeatTicks {
			return fmt.Errorf("--raft-tick must be positive, --heartbeat-ticks at least 1 and --election-ticks more than it")
		}
		o.peers = p
	}
	if o.StoreCache < minStoreCache {
		return fmt.Errorf("--store-cache %s: at least %s", units.FormatSize(uint64(o.StoreCache)), units.FormatSize(minStoreCache))
	}
	if o.FollowerGoMaxProcs < 0 {
		return fmt.Errorf("--follower-gomaxprocs %d: want 0 (as --gomaxprocs) or more", o.FollowerGoMaxProcs)
	}
	if o.FollowerGoMaxProcs > 0 && o.ID == 0 {
		return fmt.Errorf("--follower-gomaxprocs is for a member of a replicated group (--id, --peers): a lone server never follows")
	}
	if err := checkAddr("listen", o.Listen, true); err != nil {
		return err
	}
	if o.HTTP != "" {
		if err := checkAddr("http", o.HTTP, true); err != nil {
			return err
		}
	}
	if err := checkExistingDir("data", o.Data); err != nil {
		return err
	}
	if o.HeartbeatTimeout <= 0 {
		return fmt.Errorf("--heartbeat-timeout must be positive")
	}
	if o.SessionLease <= 0 {
		return fmt.Errorf("--session-lease must be positive")
	}
	if o.LeaseTerm <= 0 {
		return fmt.Errorf("--lease-term must be positive")
	}
	if o.OrphanGrace <= 0 {
		return fmt.Errorf("--orphan-grace must be positive")
	}
	if o.RebuildAfter < 0 {
		return fmt.Errorf("--rebuild-after must not be negative (0: never by itself)")
	}
	if _, err := o.access(); err != nil {
		return err
	}
	if err := o.jobstatsOptions.validate(); err != nil {
		return err
	}
	return o.daemonOptions.validate()
}

// followerProcs starts a member with --follower-gomaxprocs and returns
// what switches GOMAXPROCS between it and leaderProcs as the member's role
// changes (meta.Config.OnRole); nil when the setting is off or the
// environment variable GOMAXPROCS rules.
func (o *metaOptions) followerProcs(leaderProcs int, log *slog.Logger) func(leader bool) {
	if o.FollowerGoMaxProcs == 0 || o.FollowerGoMaxProcs == leaderProcs || os.Getenv("GOMAXPROCS") != "" {
		return nil
	}
	runtime.GOMAXPROCS(o.FollowerGoMaxProcs) // a member starts as a follower
	return func(leader bool) {
		n := o.FollowerGoMaxProcs
		if leader {
			n = leaderProcs
		}
		runtime.GOMAXPROCS(n)
		log.Info("go runtime: threads for the new role", "leader", leader, "gomaxprocs", n)
	}
}

// runMeta serves the metadata service. Its storage client removes the
// objects of deleted files from the targets.
func runMeta(ctx context.Context, o *metaOptions) error {
	acc, err := o.access()
	if err != nil {
		return err
	}
	d, err := o.start("weft meta", transport.RoleMeta)
	if err != nil {
		return err
	}
	defer d.stop()
	leaderProcs := o.setMaxProcs(0)
	onRole := o.followerProcs(leaderProcs, d.log)
	d.log.Info("go runtime", "gomaxprocs", runtime.GOMAXPROCS(0))
	pool := transport.NewPool(d.transport, transport.PoolOptions{})
	defer pool.Close()
	serving := func(srv *meta.Server) { d.registerJobs(srv.JobTable()) }
	if o.HTTP != "" {
		dash, stop, err := startDashboard(ctx, o.HTTP, o.Listen, d.log)
		if err != nil {
			return err
		}
		defer stop()
		serving = func(srv *meta.Server) { d.registerJobs(srv.JobTable()); dash(srv) }
	}
	return meta.Run(ctx, meta.Config{
		Serving:          serving,
		JobStats:         o.jobstatsOptions.options("meta"),
		LogLevel:         d.level,
		DefaultLogLevel:  d.defaultLevel,
		CapabilityKey:    d.keys.CapabilityKey(),
		DataDir:          o.Data,
		ListenAddr:       o.Listen,
		HeartbeatTimeout: time.Duration(o.HeartbeatTimeout),
		SessionLease:     time.Duration(o.SessionLease),
		LeaseTerm:        time.Duration(o.LeaseTerm),
		OrphanGrace:      time.Duration(o.OrphanGrace),
		RebuildAfter:     rebuildAfter(time.Duration(o.RebuildAfter)),
		RebuildRate:      uint64(o.RebuildRate),
		NoRebuildRate:    o.RebuildRate == 0,
		MovedObjectGrace: time.Duration(o.MovedGrace),
		StoreCache:       int64(o.StoreCache),
		AcceptRollback:   o.AcceptRollback,
		ID:               o.ID,
		Peers:            o.peers,
		TickInterval:     time.Duration(o.RaftTick),
		ElectionTicks:    o.ElectionTicks,
		HeartbeatTicks:   o.HeartbeatTicks,
		LeaseReads:       o.LeaseReads,
		OnRole:           onRole,
		Logger:           d.log,
		Transport:        d.transport,
		Access:           acc,
		NewStorage: func(resolve func(context.Context, proto.TargetID) (string, error)) proto.StorageService {
			return storagerpc.NewClient(pool, resolve)
		},
	})
}

// rebuildAfter maps --rebuild-after 0 (never by itself) to meta's -1.
func rebuildAfter(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// startDashboard listens on addr at once (a port in use fails before the
// metadata server starts) and serves the web dashboard of the server that
// serving is later called with; until then it answers 503.
func startDashboard(ctx context.Context, addr, metaAddr string, log *slog.Logger) (serving func(*meta.Server), stop func(), err error) {
	var handler atomic.Pointer[http.Handler]
	stopHTTP, err := serveHTTP("http", addr, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := handler.Load()
		if h == nil {
			http.Error(w, "the metadata server is starting", http.StatusServiceUnavailable)
			return
		}
		(*h).ServeHTTP(w, r)
	}), log)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	serving = func(srv *meta.Server) {
		d := dashboard.New(srv, dashboard.Options{Addr: metaAddr, Logger: log})
		h := d.Handler()
		handler.Store(&h)
		wg.Add(1)
		go func() { defer wg.Done(); d.Run(ctx) }()
	}
	return serving, func() { cancel(); wg.Wait(); stopHTTP() }, nil
}

// minStoreCache is the least --store-cache: below it pebble would read
// its tables' index and filter blocks from the disk again and again.
const minStoreCache = 8 << 20
