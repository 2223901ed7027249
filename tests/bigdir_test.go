package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weft-fs/weft/internal/testcluster"
)

// TestBigDirectory creates 100,000 files in one directory from many
// goroutines, lists them and stats a few. The open-file limit here is
// 20,000, so no weft process may keep a descriptor per file. The create
// rate is logged, not asserted (performance belongs in `weft bench`); the
// deadline only guards against a hang. The kernel serialises creates in one
// directory, so the rate is 1 / (LOOKUP + synced CREATE latency).
func TestBigDirectory(t *testing.T) {
	t.Parallel() // waits on synced creates, on a cluster of its own
	const (
		nfiles  = 100_000
		workers = 32
		budget  = 3 * hangGuard // a hang guard, not a performance bar
	)
	c := testcluster.Start(t, testcluster.Options{Servers: 2, Targets: 4})
	d := filepath.Join(c.Mount(0), "big")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	var next, created atomic.Int64
	var firstErr atomic.Value
	deadline := time.Now().Add(budget)
	start := time.Now()
	// Log the rate every 10s: a rate that falls as the directory grows is
	// a different bug from a rate that is low from the start.
	stopProgress := make(chan struct{})
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		last, lastT := int64(0), start
		tk := time.NewTicker(10 * time.Second)
		defer tk.Stop()
		for {
			select {
			case <-stopProgress:
				return
			case now := <-tk.C:
				n := created.Load()
				t.Logf("%6d files, %.0f creates/s over the last %v", n, float64(n-last)/now.Sub(lastT).Seconds(), now.Sub(lastT).Round(time.Second))
				last, lastT = n, now
			}
		}
	}()
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				i := next.Add(1) - 1
				if i >= nfiles {
					return
				}
				f, err := os.OpenFile(filepath.Join(d, fmt.Sprintf("file-%06d", i)), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
				if err == nil {
					err = f.Close()
				}
				if err != nil {
					firstErr.CompareAndSwap(nil, fmt.Errorf("create #%d: %w", i, err))
					return
				}
				created.Add(1)
			}
		}()
	}
	wg.Wait()
	close(stopProgress)
	<-progressDone
	el := time.Since(start)
	rate := float64(created.Load()) / el.Seconds()
	t.Logf("created %d files in %v: %.0f creates/s with %d goroutines", created.Load(), el.Round(time.Millisecond), rate, workers)
	logFDs(t, c)
	if err := firstErr.Load(); err != nil {
		t.Fatal(err)
	}
	if created.Load() < nfiles {
		t.Fatalf("created only %d of %d files in %v (%.0f creates/s): stuck", created.Load(), nfiles, budget, rate)
	}

	start = time.Now()
	ents, err := os.ReadDir(d)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("listed %d entries in %v", len(ents), time.Since(start).Round(time.Millisecond))
	if len(ents) != nfiles {
		t.Errorf("readdir: %d entries, want %d", len(ents), nfiles)
	}
	seen := make(map[string]bool, len(ents))
	for _, e := range ents {
		if seen[e.Name()] {
			t.Errorf("readdir lists %s twice", e.Name())
			break
		}
		seen[e.Name()] = true
	}
	for _, i := range []int{0, 1, 4242, 50_000, 99_999} {
		name := fmt.Sprintf("file-%06d", i)
		if !seen[name] {
			t.Errorf("readdir misses %s", name)
		}
		fi, err := os.Stat(filepath.Join(d, name))
		if err != nil || !fi.Mode().IsRegular() || fi.Size() != 0 {
			t.Errorf("stat %s: %v %v", name, fi, err)
		}
	}
	if _, err := os.Stat(filepath.Join(d, "file-100000")); !os.IsNotExist(err) {
		t.Errorf("stat of a name never created: %v", err)
	}
	// Remove a few and list again: the directory stays consistent.
	for i := 0; i < 100; i++ {
		if err := os.Remove(filepath.Join(d, fmt.Sprintf("file-%06d", i*1000))); err != nil {
			t.Fatal(err)
		}
	}
	if ents, err := os.ReadDir(d); err != nil || len(ents) != nfiles-100 {
		t.Errorf("readdir after 100 unlinks: %d entries, %v", len(ents), err)
	}
	logFDs(t, c)
}

// logFDs logs how many descriptors each weft process holds.
func logFDs(t *testing.T, c *testcluster.Cluster) {
	for name, pid := range c.PIDs() {
		ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		if err == nil {
			t.Logf("%s (pid %d) holds %d open descriptors", name, pid, len(ents))
			if len(ents) > 10_000 {
				t.Errorf("%s holds %d descriptors: it will hit the limit of 20,000", name, len(ents))
			}
		}
	}
}
