package tests

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/weft-fs/weft/internal/testcluster"
)

// BenchmarkRebuild measures the rebuild of a lost target (mirror 2 over 4
// servers, rebuild rate unlimited): GiB/s rebuilt, and the sequential read
// throughput a client gets from other files before and during the
// rebuild. A measurement, not a test: run it with
//
//	go test ./tests -run '^$' -bench BenchmarkRebuild -benchtime 1x
//
// WEFT_REBUILD_MIB sets the data written (default 2048 MiB).
func BenchmarkRebuild(b *testing.B) {
	mib := 2048
	if v := os.Getenv("WEFT_REBUILD_MIB"); v != "" {
		mib, _ = strconv.Atoi(v)
	}
	for range b.N {
		c := testcluster.Start(b, testcluster.Options{Servers: 4, Targets: 4, Timeout: "30s",
			MetaArgs: []string{"--rebuild-rate", "0"}})
		d := filepath.Join(c.Mount(0), "r")
		rd := filepath.Join(c.Mount(0), "read")
		for _, p := range []string{d, rd} {
			if err := os.Mkdir(p, 0o755); err != nil {
				b.Fatal(err)
			}
			if out, err := c.Weft(b.Context(), "setstripe", "-S", "1M", "--mirror", "2", "-c", "1", p); err != nil {
				b.Fatal(out, err)
			}
		}
		buf := make([]byte, 64<<20)
		rand.Read(buf)
		write := func(p string, n int) {
			f, err := os.Create(p)
			if err != nil {
				b.Fatal(err)
			}
			for left := n << 20; left > 0; left -= len(buf) {
				if _, err := f.Write(buf[:min(left, len(buf))]); err != nil {
					b.Fatal(err)
				}
			}
			if err := f.Sync(); err != nil {
				b.Fatal(err)
			}
			f.Close()
		}
		for i := range mib / 256 {
			write(filepath.Join(d, fmt.Sprintf("f%d", i)), 256)
		}
		for i := range 4 {
			write(filepath.Join(rd, fmt.Sprintf("g%d", i)), 256)
		}
		// readRate reads the read/ files once (O_DIRECT is not needed:
		// the mount caches nothing it did not write; the files are
		// dropped from the page cache first) and returns MiB/s.
		readRate := func() float64 {
			start := time.Now()
			var n int64
			for i := range 4 {
				f, err := os.Open(filepath.Join(rd, fmt.Sprintf("g%d", i)))
				if err != nil {
					b.Fatal(err)
				}
				m, err := io.Copy(io.Discard, f)
				f.Close()
				if err != nil {
					b.Fatal(err)
				}
				n += m
			}
			return float64(n) / (1 << 20) / time.Since(start).Seconds()
		}
		dropCaches := func() { os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0) }
		dropCaches()
		before := readRate()
		lost := uint32(0)
		for id, i := range serverTargets(b, c, 4) {
			if i == 1 {
				lost = id
			}
		}
		c.StopStorage(1)
		for _, dir := range c.TargetDirs(1) {
			os.RemoveAll(dir)
		}
		start := time.Now()
		if out, err := c.Weft(b.Context(), "target", "out", strconv.Itoa(int(lost)), "--meta", c.MetaAddr(), "--keys", c.Keys("meta")); err != nil {
			b.Fatal(out, err)
		}
		var during []float64
		var done bool
		var moved uint64
		for !done {
			dropCaches()
			during = append(during, readRate())
			out, err := c.Weft(b.Context(), "target", "list", "--json", "--meta", c.MetaAddr(), "--keys", c.Keys("meta"))
			if err != nil {
				b.Fatal(out, err)
			}
			var l targetListJSON
			if err := json.Unmarshal([]byte(out), &l); err != nil {
				b.Fatal(err)
			}
			if l.Rebuild.Active {
				moved = max(moved, l.Rebuild.BytesDone)
			}
			for _, tg := range l.Targets {
				if tg.ID == lost && tg.Pending == 0 && !l.Rebuild.Active && l.Rebuild.Passes > 1 {
					done = true
				}
			}
			if time.Since(start) > 30*time.Minute {
				b.Fatal("rebuild did not end within 30 minutes")
			}
		}
		el := time.Since(start).Seconds()
		var sum float64
		for _, r := range during {
			sum += r
		}
		b.ReportMetric(float64(mib)/2/1024/el, "rebuilt-GiB/s") // about half the copies were on the lost server
		b.ReportMetric(before, "read-MiB/s-before")
		b.ReportMetric(sum/float64(len(during)), "read-MiB/s-during")
		b.Logf("rebuilt in %.1fs (bytes seen done while active: %d); reads before %.0f MiB/s, during %.0f MiB/s (%d samples)",
			el, moved, before, sum/float64(len(during)), len(during))
	}
}
