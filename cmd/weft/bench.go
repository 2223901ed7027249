package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/weft-fs/weft/auth"
	"github.com/weft-fs/weft/bench"
	"github.com/weft-fs/weft/bench/fuseceiling"
	"github.com/weft-fs/weft/internal/units"
)

func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Benchmarks: IO500 on any directory, the FUSE ceiling, remote workers",
	}
	cmd.AddCommand(newBenchIO500Cmd(), newBenchFuseCeilingCmd(), newBenchWorkerCmd())
	return cmd
}

// benchOptions are the flags shared by io500 and fuse-ceiling.
type benchOptions struct {
	procs     int
	stonewall units.Duration
	quick     bool
	jsonPath  string
	direct    bool
	workers   []string
	maxData   units.Size
	maxFiles  int64
	keys      string
	logOptions
}

func (o *benchOptions) addFlags(fs *pflag.FlagSet) {
	def := bench.DefaultConfig(false)
	fs.IntVar(&o.procs, "procs", def.Procs, "local worker processes (default 0 when --workers is given)")
	o.stonewall = units.Duration(def.Stonewall)
	fs.Var(&o.stonewall, "stonewall", "how long write phases run before every process completes to the same point (IO500 rules: 300s; --quick: 2s)")
	fs.BoolVar(&o.quick, "quick", false, "a smoke run that finishes in well under a minute: 2s stonewall, small per-process caps")
	fs.StringVar(&o.jsonPath, "json", "", "also write the results as JSON to this file")
	fs.BoolVar(&o.direct, "direct", false, "open ior-easy and ior-rnd4K files with O_DIRECT")
	fs.StringSliceVar(&o.workers, "workers", nil, "host:port of `weft bench worker --listen` processes, one rank each (repeat an address for more ranks there)")
	fs.StringVar(&o.keys, "keys", defaultKeys, "with --workers: key bundle (any role, usually client) that authenticates this coordinator to the workers and them to it")
	o.maxData = units.Size(def.Limits.EasyBytes)
	fs.Var(&o.maxData, "max-data", "per-process cap on ior-easy data (ior-hard gets half); a phase ending on it is marked capped (--quick: 64MiB)")
	fs.Int64Var(&o.maxFiles, "max-files", def.Limits.EasyFiles, "per-process cap on mdtest files per phase (--quick: 5000 easy, 3000 hard)")
	o.logOptions.addFlags(fs)
}

// config turns the flags into a bench.Config: --quick picks the quick
// defaults, flags given explicitly override them.
func (o *benchOptions) config(cmd *cobra.Command, dir string) (bench.Config, error) {
	if err := o.validate(); err != nil {
		return bench.Config{}, err
	}
	fs := cmd.Flags()
	cfg := bench.DefaultConfig(o.quick)
	cfg.Dir = dir
	if fs.Changed("procs") {
		cfg.Procs = o.procs
	} else if len(o.workers) > 0 {
		cfg.Procs = 0
	}
	if fs.Changed("stonewall") {
		cfg.Stonewall = time.Duration(o.stonewall)
	}
	if fs.Changed("max-data") {
		cfg.Limits.EasyBytes = int64(o.maxData)
		cfg.Limits.HardBytes = int64(o.maxData) / 2
	}
	if fs.Changed("max-files") {
		cfg.Limits.EasyFiles, cfg.Limits.HardFiles = o.maxFiles, o.maxFiles
	}
	for _, w := range o.workers {
		if err := checkAddr("workers", w, false); err != nil {
			return cfg, err
		}
	}
	cfg.Remote = o.workers
	if len(cfg.Remote) > 0 {
		k, err := auth.Load(o.keys)
		if err != nil {
			return cfg, fmt.Errorf("--keys %s (needed with --workers): %w", o.keys, err)
		}
		_, cfg.WorkerTLS = benchTLS(k)
	}
	cfg.Direct = o.direct
	switch {
	case cfg.Procs < 0:
		return cfg, fmt.Errorf("--procs %d: want 0 or more", cfg.Procs)
	case cfg.Procs+len(cfg.Remote) == 0:
		return cfg, errors.New("no workers: give --procs N or --workers host:port,...")
	case cfg.Stonewall <= 0:
		return cfg, errors.New("--stonewall must be positive")
	case cfg.Limits.EasyBytes < bench.EasyTransfer:
		return cfg, fmt.Errorf("--max-data %s: want at least 2MiB", units.FormatSize(uint64(cfg.Limits.EasyBytes)))
	case cfg.Limits.EasyFiles <= 0:
		return cfg, errors.New("--max-files must be positive")
	}
	cfg.Progress = cmd.ErrOrStderr()
	cfg.WorkerStderr = cmd.ErrOrStderr()
	cfg.Logger = o.logger(cmd.ErrOrStderr())
	return cfg, nil
}

// report prints the results and writes --json.
func (o *benchOptions) report(cmd *cobra.Command, rep *bench.Report) error {
	if err := rep.WriteText(cmd.OutOrStdout()); err != nil {
		return err
	}
	if o.jsonPath == "" {
		return nil
	}
	f, err := os.Create(o.jsonPath)
	if err != nil {
		return fmt.Errorf("--json: %w", err)
	}
	if err := rep.WriteJSON(f); err != nil {
		f.Close()
		return fmt.Errorf("--json: %w", err)
	}
	return f.Close()
}

func newBenchIO500Cmd() *cobra.Command {
	var o benchOptions
	cmd := &cobra.Command{
		Use:   "io500 [flags] DIR",
		Short: "Run the IO500 phases on DIR and print IO500-style results and scores",
		Long: `Run the IO500 phases (ior-easy, ior-hard, ior-rnd4K-easy-read, mdtest-easy,
mdtest-hard, find) in a fresh subdirectory of DIR with --procs worker
processes (and any --workers on other machines), then print one [RESULT]
line per phase and the [SCORE] line. DIR may be on any file system. The
subdirectory is removed at the end. See docs/performance.md.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := o.config(cmd, args[0])
			if err != nil {
				return err
			}
			if fi, err := os.Stat(args[0]); err != nil || !fi.IsDir() {
				return fmt.Errorf("DIR %s is not a directory", args[0])
			}
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			rep, err := bench.Run(ctx, cfg)
			if err != nil {
				return err
			}
			return o.report(cmd, rep)
		},
	}
	o.addFlags(cmd.Flags())
	return cmd
}

func newBenchFuseCeilingCmd() *cobra.Command {
	var o benchOptions
	cmd := &cobra.Command{
		Use:   "fuse-ceiling [flags] [TMPFS_DIR]",
		Short: "Run the IO500 phases on a pass-through FUSE mount over tmpfs: the FUSE ceiling",
		Long: `Mount go-fuse's loopback file system (kernel passthrough disabled, so the
daemon copies every byte as weft's must; 1 MiB MaxWrite and read-ahead)
over a directory on tmpfs, run the io500 phases on the mount, print the same
results, and unmount (also on error, SIGINT and SIGTERM). The backing
directory is a fresh one under /dev/shm unless TMPFS_DIR is given.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := o.config(cmd, "-"); err != nil {
				return err
			}
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			return runFuseCeiling(ctx, cmd, &o, args)
		},
	}
	o.addFlags(cmd.Flags())
	return cmd
}

func runFuseCeiling(ctx context.Context, cmd *cobra.Command, o *benchOptions, args []string) error {
	stderr := cmd.ErrOrStderr()
	var backing string
	if len(args) == 1 {
		backing = args[0]
	} else {
		parent := "/dev/shm"
		if !fuseceiling.IsTmpfs(parent) {
			parent = ""
		}
		d, err := os.MkdirTemp(parent, "weft-ceiling-data-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		backing = d
	}
	if !fuseceiling.IsTmpfs(backing) {
		fmt.Fprintf(stderr, "fuse-ceiling: warning: %s is not on tmpfs; the numbers include its own cost\n", backing)
	}
	if n, err := fuseceiling.PipeMaxSize(); err == nil && n < 2<<20 {
		fmt.Fprintf(stderr, "fuse-ceiling: note: fs.pipe-max-size is %d; go-fuse splices 1 MiB reads only from 2 MiB (sysctl fs.pipe-max-size=2097152)\n", n)
	}
	mnt, err := os.MkdirTemp("", "weft-ceiling-mnt-")
	if err != nil {
		return err
	}
	defer os.Remove(mnt)
	m, err := fuseceiling.New(backing, mnt)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "fuse-ceiling: loopback of %s mounted at %s\n", backing, mnt)
	defer func() {
		uctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := m.Unmount(uctx); err != nil {
			fmt.Fprintf(stderr, "fuse-ceiling: %v\n", err)
		}
	}()
	cfg, err := o.config(cmd, mnt)
	if err != nil {
		return err
	}
	rep, err := bench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	return o.report(cmd, rep)
}

func newBenchWorkerCmd() *cobra.Command {
	var (
		listen string
		keys   string
		lo     logOptions
	)
	cmd := &cobra.Command{
		Use:   "worker [--listen HOST:PORT]",
		Short: "Serve one benchmark rank on stdin/stdout, or ranks for remote coordinators with --listen",
		Long: `Without --listen, serve one rank of a benchmark run over stdin/stdout: the
coordinator (weft bench io500) starts these itself. With --listen, accept
coordinators' connections (weft bench io500 --workers HOST:PORT,...) and
start one worker process per connection, so ranks on this machine are
separate processes like MPI ranks. The directory under test must exist
at the same path here as on the coordinator's side.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := lo.validate(); err != nil {
				return err
			}
			log := lo.logger(cmd.ErrOrStderr())
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			if listen == "" {
				return bench.Serve(ctx, cmd.InOrStdin(), cmd.OutOrStdout(), log)
			}
			if err := checkAddr("listen", listen, true); err != nil {
				return err
			}
			k, err := auth.Load(keys)
			if err != nil {
				return fmt.Errorf("bench worker: --keys %s: %w", keys, err)
			}
			srv, _ := benchTLS(k)
			return serveWorkers(ctx, listen, srv, cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "", "accept coordinators on this address (host:port)")
	cmd.Flags().StringVar(&keys, "keys", defaultKeys, "with --listen: key bundle (any role, usually client); only coordinators with a certificate of the same cluster CA are served")
	lo.addFlags(cmd.Flags())
	return cmd
}

// benchTLS is the mutual TLS 1.3 of bench coordinators and workers: both
// ends need a certificate of the cluster CA, of any role. A worker starts
// processes that run file operations for whoever connects, so it must
// authenticate its coordinator; the coordinator accepts a worker with a
// client certificate (workers run on client machines) because a worker
// gets no authority from it, only benchmark work to do.
func benchTLS(k *auth.Keys) (server, client *tls.Config) {
	sec := k.Security(false)
	server, client = sec.ServerTLS.Clone(), sec.ClientTLS.Clone()
	for _, c := range []*tls.Config{server, client} {
		c.MinVersion, c.MaxVersion = tls.VersionTLS13, tls.VersionTLS13
		c.SessionTicketsDisabled = true
	}
	return server, client
}

// serveWorkers accepts coordinator connections and hands each to a child
// `weft bench worker` whose stdin and stdout are the connection: the
// child's own descriptor without TLS, else pipes this process copies
// through the TLS connection.
func serveWorkers(ctx context.Context, addr string, tlsCfg *tls.Config, stderr io.Writer) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("bench worker: %w", err)
	}
	fmt.Fprintf(stderr, "bench worker: listening on %s\n", ln.Addr())
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	exe, err := os.Executable()
	if err != nil {
		ln.Close()
		return err
	}
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("bench worker: %w", err)
		}
		if tlsCfg != nil {
			go serveTLSWorker(exe, conn, tlsCfg, stderr)
			continue
		}
		f, err := conn.(*net.TCPConn).File() // a blocking dup for the child
		conn.Close()
		if err != nil {
			return fmt.Errorf("bench worker: %w", err)
		}
		child := exec.Command(exe, "bench", "worker")
		child.Stdin, child.Stdout, child.Stderr = f, f, stderr
		if err := child.Start(); err != nil {
			f.Close()
			fmt.Fprintf(stderr, "bench worker: start: %v\n", err)
			continue
		}
		f.Close()
		go child.Wait()
		fmt.Fprintf(stderr, "bench worker: pid %d serves %s\n", child.Process.Pid, strings.TrimSpace(conn.RemoteAddr().String()))
	}
}

// serveTLSWorker authenticates a coordinator and runs a worker for it.
func serveTLSWorker(exe string, conn net.Conn, cfg *tls.Config, stderr io.Writer) {
	defer conn.Close()
	remote := conn.RemoteAddr().String()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	tc := tls.Server(conn, cfg)
	if err := tc.Handshake(); err != nil {
		fmt.Fprintf(stderr, "bench worker: refusing %s: authentication failed: %v\n", remote, err)
		return
	}
	_ = conn.SetDeadline(time.Time{})
	child := exec.Command(exe, "bench", "worker")
	child.Stdin, child.Stdout, child.Stderr = tc, tc, stderr
	child.WaitDelay = 5 * time.Second
	if err := child.Start(); err != nil {
		fmt.Fprintf(stderr, "bench worker: start: %v\n", err)
		return
	}
	fmt.Fprintf(stderr, "bench worker: pid %d serves %s\n", child.Process.Pid, remote)
	_ = child.Wait()
}
