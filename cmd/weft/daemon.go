package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"time"

	"github.com/spf13/pflag"

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
	logOptions
}

func (o *daemonOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Pprof, "pprof", "", "serve Go profiles (net/http/pprof, /debug/pprof/) on this address, e.g. 127.0.0.1:7651 (default off; keep it off untrusted networks)")
	fs.StringVar(&o.Metrics, "metrics", "", "serve Prometheus metrics (RPC counts, latencies and bytes per operation, memory, CPU) on http://ADDR/metrics, e.g. 127.0.0.1:9400 (default off)")
	o.logOptions.addFlags(fs)
}

func (o *daemonOptions) validate() error {
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
	// transport is TCP, observed into the metrics registry when --metrics
	// is set; every server and client of the process uses it.
	transport transport.Transport
	stops     []func()
}

// stop ends the endpoints start began, the last started first.
func (d *daemon) stop() {
	for i := len(d.stops) - 1; i >= 0; i-- {
		d.stops[i]()
	}
}

// start makes the daemon's logger, transport and endpoints; the caller
// defers d.stop (on an error start has already stopped what it began).
func (o *daemonOptions) start() (*daemon, error) {
	d := &daemon{log: o.logger(os.Stderr), transport: transport.NewTCP()}
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
		d.stops = append(d.stops, stop)
	}
	return d, nil
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
