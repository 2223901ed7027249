package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/weft-fs/weft/client"
	"github.com/weft-fs/weft/fuse"
	"github.com/weft-fs/weft/internal/units"
	"github.com/weft-fs/weft/transport"
)

// mountOptions are the settings of `weft mount`; the toml tags are the keys
// of its --config file.
type mountOptions struct {
	Meta       string         `toml:"meta"`
	Mountpoint string         `toml:"mountpoint"`
	Timeout    units.Duration `toml:"timeout"`
	CacheLimit units.Size     `toml:"cache_limit"`
	AllowOther bool           `toml:"allow_other"`
	NonEmpty   bool           `toml:"nonempty"`
	Debug      bool           `toml:"debug"`
	// UnmountTimeout bounds each step of the shutdown on SIGINT/SIGTERM
	// (unmount, lazy detach, abort of the FUSE connection).
	UnmountTimeout units.Duration `toml:"unmount_timeout"`
	// JobIDVar: where each calling process's job id comes from
	// (client.JobIDSource); "none" or "" for no job ids.
	JobIDVar string `toml:"jobid_var"`
	// NoLeases: no metadata cache under leases (fuse.Config.NoLeases).
	NoLeases bool `toml:"no_leases"`
	// NoLocalReads: no short-circuit local reads (fuse.Config.NoLocalReads).
	NoLocalReads bool `toml:"no_local_reads"`
	// BufferedLocalReads: large local reads through the page cache too
	// (fuse.Config.BufferedLocalReads).
	BufferedLocalReads bool `toml:"buffered_local_reads"`
	daemonOptions
}

func newMountCmd() *cobra.Command { return mountCommand(runMount) }

// mountCommand builds the command around run, which tests replace to inspect the
// resolved options without starting anything.
func mountCommand(run func(context.Context, *mountOptions) error) *cobra.Command {
	var (
		o          mountOptions
		configPath string
	)
	cmd := &cobra.Command{
		Use:   "mount --meta HOST:PORT [flags] MOUNTPOINT",
		Short: "Mount weft at MOUNTPOINT (FUSE) and serve it in the foreground",
		Long: `Mount weft at MOUNTPOINT through FUSE and serve it until SIGINT or
SIGTERM (then it unmounts) or until it is unmounted from outside
(fusermount3 -u MOUNTPOINT). On SIGINT/SIGTERM it exits in bounded time
whatever holds the mount: a mount still busy after --unmount-timeout is
detached lazily, and a FUSE connection still in use after as long again is
aborted (its users get ENOTCONN); the log says which step was needed. The mountpoint may also come from the config
file (key "mountpoint"); the argument wins.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.resolve(cmd, configPath, args); err != nil {
				return explainConfig(cmd, configPath, &o, err)
			}
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			return run(ctx, &o)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&configPath, "config", "", "TOML config file (keys: "+keyList(&o)+"); flags override it")
	fs.StringVar(&o.Meta, "meta", "", "address of the metadata server (host:port), or of the members of a replicated group (h1:7400,h2:7400,h3:7400)")
	o.Timeout = units.Duration(30 * time.Second)
	fs.Var(&o.Timeout, "timeout", "give up on a server request after this long; the operation then fails with ETIMEDOUT")
	o.CacheLimit = units.Size(1 << 30)
	fs.Var(&o.CacheLimit, "cache-limit", "memory the mount process may use, write-behind and read-ahead buffers included (at least 256MiB)")
	fs.BoolVar(&o.AllowOther, "allow-other", true, "let users other than the one who mounted use the mount (FUSE allow_other)")
	fs.BoolVar(&o.NonEmpty, "nonempty", false, "mount over a directory that is not empty (its files are hidden while mounted)")
	fs.BoolVar(&o.Debug, "debug", false, "log every FUSE request (very verbose)")
	fs.BoolVar(&o.NoLeases, "no-leases", false, "do not cache lookups and attributes under metadata leases: every lookup and stat the kernel does not answer goes to the metadata leader")
	o.UnmountTimeout = units.Duration(fuse.DefaultUnmountTimeout)
	fs.BoolVar(&o.BufferedLocalReads, "buffered-local-reads", false, "read local objects through this host's page cache also for large reads and for files opened O_DIRECT (by default a read of 128 KiB or more, and any aligned read of a file its application opened O_DIRECT, bypasses it: cold reads at the disk's speed and less CPU; buffered, re-reads of data that fits in memory come from the page cache)")
	fs.BoolVar(&o.NoLocalReads, "no-local-reads", false, "read every object over RPC, also those of storage servers on this host (by default, where a server offers a local socket, the mount reads its object files directly, checking every block)")
	fs.StringVar(&o.JobIDVar, "jobid-var", client.DefaultJobIDVar, "tag each process's requests with a job id (weft jobstats) from this environment variable of the process, or procname_uid (e.g. dd.1000), or none")
	fs.Var(&o.UnmountTimeout, "unmount-timeout", "on SIGINT/SIGTERM: if the unmount has not completed after this long, detach the mount lazily; if it is still served after as long again, abort its FUSE connection and exit")
	o.daemonOptions.addFlags(fs)
	return cmd
}

func (o *mountOptions) resolve(cmd *cobra.Command, configPath string, args []string) error {
	if err := loadConfig(cmd, configPath, o); err != nil {
		return err
	}
	if len(args) == 1 {
		o.Mountpoint = args[0]
	}
	if err := checkAddrList("meta", o.Meta); err != nil {
		return err
	}
	if o.Mountpoint == "" {
		return errors.New("MOUNTPOINT is required: weft mount --meta HOST:PORT MOUNTPOINT")
	}
	if err := checkMountpoint(o.Mountpoint, o.NonEmpty); err != nil {
		return err
	}
	if o.Timeout <= 0 {
		return errors.New("--timeout must be positive")
	}
	if o.UnmountTimeout <= 0 {
		return errors.New("--unmount-timeout must be positive")
	}
	if o.CacheLimit < minCacheLimit {
		return fmt.Errorf("--cache-limit %s is too small: the mount needs at least %s (its FUSE request buffers alone take up to %s)",
			units.FormatSize(uint64(o.CacheLimit)), units.FormatSize(minCacheLimit), units.FormatSize(fixedMemory))
	}
	if o.JobIDVar == "none" {
		o.JobIDVar = ""
	}
	if !client.JobIDSource(o.JobIDVar).Valid() {
		return fmt.Errorf("--jobid-var %q: an environment variable's name, procname_uid or none", o.JobIDVar)
	}
	return o.daemonOptions.validate()
}

// checkMountpoint fails unless mnt is an existing directory, and an empty
// one unless nonEmpty (mounting would hide its files); it names the fix
// for the usual mistakes (missing directory, stale FUSE mount).
func checkMountpoint(mnt string, nonEmpty bool) error {
	fi, err := os.Stat(mnt)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("mountpoint %s does not exist (create it with: mkdir -p %s)", mnt, mnt)
	case isStaleMount(err):
		return fmt.Errorf("mountpoint %s is a stale FUSE mount (clean it with: fusermount3 -u %s)", mnt, mnt)
	case err != nil:
		return fmt.Errorf("mountpoint: %w", err)
	case !fi.IsDir():
		return fmt.Errorf("mountpoint %s is not a directory", mnt)
	}
	if nonEmpty {
		return nil
	}
	d, err := os.Open(mnt)
	if err != nil {
		return fmt.Errorf("mountpoint: %w", err)
	}
	defer d.Close()
	names, err := d.Readdirnames(1)
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("mountpoint: %w", err)
	}
	if len(names) > 0 {
		return fmt.Errorf("mountpoint %s is not empty (it holds %q, ...): mounting would hide its files; empty it, pick another directory, or pass --nonempty", mnt, names[0])
	}
	return nil
}

// The cache limit bounds the whole mount process, not only its data
// buffers: fixedMemory is set aside for what does not scale with cached data
// (go-fuse's 1 MiB request buffers, the Go runtime, metadata), the rest is
// the budget of write-behind and read-ahead buffers, and the Go runtime is
// told the limit (a soft one: the collector works harder near it) so that
// garbage does not pile up to twice the live heap, as it would by default.
const (
	fixedMemory   = 128 << 20
	minCacheLimit = 2 * fixedMemory
)

// dataBudget is the part of the cache limit that file data may use.
func dataBudget(cacheLimit uint64) uint64 { return cacheLimit - fixedMemory }

// mountProcs is the mount's GOMAXPROCS on a machine of cpus CPUs: at
// least 8. The mount's goroutines spend their time in blocking system
// calls (reading /dev/fuse, preads of objects' files for short-circuit
// reads, which wait for the disk on a cache miss), and a goroutine in a
// system call keeps its P until the runtime's monitor takes it back, tens
// of microseconds to milliseconds later: with one P per CPU, four cold
// 4 KiB reads at once held both Ps of a 2-CPU machine while the requests
// behind them waited (docs/performance.md, "The mount's Ps").
func mountProcs(cpus int) int { return max(cpus, 8) }

// runMount mounts and serves until ctx is cancelled (SIGINT/SIGTERM: it
// unmounts) or the file system is unmounted from outside.
func runMount(ctx context.Context, o *mountOptions) error {
	d, err := o.start("weft mount", transport.RoleClient)
	if err != nil {
		return err
	}
	defer d.stop()
	if os.Getenv("GOMEMLIMIT") == "" { // an explicit GOMEMLIMIT wins
		debug.SetMemoryLimit(int64(o.CacheLimit))
	}
	d.log.Info("go runtime", "gomaxprocs", o.setMaxProcs(mountProcs(runtime.NumCPU())))
	var reg prometheus.Registerer // (a nil *Registry is not a nil interface)
	if d.registry != nil {
		reg = d.registry
	}
	return fuse.Run(ctx, fuse.Config{
		Metrics:            reg,
		MetaAddr:           o.Meta,
		Timeout:            time.Duration(o.Timeout),
		CacheLimit:         dataBudget(uint64(o.CacheLimit)),
		Logger:             d.log,
		Transport:          d.transport,
		Mountpoint:         o.Mountpoint,
		AllowOther:         o.AllowOther,
		Debug:              o.Debug,
		JobIDVar:           client.JobIDSource(o.JobIDVar),
		NoLeases:           o.NoLeases,
		NoLocalReads:       o.NoLocalReads,
		BufferedLocalReads: o.BufferedLocalReads,
		LogLevel:           d.level,
		DefaultLogLevel:    d.defaultLevel,

		UnmountTimeout: time.Duration(o.UnmountTimeout),
	})
}
