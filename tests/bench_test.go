package tests

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/weft-fs/weft/internal/testcluster"
)

// TestBenchIO500Quick runs `weft bench io500 --quick` against a real weft
// mount, the way an admin would, and checks that every IO500 phase reported
// a value and that every read phase verified the bytes it read.
func TestBenchIO500Quick(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Servers: 2, Targets: 4})
	out := filepath.Join(t.TempDir(), "io500.json")
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if txt, err := c.Weft(ctx, "bench", "io500", "--quick", "--procs", "2", "--json", out, c.Mount(0)); err != nil {
		t.Fatalf("weft bench io500: %v\n%s", err, txt)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	checkIO500Report(t, b)
	// The run cleans up after itself: nothing left in the mount.
	if ents, err := os.ReadDir(c.Mount(0)); err != nil || len(ents) != 0 {
		t.Errorf("mount not empty after the run: %v %v", ents, err)
	}
}

// checkIO500Report checks a `weft bench io500 --json` report: every phase
// reported a value, every read phase verified the bytes it read, and the
// scores are set.
func checkIO500Report(t *testing.T, b []byte) {
	t.Helper()
	var res struct {
		Phases map[string]struct {
			Value    float64
			Unit     string
			Seconds  float64
			Verified *bool
		}
		Score struct{ Bandwidth, Metadata, Total float64 }
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	reads := map[string]bool{"ior-easy-read": true, "ior-hard-read": true, "ior-rnd4K-easy-read": true, "mdtest-hard-read": true}
	for _, name := range []string{
		"ior-easy-write", "ior-easy-read", "ior-hard-write", "ior-hard-read", "ior-rnd4K-easy-read",
		"mdtest-easy-write", "mdtest-easy-stat", "mdtest-easy-delete",
		"mdtest-hard-write", "mdtest-hard-stat", "mdtest-hard-read", "mdtest-hard-delete", "find",
	} {
		p, ok := res.Phases[name]
		switch {
		case !ok:
			t.Errorf("phase %s missing from the report", name)
		case p.Value <= 0 || p.Seconds <= 0 || p.Unit == "":
			t.Errorf("phase %s: value %v %s in %v s", name, p.Value, p.Unit, p.Seconds)
		case reads[name] && (p.Verified == nil || !*p.Verified):
			t.Errorf("read phase %s did not verify its data", name)
		}
	}
	if res.Score.Bandwidth <= 0 || res.Score.Metadata <= 0 || res.Score.Total <= 0 {
		t.Errorf("scores: %+v", res.Score)
	}
}

// TestBenchIO500StorageKilled: `weft bench io500` in an ec 2+1 directory
// over four storage servers, one of them killed (SIGKILL) once the first
// write phase has put data on the mount: the run completes, every phase
// reports, and every read phase verifies its bytes (files with a shard on
// the killed server read from the shards left, or decoded; files created
// after the kill are placed on the three servers left, as ec 2+1 needs
// three: with only two left, creates would fail with ENOSPC rather than
// make a file less protected than asked).
func TestBenchIO500StorageKilled(t *testing.T) {
	t.Parallel() // a cluster of its own
	c := testcluster.Start(t, testcluster.Options{Servers: 4, Targets: 4, Timeout: "10s"})
	d := filepath.Join(c.Mount(0), "bench")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	weft(t, c, "setstripe", "--ec", "2+1", "-S", "1M", d)
	out := filepath.Join(t.TempDir(), "io500.json")
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	type result struct {
		txt string
		err error
	}
	done := make(chan result, 1)
	go func() {
		txt, err := c.Weft(ctx, "bench", "io500", "--quick", "--procs", "2", "--json", out, d)
		done <- result{txt, err}
	}()
	// In the middle of the run: as soon as the first write phase has
	// data on the mount.
	for written := int64(0); written < 1<<20; {
		select {
		case r := <-done:
			t.Fatalf("the run ended before a server could be killed in it: %v\n%s", r.err, r.txt)
		case <-time.After(20 * time.Millisecond):
		}
		written = 0
		_ = filepath.WalkDir(d, func(_ string, e fs.DirEntry, err error) error {
			if err == nil && e.Type().IsRegular() {
				if fi, err := e.Info(); err == nil {
					written += fi.Size()
				}
			}
			return nil
		})
	}
	c.StopStorage(1)
	r := <-done
	if r.err != nil {
		t.Fatalf("weft bench io500 with a storage server killed: %v\n%s", r.err, r.txt)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	checkIO500Report(t, b)
}
