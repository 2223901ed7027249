package tests

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
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
// WEFT_REBUILD_MIB sets the data written (default 2048 MiB),
// WEFT_REBUILD_RATE the rebuild's limit (weft meta --rebuild-rate; default
// 0, none).
func BenchmarkRebuild(b *testing.B) {
	mib := 2048
	if v := os.Getenv("WEFT_REBUILD_MIB"); v != "" {
		mib, _ = strconv.Atoi(v)
	}
	rate := "0" // unlimited
	if v := os.Getenv("WEFT_REBUILD_RATE"); v != "" {
		rate = v
	}
	for range b.N {
		c := testcluster.Start(b, testcluster.Options{Servers: 4, Targets: 4, Timeout: "30s",
			MetaArgs: []string{"--rebuild-rate", rate}})
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
		// A reader reads the read/ files over and over while the rebuild
		// runs; the rebuild's end is polled apart from it.
		var (
			mu     sync.Mutex
			during []float64
			stop   = make(chan struct{})
			wg     sync.WaitGroup
		)
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				dropCaches()
				r := readRate()
				mu.Lock()
				during = append(during, r)
				mu.Unlock()
			}
		})
		var bytes uint64
		seenActive := false
		for {
			out, err := c.Weft(b.Context(), "target", "list", "--json", "--meta", c.MetaAddr(), "--keys", c.Keys("meta"))
			if err != nil {
				b.Fatal(out, err)
			}
			var l targetListJSON
			if err := json.Unmarshal([]byte(out), &l); err != nil {
				b.Fatal(err)
			}
			bytes = max(bytes, l.Rebuild.BytesDone)
			seenActive = seenActive || l.Rebuild.Active
			pending := uint64(1)
			for _, tg := range l.Targets {
				if tg.ID == lost {
					pending = tg.Pending
				}
			}
			if seenActive && !l.Rebuild.Active && pending == 0 {
				break
			}
			if time.Since(start) > 30*time.Minute {
				b.Fatal("rebuild did not end within 30 minutes")
			}
			time.Sleep(200 * time.Millisecond)
		}
		el := time.Since(start).Seconds()
		close(stop)
		wg.Wait()
		var sum float64
		for _, r := range during {
			sum += r
		}
		avg := sum / float64(max(1, len(during)))
		b.ReportMetric(float64(bytes)/(1<<30)/el, "rebuilt-GiB/s")
		b.ReportMetric(before, "read-MiB/s-before")
		b.ReportMetric(avg, "read-MiB/s-during")
		b.Logf("rebuilt %d bytes in %.1fs; client reads before %.0f MiB/s, during %.0f MiB/s (%d passes)",
			bytes, el, before, avg, len(during))
	}
}
