package transport

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weft-fs/weft/internal/cputime"
)

// benchServerEnv makes the test binary serve echo on a loopback port, and
// a bare echo on another, print both addresses and exit when stdin closes
// (see benchServerMain).
const benchServerEnv = "WEFT_TRANSPORT_BENCH_SERVER"

// benchMsgSize is the request and response size of BenchmarkRoundTrip.
const benchMsgSize = 64

// benchServerMain is run by TestMain in a child process started by
// startBenchServer. Besides the transport's echo it serves the floor of a
// round trip between two Go processes: a bare TCP echo of benchMsgSize
// bytes, one goroutine per connection reading and writing in turn.
func benchServerMain() int {
	tr := NewTCPWith(TCPOptions{Logger: slog.New(slog.DiscardHandler)})
	l, err := tr.Listen("127.0.0.1:0", echo)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	bare, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	go func() {
		for {
			c, err := bare.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, benchMsgSize)
				for {
					if _, err := io.ReadFull(c, buf); err != nil {
						return
					}
					if _, err := c.Write(buf); err != nil {
						return
					}
				}
			}()
		}
	}()
	fmt.Println(l.Addr(), bare.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = l.Close()
	_ = bare.Close()
	return 0
}

// startBenchServer re-executes the test binary as an echo server in its own
// process and returns the transport's address and the bare echo's; the
// server stops at cleanup.
func startBenchServer(b *testing.B) (addr, bareAddr string, pid int) {
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
	f := strings.Fields(line)
	if len(f) != 2 {
		b.Fatalf("bench server said %q, want two addresses", line)
	}
	return f[0], f[1], cmd.Process.Pid
}

// cpuTime returns the user+system CPU time this process used, and that of
// process pid (from /proc, in clock ticks of 10 ms; 0 if unreadable).
func cpuTime(pid int) (self, other time.Duration) {
	self = cputime.Self()
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
// concurrent callers on one connection, and reports p50 and p99. The
// bare= runs measure, in the same run, the floor under it: each caller
// with a TCP connection of its own to a bare echo (write, read), no
// framing and no goroutine between the socket and the caller on either
// side. What the transport adds to that floor is mostly hand-offs between
// goroutines (a reader to the caller, a reader to a handler), each a
// wake-up of another thread when one is idle.
//
// The idle- runs space one caller's calls by a sleep (200 µs asked; the
// timer makes it about a millisecond here), so that both processes wait
// idle before each call, as a metadata server and its followers do
// between one process's creates: what a round trip costs when every
// message wakes a sleeping thread (docs/performance.md, "Where a
// replicated mutation waits").
func BenchmarkRoundTrip(b *testing.B) {
	b.Run("idle-bare=1", func(b *testing.B) { bareRoundTrips(b, 1, idleGap) })
	b.Run("idle-callers=1", func(b *testing.B) { transportRoundTrips(b, 1, idleGap) })
	for _, callers := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("bare=%d", callers), func(b *testing.B) { bareRoundTrips(b, callers, 0) })
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) { transportRoundTrips(b, callers, 0) })
	}
}

// bareRoundTrips measures round trips of callers callers, each on a TCP
// connection of its own to the bench server's echo (no framing).
func bareRoundTrips(b *testing.B, callers int, gap time.Duration) {
	_, bareAddr, pid := startBenchServer(b)
	conns := make([]net.Conn, callers)
	for i := range conns {
		c, err := net.Dial("tcp", bareAddr)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = c.Close() })
		conns[i] = c
	}
	measureRoundTrips(b, callers, pid, gap, func(i int, buf []byte) error {
		if _, err := conns[i].Write(buf); err != nil {
			return err
		}
		_, err := io.ReadFull(conns[i], buf)
		return err
	})
}

// transportRoundTrips measures calls of callers callers sharing one
// transport connection to the bench server.
func transportRoundTrips(b *testing.B, callers int, gap time.Duration) {
	addr, _, pid := startBenchServer(b)
	tr := NewTCPWith(TCPOptions{Logger: slog.New(slog.DiscardHandler)})
	c := dial(b, tr, addr)
	ctx := context.Background()
	measureRoundTrips(b, callers, pid, gap, func(_ int, buf []byte) error {
		_, err := c.Call(ctx, 1, buf)
		return err
	})
}

// idleGap is how long an idle- run's caller sleeps before each call.
const idleGap = 200 * time.Microsecond

// measureRoundTrips runs b.N round trips (call(i, buf) by caller i of
// callers, after 100 to warm up; each caller sleeps gap before each call,
// if gap is not 0) and reports calls/s, p50, p99 and the CPU each side
// (this process, the server pid) spent per call.
func measureRoundTrips(b *testing.B, callers, pid int, gap time.Duration, call func(i int, buf []byte) error) {
	bufs := make([][]byte, callers)
	for i := range bufs {
		bufs[i] = make([]byte, benchMsgSize)
	}
	for i := range 100 { // warm up
		if err := call(i%callers, bufs[i%callers]); err != nil {
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
				if gap > 0 {
					time.Sleep(gap) // outside the time measured
				}
				t0 := time.Now()
				if err := call(i, bufs[i]); err != nil {
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
}
