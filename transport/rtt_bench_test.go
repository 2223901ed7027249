package transport

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// benchServerEnv makes the test binary serve echo on a loopback port, print
// the address and exit when stdin closes (see benchServerMain).
const benchServerEnv = "WEFT_TRANSPORT_BENCH_SERVER"

// benchServerMain is run by TestMain in a child process started by
// startBenchServer.
func benchServerMain() int {
	tr := NewTCPWith(TCPOptions{Logger: slog.New(slog.DiscardHandler)})
	l, err := tr.Listen("127.0.0.1:0", echo)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(l.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = l.Close()
	return 0
}

// startBenchServer re-executes the test binary as an echo server in its own
// process and returns its address; the server stops at cleanup.
func startBenchServer(b *testing.B) string {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), benchServerEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		b.Fatalf("bench server: %v", err)
	}
	return strings.TrimSpace(line)
}

// BenchmarkRoundTrip measures the latency of small calls (64-byte request
// and response) to an echo server in another process, with 1 caller and
// with 16 concurrent callers on one connection, and reports p50 and p99.
func BenchmarkRoundTrip(b *testing.B) {
	msg := make([]byte, 64)
	for _, callers := range []int{1, 16} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			addr := startBenchServer(b)
			tr := NewTCPWith(TCPOptions{Logger: slog.New(slog.DiscardHandler)})
			c := dial(b, tr, addr)
			ctx := context.Background()
			for range 100 { // warm up
				if _, err := c.Call(ctx, 1, msg); err != nil {
					b.Fatal(err)
				}
			}
			lat := make([][]time.Duration, callers)
			per := b.N/callers + 1
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for i := range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					l := make([]time.Duration, 0, per)
					for range per {
						t0 := time.Now()
						if _, err := c.Call(ctx, 1, msg); err != nil {
							b.Error(err)
							return
						}
						l = append(l, time.Since(t0))
					}
					lat[i] = l
				}()
			}
			wg.Wait()
			el := time.Since(start)
			b.StopTimer()
			all := slices.Concat(lat...)
			slices.Sort(all)
			if len(all) == 0 {
				return
			}
			b.ReportMetric(float64(len(all))/el.Seconds(), "calls/s")
			b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
		})
	}
}
