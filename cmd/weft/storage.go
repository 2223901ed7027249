package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/weft-fs/weft/internal/units"
	"github.com/weft-fs/weft/jobstats"
	"github.com/weft-fs/weft/meta/metarpc"
	"github.com/weft-fs/weft/metrics"
	"github.com/weft-fs/weft/storage"
	"github.com/weft-fs/weft/storage/storagerpc"
	"github.com/weft-fs/weft/transport"
)

// storageOptions are the settings of `weft storage`; the toml tags are the
// keys of its --config file.
type storageOptions struct {
	Listen            string         `toml:"listen"`
	Advertise         string         `toml:"advertise"`
	Meta              string         `toml:"meta"`
	Targets           []string       `toml:"targets"`
	Capacity          units.Size     `toml:"capacity"`
	HeartbeatInterval units.Duration `toml:"heartbeat_interval"`
	ReadBufferPerConn units.Size     `toml:"read_buffer_per_conn"`
	ReadBufferTotal   units.Size     `toml:"read_buffer_total"`
	Domain            string         `toml:"domain"`
	LocalSocket       string         `toml:"local_socket"`
	jobstatsOptions
	daemonOptions
}

// maxSocketPath is the longest path a Unix socket may have.
const maxSocketPath = 107

func newStorageCmd() *cobra.Command { return storageCommand(runStorage) }

// storageCommand builds the command around run, which tests replace to inspect the
// resolved options without starting anything.
func storageCommand(run func(context.Context, *storageOptions) error) *cobra.Command {
	var (
		o          storageOptions
		configPath string
	)
	cmd := &cobra.Command{
		Use:   "storage --meta HOST:PORT --target DIR [--target DIR ...] [--listen HOST:PORT] [--advertise HOST:PORT]",
		Short: "Run a storage server holding one or more storage targets",
		Long: `Run a storage server. Each --target is a directory (one per disk, usually)
that holds stripe objects; the server registers every target with the
metadata server (the target keeps its id in the directory, so it comes back
with the same id after a restart) and reports its usage every heartbeat.
It serves until SIGINT or SIGTERM, then shuts down cleanly.`,
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
	fs.StringVar(&o.Listen, "listen", "127.0.0.1:7410", "address to serve on (host:port)")
	fs.StringVar(&o.Advertise, "advertise", "", "address clients dial to reach this server (default: --listen); required when --listen has no host or 0.0.0.0")
	fs.StringVar(&o.Meta, "meta", "", "address of the metadata server (host:port), or of the members of a replicated group (h1:7400,h2:7400,h3:7400)")
	fs.StringArrayVar(&o.Targets, "targets", nil, "storage target directory (must exist); repeat for several targets (--target is the same flag)")
	// --target (one directory per flag) and --targets (config key targets)
	// are one flag.
	fs.SetNormalizeFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		if name == "target" {
			name = "targets"
		}
		return pflag.NormalizedName(name)
	})
	fs.StringVar(&o.Domain, "domain", "", "failure domain of this server (e.g. a rack): copies and shards of a stripe go to distinct domains (default: the server is its own)")
	fs.StringVar(&o.LocalSocket, "local-socket", "", "also serve short-circuit local reads on this Unix socket (mounts on this host then read object files directly, checking every block); at most "+strconv.Itoa(maxSocketPath)+" bytes (default: none)")
	fs.Var(&o.Capacity, "capacity", "per-target byte limit, e.g. 500GiB (default 0: what the disk has)")
	o.HeartbeatInterval = units.Duration(2 * time.Second)
	fs.Var(&o.HeartbeatInterval, "heartbeat-interval", "how often to report usage to the metadata server")
	o.ReadBufferPerConn = storagerpc.DefaultReadBytesPerConn
	fs.Var(&o.ReadBufferPerConn, "read-buffer-per-conn", "most bytes of read buffers held for one client connection (responses not yet sent)")
	o.ReadBufferTotal = storagerpc.DefaultReadBytesPerServer
	fs.Var(&o.ReadBufferTotal, "read-buffer-total", "most bytes of read buffers held for all connections")
	o.jobstatsOptions.addFlags(fs)
	o.daemonOptions.addFlags(fs)
	return cmd
}

func (o *storageOptions) resolve(cmd *cobra.Command, configPath string) error {
	if err := loadConfig(cmd, configPath, o); err != nil {
		return err
	}
	if err := checkAddr("listen", o.Listen, true); err != nil {
		return err
	}
	if o.Advertise != "" {
		if err := checkAddr("advertise", o.Advertise, false); err != nil {
			return err
		}
		if isUnspecifiedHost(o.Advertise) {
			return fmt.Errorf("--advertise %q: give an address clients can dial, not a wildcard", o.Advertise)
		}
	} else if isUnspecifiedHost(o.Listen) {
		return fmt.Errorf("--listen %q binds every interface: also give --advertise HOST:PORT, the address clients should dial", o.Listen)
	}
	if err := checkAddrList("meta", o.Meta); err != nil {
		return err
	}
	if len(o.Targets) == 0 {
		return errors.New("--target is required (a directory for stripe objects; repeat the flag for several; key targets in a config file)")
	}
	seen := make(map[string]bool)
	for _, t := range o.Targets {
		if err := checkExistingDir("target", t); err != nil {
			return err
		}
		abs, err := filepath.Abs(t)
		if err != nil {
			return fmt.Errorf("--target %s: %w", t, err)
		}
		if seen[abs] {
			return fmt.Errorf("--target %s given twice", t)
		}
		seen[abs] = true
	}
	if len(o.LocalSocket) > maxSocketPath {
		return fmt.Errorf("--local-socket %s: a path of %d bytes, at most %d (a Unix socket's limit)", o.LocalSocket, len(o.LocalSocket), maxSocketPath)
	}
	if o.HeartbeatInterval <= 0 {
		return errors.New("--heartbeat-interval must be positive")
	}
	if o.ReadBufferPerConn < storagerpc.MaxIO {
		return fmt.Errorf("--read-buffer-per-conn %v: at least %v (one read)", &o.ReadBufferPerConn, units.FormatSize(storagerpc.MaxIO))
	}
	if o.ReadBufferTotal < o.ReadBufferPerConn {
		return fmt.Errorf("--read-buffer-total %v is below --read-buffer-per-conn %v", &o.ReadBufferTotal, &o.ReadBufferPerConn)
	}
	if err := o.jobstatsOptions.validate(); err != nil {
		return err
	}
	return o.daemonOptions.validate()
}

// runStorage serves the targets; the metadata server is reached through a
// pooled connection that redials by itself, so the storage server may start
// before the metadata server.
func runStorage(ctx context.Context, o *storageOptions) error {
	d, err := o.start("weft storage", transport.RoleStorage)
	if err != nil {
		return err
	}
	defer d.stop()
	d.log.Info("go runtime", "gomaxprocs", o.setMaxProcs(0))
	pool := transport.NewPool(d.transport, transport.PoolOptions{})
	defer pool.Close()
	jobs := jobstats.New(o.jobstatsOptions.options("storage"))
	d.registerJobs(jobs)
	var scrub storage.ScrubObserver
	if d.registry != nil {
		sc, err := metrics.NewScrub(d.registry)
		if err != nil {
			return fmt.Errorf("weft storage: scrub metrics: %w", err)
		}
		scrub = sc
	}
	return storage.Run(ctx, storage.Config{
		Scrub:              scrub,
		Jobs:               jobs,
		LogLevel:           d.level,
		DefaultLogLevel:    d.defaultLevel,
		CapabilityKey:      d.keys.CapabilityKey(),
		ListenAddr:         o.Listen,
		AdvertiseAddr:      o.Advertise,
		MetaAddr:           o.Meta,
		Targets:            o.Targets,
		Capacity:           uint64(o.Capacity),
		HeartbeatInterval:  time.Duration(o.HeartbeatInterval),
		ReadBytesPerConn:   int64(o.ReadBufferPerConn),
		ReadBytesPerServer: int64(o.ReadBufferTotal),
		Logger:             d.log,
		Transport:          d.transport,
		Registry:           metarpc.NewClient(pool, o.Meta),
		Domain:             o.Domain,
		LocalSocket:        o.LocalSocket,
	})
}
