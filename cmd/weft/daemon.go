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
)

// daemonOptions are the options every long-running server command (meta,
// storage, mount) shares: logging and the optional profiling endpoint.
type daemonOptions struct {
	Pprof string `toml:"pprof"`
	logOptions
}

func (o *daemonOptions) addFlags(fs *pflag.FlagSet) {
	addPprofFlag(fs, &o.Pprof)
	o.logOptions.addFlags(fs)
}

func (o *daemonOptions) validate() error {
	if err := checkPprof(o.Pprof); err != nil {
		return err
	}
	return o.logOptions.validate()
}

// start makes the daemon's logger and starts its pprof endpoint; the caller
// defers stop.
func (o *daemonOptions) start() (log *slog.Logger, stop func(), err error) {
	log = o.logger(os.Stderr)
	stop, err = startPprof(o.Pprof, log)
	return log, stop, err
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
