package main

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/weft-fs/weft/auth"
	"github.com/weft-fs/weft/internal/checks"
	"github.com/weft-fs/weft/internal/version"
	"github.com/weft-fs/weft/meta/metarpc"
	"github.com/weft-fs/weft/metrics"
	"github.com/weft-fs/weft/storage/storagerpc"
	"github.com/weft-fs/weft/transport"
)

// daemonOptions are the options every long-running server command (meta,
// storage, mount) shares: logging, the optional profiling endpoint and the
// optional Prometheus endpoint.
type daemonOptions struct {
	Pprof   string `toml:"pprof"`
	Metrics string `toml:"metrics"`
	Keys    string `toml:"keys"`
	Encrypt bool   `toml:"encrypt"`
	// GoMaxProcs is the Go runtime's GOMAXPROCS for the process (0: the
	// command's default; the environment variable GOMAXPROCS wins).
	GoMaxProcs int `toml:"gomaxprocs"`
	logOptions
}

// defaultKeys is where daemons look for their key bundle by default.
const defaultKeys = "/etc/weft/keys"

func (o *daemonOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Pprof, "pprof", "", "serve Go profiles (net/http/pprof, /debug/pprof/) on this address, e.g. 127.0.0.1:7651 (default off; keep it off untrusted networks)")
	fs.StringVar(&o.Metrics, "metrics", "", "serve Prometheus metrics (RPC counts, latencies and bytes per operation, memory, CPU) on http://ADDR/metrics, e.g. 127.0.0.1:9400 (default off)")
	fs.StringVar(&o.Keys, "keys", defaultKeys, "directory of this process's key bundle (ca.crt, node.crt, node.key; capability.key for servers), made by `weft keygen`")
	fs.BoolVar(&o.Encrypt, "encrypt", false, "encrypt traffic on the wire (servers: require it of every peer; clients: ask for it); without it connections are authenticated but frames travel in the clear")
	fs.IntVar(&o.GoMaxProcs, "gomaxprocs", 0, "how many threads run Go code at once (the Go runtime's GOMAXPROCS; the environment variable GOMAXPROCS wins); 0: one per CPU (weft mount: at least 8)")
	o.logOptions.addFlags(fs)
}

func (o *daemonOptions) validate() error {
	if o.GoMaxProcs < 0 {
		return fmt.Errorf("--gomaxprocs %d: want 0 (the default) or more", o.GoMaxProcs)
	}
	if o.Pprof != "" {
		if err := checkAddr("pprof", o.Pprof, true); err != nil {
			return err
		}
	}
	if o.Metrics != "" {
		if err := checkAddr("metrics", o.Metrics, true); err != nil {
			return err
		}
	}
	return o.logOptions.validate()
}

// daemon is what a started daemon gets from its options.
type daemon struct {
	log *slog.Logger
	// transport is TCP, authenticated with keys, observed into the
	// metrics registry when --metrics is set; every server and client of
	// the process uses it.
	transport transport.Transport
	keys      *auth.Keys
	stops     []func()
	// registry holds the process's metrics when --metrics is on (nil
	// otherwise): servers add their own collectors (registerJobs).
	registry *prometheus.Registry
	// level is log's level, which parameters may change at run time
	// (log.level.*); defaultLevel is --log-level's.
	level        *slog.LevelVar
	defaultLevel slog.Level
}

// stop ends the endpoints start began, the last started first.
func (d *daemon) stop() {
	for i := len(d.stops) - 1; i >= 0; i-- {
		d.stops[i]()
	}
}

// setMaxProcs sets the runtime's GOMAXPROCS to --gomaxprocs, or to def
// when that is 0 and def is not (0: the runtime's own, one per CPU),
// unless the environment variable GOMAXPROCS is set. It returns the value
// in force.
func (o *daemonOptions) setMaxProcs(def int) int {
	if n := cmp.Or(o.GoMaxProcs, def); n > 0 && os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(n)
	}
	return runtime.GOMAXPROCS(0)
}

// start makes the daemon's logger, transport and endpoints; the caller
// defers d.stop (on an error start has already stopped what it began).
// cmd names the daemon (e.g. "weft storage") and role is the key role it
// must run with.
func (o *daemonOptions) start(cmd string, role transport.Role) (*daemon, error) {
	keys, err := loadKeys(cmd, o.Keys, role)
	if err != nil {
		return nil, err
	}
	log, level, defLevel := o.leveledLogger(os.Stderr)
	d := &daemon{log: log, level: level, defaultLevel: defLevel, keys: keys, transport: transport.NewTCPWith(transport.TCPOptions{
		Logger:   log,
		Security: keys.Security(o.Encrypt),
	})}
	log.Info(cmd+" starting", "version", version.String(), "protocol", transport.ProtocolVersion)
	if checks.Off {
		log.Error(cmd + " is a benchmark build without permission and capability checks (go build -tags weft_nocheck): never serve real data with it")
	}
	log.Info("keys loaded", "dir", o.Keys, "role", keys.Role(), "name", keys.Name(), "encrypt", o.Encrypt)
	if o.Pprof != "" {
		stop, err := serveHTTP("pprof", o.Pprof, pprofMux(), d.log)
		if err != nil {
			return nil, err
		}
		d.stops = append(d.stops, stop)
	}
	if o.Metrics != "" {
		reg := metrics.NewRegistry()
		tr, err := metrics.Transport(d.transport, reg, opName)
		var stop func()
		if err == nil {
			mux := http.NewServeMux()
			mux.Handle("/metrics", metrics.Handler(reg, d.log))
			stop, err = serveHTTP("metrics", o.Metrics, mux, d.log)
		}
		if err != nil {
			d.stop()
			return nil, err
		}
		d.transport = tr
		d.registry = reg
		d.stops = append(d.stops, stop)
	}
	return d, nil
}

// loadKeys loads the bundle in dir and checks that it is for role; cmd
// ("weft storage") names the daemon in the error.
func loadKeys(cmd, dir string, role transport.Role) (*auth.Keys, error) {
	if dir == "" {
		return nil, fmt.Errorf("--keys is empty: %s needs the directory of a %s key bundle (weft keygen)", cmd, role)
	}
	k, err := auth.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("--keys %s: %w", dir, err)
	}
	if k.Role() != role {
		return nil, fmt.Errorf("keys in %s are for role %s; %s (a %s) needs a %s bundle (weft keygen --ca CADIR --role %s --name NAME --out DIR)",
			dir, k.Role(), cmd, roleNoun(role), role, role)
	}
	return k, nil
}

func roleNoun(r transport.Role) string {
	switch r {
	case transport.RoleStorage:
		return "storage server"
	case transport.RoleMeta:
		return "metadata server"
	}
	return "client (mount)"
}

// opName names the RPC op codes of every weft service for the metrics.
func opName(op uint16) string {
	if op == transport.OpProbe {
		return "probe"
	}
	if n := metarpc.OpName(op); n != "" {
		return n
	}
	if n := storagerpc.OpName(op); n != "" {
		return n
	}
	return metrics.OpNumber(op)
}

// pprofMux serves net/http/pprof under /debug/pprof/.
func pprofMux() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// serveHTTP serves h on addr for the endpoint named by flag (pprof,
// metrics) until the returned stop is called. It listens before returning,
// so a busy port is an error at startup that names the flag.
func serveHTTP(flag, addr string, h http.Handler, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", flag, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn(flag+" server stopped", "addr", addr, "err", err)
		}
	}()
	log.Info("serving "+flag, "addr", ln.Addr().String())
	return func() {
		_ = srv.Close()
		<-done
	}, nil
}
