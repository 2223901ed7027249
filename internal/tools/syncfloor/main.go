// Command syncfloor measures the two figures that bound how fast one
// process can create (or delete) files on a FUSE file system whose
// acknowledged metadata changes are durable (issue 12's contract, with
// issue 8's rule that a change is acknowledged only once on disk): how
// long the disk takes to make one small write durable, by the fastest way
// there is, and how long a create (or an unlink) takes through a FUSE
// file system that does nothing durable (the ceiling) and on its backing
// file system directly. scripts/bench-sync-floor.sh runs it; it is a
// measuring tool, not part of weft.
//
//	syncfloor durable DIR [--n 2000]
//	syncfloor namespace DIR [--n 5000]
//	syncfloor shared DIR [--n 5000] [--procs 1]
//
// durable writes in a scratch file in DIR, one write at a time, each
// durable before the next starts, three ways: a 4 KiB O_DIRECT|O_DSYNC
// overwrite of a preallocated, synced file (no metadata to journal, no
// page cache), a 512-byte O_DSYNC overwrite, and a 512-byte append
// followed by fdatasync (what a log does); and fdatasync of a file with
// nothing dirty (a cache flush alone, which no durable write can beat).
// namespace creates --n empty files in DIR from this one process
// (open O_CREAT|O_EXCL, close: mdtest-easy's create), then unlinks them.
// shared is mdtest-hard's write and delete in one directory: --procs
// workers (threads: each blocking call has one of its own) create --n
// files of 3,901 bytes between them (open O_CREAT|O_EXCL, write, close),
// then unlink them, each its own; it reports the phases' rates, and the
// mean time of the open alone and of an unlink. In one directory the
// kernel holds the directory's lock (i_rwsem) through every create's
// lookup and create and through every unlink, whatever the file system,
// so those times, taken with one worker, are what the directory's lock
// is held per file.
//
// Output: one JSON line per figure, {"what":..., "n":..., "min_us":...,
// "p10_us":..., "p50_us":..., "cpu_us":...} (cpu_us: this process's CPU
// per operation). Any error ends the run with a non-zero exit.
package main

import (
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"

	"github.com/weft-fs/weft/bench"
	"github.com/weft-fs/weft/internal/cputime"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: syncfloor durable|namespace|shared DIR [--n N] [--procs P]")
		os.Exit(2)
	}
	mode, dir := os.Args[1], os.Args[2]
	fs := flag.NewFlagSet(mode, flag.ExitOnError)
	n := fs.Int("n", 0, "operations per figure (durable: 2000, namespace and shared: 5000)")
	procs := fs.Int("procs", 1, "shared: workers creating and unlinking in the one directory")
	_ = fs.Parse(os.Args[3:])
	var err error
	switch mode {
	case "durable":
		err = durable(dir, cmp.Or(*n, 2000))
	case "namespace":
		err = namespace(dir, cmp.Or(*n, 5000))
	case "shared":
		err = shared(dir, cmp.Or(*n, 5000), max(*procs, 1))
	default:
		err = fmt.Errorf("unknown mode %q", mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "syncfloor:", err)
		os.Exit(1)
	}
}

// figure is one measured operation's latencies, and the CPU this process
// spent per operation (user and system: what the kernel does for it in
// other threads, such as a journal commit, is not counted).
type figure struct {
	What  string  `json:"what"`
	N     int     `json:"n"`
	Min   float64 `json:"min_us"`
	P10   float64 `json:"p10_us"`
	P50   float64 `json:"p50_us"`
	CPU   float64 `json:"cpu_us"`
	Total float64 `json:"total_s"`
}

// timeEach runs op n times, one after the other, and prints its figure.
func timeEach(what string, n int, op func(i int) error) error {
	ds := make([]time.Duration, n)
	t0, cpu0 := time.Now(), cputime.Self()
	for i := range n {
		s := time.Now()
		if err := op(i); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		ds[i] = time.Since(s)
	}
	total, cpu := time.Since(t0), cputime.Self()-cpu0
	slices.Sort(ds)
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	b, _ := json.Marshal(figure{What: what, N: n, Min: us(ds[0]), P10: us(ds[n/10]), P50: us(ds[n/2]),
		CPU: us(cpu) / float64(n), Total: total.Seconds()})
	fmt.Println(string(b))
	return nil
}

func durable(dir string, n int) error {
	const block = 4096
	size := int64(n+1) * block
	pre := filepath.Join(dir, "syncfloor-pre")
	defer os.Remove(pre)
	f, err := os.OpenFile(pre, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(make([]byte, size), 0); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	f.Close()

	direct, err := unix.Open(pre, unix.O_RDWR|unix.O_DIRECT|unix.O_DSYNC|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open O_DIRECT: %w", err)
	}
	defer unix.Close(direct)
	buf := bench.AlignedBuf(block)
	if err := timeEach("direct-dsync-4k-overwrite", n, func(i int) error {
		_, err := unix.Pwrite(direct, buf, int64(i)*block)
		return err
	}); err != nil {
		return err
	}

	dsync, err := unix.Open(pre, unix.O_RDWR|unix.O_DSYNC|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(dsync)
	small := make([]byte, 512)
	if err := timeEach("dsync-512-overwrite", n, func(i int) error {
		_, err := unix.Pwrite(dsync, small, int64(i)*512)
		return err
	}); err != nil {
		return err
	}
	if err := timeEach("fdatasync-nothing-dirty", n, func(int) error { return unix.Fdatasync(dsync) }); err != nil {
		return err
	}

	app := filepath.Join(dir, "syncfloor-append")
	defer os.Remove(app)
	a, err := os.OpenFile(app, os.O_CREATE|os.O_WRONLY|os.O_TRUNC|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer a.Close()
	return timeEach("append-512-fdatasync", n, func(int) error {
		if _, err := a.Write(small); err != nil {
			return err
		}
		return unix.Fdatasync(int(a.Fd()))
	})
}

func namespace(dir string, n int) error {
	work, err := os.MkdirTemp(dir, "syncfloor-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	name := func(i int) string { return filepath.Join(work, fmt.Sprintf("file.%d", i)) }
	if err := timeEach("create-close", n, func(i int) error {
		f, err := os.OpenFile(name(i), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		return f.Close()
	}); err != nil {
		return err
	}
	return timeEach("unlink", n, func(i int) error { return os.Remove(name(i)) })
}

// hardFileSize is mdtest-hard's file size (IO500's default).
const hardFileSize = 3901

// shared runs mdtest-hard's write and delete phases with procs workers in
// one directory: see the package documentation.
func shared(dir string, n, procs int) error {
	work, err := os.MkdirTemp(dir, "syncfloor-shared-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	name := func(i int) string { return filepath.Join(work, fmt.Sprintf("file.%d", i)) }
	data := make([]byte, hardFileSize)
	// phase runs op for files 0..n-1, worker w taking w, w+procs, ...,
	// and prints its figure: the phase's wall time and rate, and the mean
	// of the time each op reports for its call that holds the directory's
	// lock.
	phase := func(what string, op func(i int) (locked time.Duration, err error)) error {
		var inner atomic.Int64 // ns, summed over the workers
		t0, cpu0 := time.Now(), cputime.Self()
		var g errgroup.Group
		for w := range procs {
			g.Go(func() error {
				for i := w; i < n; i += procs {
					d, err := op(i)
					inner.Add(int64(d))
					if err != nil {
						return fmt.Errorf("%s: %w", what, err)
					}
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			return err
		}
		total, cpu := time.Since(t0), cputime.Self()-cpu0
		b, _ := json.Marshal(sharedFigure{What: what, N: n, Procs: procs, Total: total.Seconds(),
			PerSecond: float64(n) / total.Seconds(), InnerUs: float64(inner.Load()) / 1e3 / float64(n),
			CPU: float64(cpu) / 1e3 / float64(n)})
		fmt.Println(string(b))
		return nil
	}
	if err := phase("hard-write", func(i int) (time.Duration, error) {
		s := time.Now()
		f, err := os.OpenFile(name(i), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		d := time.Since(s)
		if err != nil {
			return d, err
		}
		if _, err := f.Write(data); err != nil {
			f.Close()
			return d, err
		}
		return d, f.Close()
	}); err != nil {
		return err
	}
	return phase("hard-delete", func(i int) (time.Duration, error) {
		s := time.Now()
		err := os.Remove(name(i))
		return time.Since(s), err
	})
}

// sharedFigure is one phase of shared: its rate, and the mean time per
// file of the call that holds the directory's lock (the create's open,
// the unlink).
type sharedFigure struct {
	What      string  `json:"what"`
	N         int     `json:"n"`
	Procs     int     `json:"procs"`
	Total     float64 `json:"total_s"`
	PerSecond float64 `json:"per_s"`
	InnerUs   float64 `json:"locked_call_us"`
	CPU       float64 `json:"cpu_us"`
}
