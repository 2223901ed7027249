package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/weft-fs/weft/auth"
	"github.com/weft-fs/weft/internal/units"
	"github.com/weft-fs/weft/meta/metarpc"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/storage/storagerpc"
	"github.com/weft-fs/weft/transport"
)

// config is what one run does; see doc.go.
type config struct {
	Meta       string
	Keys       string // key bundle (client) that authenticates mdload; "" = none
	Files      int
	Dirs       int
	Workers    int
	Objects    int
	ObjectSize units.Size
	Targets    int           // wait until this many targets are up before starting
	Timeout    time.Duration // per call
	Watch      []named       // processes whose memory is reported
	Du         []named       // directories whose size is reported
}

// named is a NAME=VALUE pair of --watch or --du.
type named struct{ Name, Value string }

func main() {
	var (
		c          config
		watch, du  string
		objectSize = units.Size(4 << 10)
		timeout    = units.Duration(30 * time.Second)
		flags      = pflag.NewFlagSet("mdload", pflag.ContinueOnError)
	)
	flags.StringVar(&c.Meta, "meta", "", "metadata server address (host:port)")
	flags.StringVar(&c.Keys, "keys", "/etc/weft/keys", "key bundle (a client bundle, weft keygen) to authenticate with")
	flags.IntVar(&c.Files, "files", 1_000_000, "files to create")
	flags.IntVar(&c.Dirs, "dirs", 1000, "directories to spread them over")
	flags.IntVar(&c.Workers, "workers", 64, "concurrent callers")
	flags.IntVar(&c.Objects, "objects", 0, "write one object for each of the first N files")
	flags.Var(&objectSize, "object-size", "size of each object")
	flags.IntVar(&c.Targets, "targets", 1, "wait until this many storage targets are up")
	flags.Var(&timeout, "timeout", "timeout of one call")
	flags.StringVar(&watch, "watch", "", "NAME=PID,...: report VmRSS/VmHWM of these processes")
	flags.StringVar(&du, "du", "", "NAME=DIR,...: report the space allocated under these directories")
	if err := flags.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	c.ObjectSize, c.Timeout = objectSize, time.Duration(timeout)
	var err error
	if c.Watch, err = parseNamed(watch); err == nil {
		c.Du, err = parseNamed(du)
	}
	if err == nil {
		err = c.validate()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mdload:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "mdload:", err)
		os.Exit(1)
	}
}

func (c *config) validate() error {
	switch {
	case c.Meta == "":
		return errors.New("--meta is required")
	case c.Files < 0 || c.Dirs < 1 || c.Workers < 1 || c.Targets < 0:
		return errors.New("--files must be >= 0, --dirs and --workers >= 1, --targets >= 0")
	case c.Objects < 0 || c.Objects > c.Files:
		return fmt.Errorf("--objects %d: want 0..%d (--files)", c.Objects, c.Files)
	case c.Objects > 0 && c.ObjectSize == 0:
		return errors.New("--object-size must be positive with --objects")
	}
	return nil
}

// parseNamed parses "a=1,b=2".
func parseNamed(s string) ([]named, error) {
	var out []named
	for _, f := range strings.Split(s, ",") {
		if f == "" {
			continue
		}
		k, v, ok := strings.Cut(f, "=")
		if !ok || k == "" || v == "" {
			return nil, fmt.Errorf("%q: want NAME=VALUE", f)
		}
		out = append(out, named{k, v})
	}
	return out, nil
}

// checkpoints returns the file counts after which a report is printed, in
// increasing order and without duplicates: 0, each quarter of files, and
// objects (when some but not all files get one).
func checkpoints(files, objects int) []int {
	cp := []int{0, files / 4, files / 2, files * 3 / 4, files}
	if objects > 0 {
		cp = append(cp, objects)
	}
	slices.Sort(cp)
	return slices.Compact(cp)
}

// run does the whole load and writes a report to out.
func run(ctx context.Context, c config, out io.Writer) error {
	tr := transport.NewTCP() // Keys "": servers without security (tests)
	if c.Keys != "" {
		keys, err := auth.Load(c.Keys)
		if err != nil {
			return fmt.Errorf("--keys: %w", err)
		}
		tr = transport.NewTCPWith(transport.TCPOptions{Security: keys.Security(false)})
	}
	pool := transport.NewPool(tr, transport.PoolOptions{ConnsPerAddr: 4})
	defer pool.Close()
	meta := metarpc.NewClient(pool, c.Meta)

	addrs, err := waitTargets(ctx, meta, c.Targets, c.Timeout)
	if err != nil {
		return err
	}
	storage := storagerpc.NewClient(pool, func(_ context.Context, t proto.TargetID) (string, error) {
		a, ok := addrs[t]
		if !ok {
			return "", fmt.Errorf("mdload: unknown target %d: %w", t, syscall.EIO)
		}
		return a, nil
	})

	call := func(f func(ctx context.Context) error) error {
		cctx, cancel := context.WithTimeout(ctx, c.Timeout)
		defer cancel()
		return f(cctx)
	}
	top := fmt.Sprintf("mdload-%d", time.Now().UnixNano())
	var topIno proto.Ino
	if err := call(func(ctx context.Context) error {
		a, err := meta.Mkdir(ctx, proto.RootIno, top, 0o755, 0, 0)
		topIno = a.Ino
		return err
	}); err != nil {
		return fmt.Errorf("mdload: mkdir /%s: %w", top, err)
	}
	dirs := make([]proto.Ino, c.Dirs)
	if err := parallel(ctx, c.Workers, 0, c.Dirs, func(ctx context.Context, i int) error {
		return call(func(ctx context.Context) error {
			a, err := meta.Mkdir(ctx, topIno, fmt.Sprintf("d%04d", i), 0o755, 0, 0)
			dirs[i] = a.Ino
			return err
		})
	}); err != nil {
		return fmt.Errorf("mdload: mkdir: %w", err)
	}

	data := make([]byte, c.ObjectSize)
	for i := range data {
		data[i] = byte(i)
	}
	create := func(ctx context.Context, i int) error {
		in := proto.CreateIn{Parent: dirs[i%c.Dirs], Name: fmt.Sprintf("f%07d", i), Mode: syscall.S_IFREG | 0o644, Exclusive: true}
		var a proto.Attr
		if err := call(func(ctx context.Context) (err error) {
			a, err = meta.Create(ctx, in)
			return err
		}); err != nil {
			return fmt.Errorf("create %s: %w", in.Name, err)
		}
		if i >= c.Objects {
			return nil
		}
		if len(a.Layout.Targets) == 0 {
			return fmt.Errorf("create %s: no targets in the layout", in.Name)
		}
		obj := proto.ObjectID{Ino: a.Ino, Gen: a.Gen}
		if err := call(func(ctx context.Context) error {
			// Storage serves clients only with a capability.
			cp, err := meta.Capability(ctx, a.Ino, proto.AccessWrite)
			if err != nil {
				return err
			}
			_, err = storage.Write(proto.WithCapability(ctx, cp), a.Layout.Targets[0], obj, 0, data)
			return err
		}); err != nil {
			return fmt.Errorf("write %s: %w", in.Name, err)
		}
		return call(func(ctx context.Context) error {
			_, err := meta.WriteDone(ctx, a.Ino, uint64(len(data)), 0, proto.NoBlocks)
			return err
		})
	}

	header := []string{"files", "seconds", "files/s"}
	for _, w := range c.Watch {
		header = append(header, w.Name+".rss(MiB)", w.Name+".hwm(MiB)")
	}
	for _, d := range c.Du {
		header = append(header, d.Name+".du(MiB)")
	}
	// Each row is printed as soon as it is known, so columns are as wide
	// as their headers (every value fits: they are short numbers).
	printRow := func(cols []string) {
		padded := make([]string, len(cols))
		for i, c := range cols {
			padded[i] = fmt.Sprintf("%*s", max(len(header[i]), 8), c)
		}
		fmt.Fprintln(out, strings.Join(padded, "  "))
	}
	printRow(header)
	start := time.Now()
	prev, prevT := 0, start
	for _, n := range checkpoints(c.Files, c.Objects) {
		if err := parallel(ctx, c.Workers, prev, n, create); err != nil {
			return fmt.Errorf("mdload: %w", err)
		}
		now := time.Now()
		rate := 0.0
		if n > prev {
			rate = float64(n-prev) / now.Sub(prevT).Seconds()
		}
		row := []string{strconv.Itoa(n), fmt.Sprintf("%.1f", now.Sub(start).Seconds()), fmt.Sprintf("%.0f", rate)}
		for _, w := range c.Watch {
			rss, hwm, err := procMem(w.Value)
			if err != nil {
				return fmt.Errorf("mdload: --watch %s: %w", w.Name, err)
			}
			row = append(row, mib(rss), mib(hwm))
		}
		for _, d := range c.Du {
			sz, err := diskUsage(d.Value)
			if err != nil {
				return fmt.Errorf("mdload: --du %s: %w", d.Name, err)
			}
			row = append(row, mib(sz))
		}
		printRow(row)
		prev, prevT = n, now
	}
	return nil
}

func mib(b uint64) string { return fmt.Sprintf("%.1f", float64(b)/(1<<20)) }

// waitTargets waits until at least want targets are up and returns the
// address of every target.
func waitTargets(ctx context.Context, meta proto.MetaService, want int, timeout time.Duration) (map[proto.TargetID]string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		ts, err := meta.Targets(ctx)
		up := 0
		addrs := make(map[proto.TargetID]string, len(ts))
		for _, t := range ts {
			addrs[t.ID] = t.Addr
			if t.Up {
				up++
			}
		}
		if err == nil && up >= want {
			return addrs, nil
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = fmt.Errorf("%d of %d targets up", up, want)
			}
			return nil, fmt.Errorf("mdload: waiting for the servers: %w", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// parallel calls f(ctx, i) for every i in [from, to) from the given number
// of goroutines and returns the first error; the others then stop early.
func parallel(ctx context.Context, workers, from, to int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	next.Store(int64(from))
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= to {
					return
				}
				if err := f(ctx, i); err != nil {
					errOnce.Do(func() { firstErr = err; cancel() })
					return
				}
			}
		})
	}
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return firstErr
}

// procMem reads VmRSS and VmHWM (bytes) of a process.
func procMem(pid string) (rss, hwm uint64, err error) {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "status"))
	if err != nil {
		return 0, 0, err
	}
	return parseStatus(string(b))
}

// parseStatus extracts VmRSS and VmHWM (bytes) from /proc/PID/status.
func parseStatus(s string) (rss, hwm uint64, err error) {
	var found int
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			return 0, 0, fmt.Errorf("bad %s line %q", k, line)
		}
		n, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("bad %s line %q", k, line)
		}
		if k == "VmRSS" {
			rss = n << 10
		} else {
			hwm = n << 10
		}
		found++
	}
	if found != 2 {
		return 0, 0, errors.New("no VmRSS/VmHWM (a kernel thread, or not Linux?)")
	}
	return rss, hwm, nil
}

// diskUsage is what du(1) reports: the blocks allocated under dir.
func diskUsage(dir string) (uint64, error) {
	var total uint64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) { // removed while we walk (pebble compactions)
				return nil
			}
			return err
		}
		fi, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			total += uint64(st.Blocks) * 512
		}
		return nil
	})
	return total, err
}
