package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/weft-fs/weft/internal/units"
	"github.com/weft-fs/weft/meta"
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
	Pprof            string         `toml:"pprof"`
	logOptions
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
		Use:   "meta --data DIR [--listen HOST:PORT]",
		Short: "Run the metadata server",
		Long: `Run the metadata server: it keeps the namespace (directories, inodes,
layouts) in a pebble database under --data and the registry of storage
targets. It serves until SIGINT or SIGTERM, then shuts down cleanly.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.resolve(cmd, configPath); err != nil {
				return err
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
	addPprofFlag(fs, &o.Pprof)
	o.logOptions.addFlags(fs)
	return cmd
}

// resolve applies the config file and checks every setting, so that a
// mistake is reported before anything starts.
func (o *metaOptions) resolve(cmd *cobra.Command, configPath string) error {
	if err := loadConfig(cmd, configPath, o); err != nil {
		return err
	}
	if err := checkAddr("listen", o.Listen, true); err != nil {
		return err
	}
	if err := checkExistingDir("data", o.Data); err != nil {
		return err
	}
	if o.HeartbeatTimeout <= 0 {
		return fmt.Errorf("--heartbeat-timeout must be positive")
	}
	if err := checkPprof(o.Pprof); err != nil {
		return err
	}
	return o.logOptions.validate()
}

// runMeta serves the metadata service. Its storage client removes the
// objects of deleted files from the targets.
func runMeta(ctx context.Context, o *metaOptions) error {
	log := o.logger(os.Stderr)
	stopPprof, err := startPprof(o.Pprof, log)
	if err != nil {
		return err
	}
	defer stopPprof()
	pool := transport.NewPool(transport.NewTCP(), transport.PoolOptions{})
	defer pool.Close()
	return meta.Run(ctx, meta.Config{
		DataDir:          o.Data,
		ListenAddr:       o.Listen,
		HeartbeatTimeout: time.Duration(o.HeartbeatTimeout),
		Logger:           log,
		NewStorage: func(resolve func(context.Context, proto.TargetID) (string, error)) proto.StorageService {
			return storagerpc.NewClient(pool, resolve)
		},
	})
}

// addPprofFlag adds --pprof, shared by the daemons.
func addPprofFlag(fs *pflag.FlagSet, addr *string) {
	fs.StringVar(addr, "pprof", "", "serve Go profiles (net/http/pprof, /debug/pprof/) on this address, e.g. 127.0.0.1:7651 (default off; keep it off untrusted networks)")
}

func checkPprof(addr string) error {
	if addr == "" {
		return nil
	}
	return checkAddr("pprof", addr, true)
}

// startPprof serves net/http/pprof on addr (nothing when addr is empty)
// until the returned stop is called. It listens before returning, so a busy
// port is an error at startup.
func startPprof(addr string, log *slog.Logger) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("pprof server stopped", "addr", addr, "err", err)
		}
	}()
	log.Info("serving pprof", "addr", ln.Addr().String())
	return func() {
		_ = srv.Close()
		<-done
	}, nil
}
