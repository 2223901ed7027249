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
	"strconv"
	"strings"
	"sync"
	"syscall"
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
func startBenchServer(b *testing.B) (addr string, pid int) {
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
	return strings.TrimSpace(line), cmd.Process.Pid
}

// cpuTime returns the user+system CPU time this process used, and that of
// process pid (from /proc, in clock ticks of 10 ms; 0 if unreadable).
func cpuTime(pid int) (self, other time.Duration) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return self, 0
	}
	// Fields after the command (which may hold spaces): state is field 3,
	// utime 14, stime 15.
	i := strings.LastIndexByte(string(stat), ')')
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 13 {
		return self, 0
	}
	ut, _ := strconv.Atoi(f[11])
	st, _ := strconv.Atoi(f[12])
	return self, time.Duration(ut+st) * 10 * time.Millisecond
}

// BenchmarkRoundTrip measures the latency of small calls (64-byte request
// and response) to an echo server in another process, with 1, 4 and 16
// concurrent callers on one connection, and reports p50 and p99.
func BenchmarkRoundTrip(b *testing.B) {
	msg := make([]byte, 64)
	for _, callers := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			addr, pid := startBenchServer(b)
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
			cpu0, scpu0 := cpuTime(pid)
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
			cpu1, scpu1 := cpuTime(pid)
			all := slices.Concat(lat...)
			slices.Sort(all)
			if len(all) == 0 {
				return
			}
			b.ReportMetric(float64(len(all))/el.Seconds(), "calls/s")
			b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
			// CPU both processes spent per call: less noisy than latency
			// on a busy machine, and what hand-offs between threads cost.
			b.ReportMetric(float64((cpu1-cpu0).Nanoseconds())/1e3/float64(len(all)), "client-cpu-µs/call")
			b.ReportMetric(float64((scpu1-scpu0).Nanoseconds())/1e3/float64(len(all)), "server-cpu-µs/call")
		})
	}
}
