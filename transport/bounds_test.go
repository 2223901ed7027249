package transport

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weft-fs/weft/internal/testutil"
)

// boundedTransport is a TCP transport with opts (and a kept log).
func boundedTransport(t *testing.T, opts TCPOptions) (*tcpTransport, *testutil.LogBuffer) {
	log, lb := testutil.NewLogger()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("transport log:\n%s", lb.String())
		}
	})
	opts.Logger = log
	return NewTCPWith(opts).(*tcpTransport), lb
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func rawDial(t *testing.T, addr string) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return nc
}

// waitClosed waits for the server to close nc (a read returns EOF or an
// error other than our own deadline).
func waitClosed(t *testing.T, nc net.Conn) {
	t.Helper()
	_ = nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, err := io.Copy(io.Discard, nc)
	if errors.Is(err, syscall.ECONNRESET) {
		err = nil
	}
	if err != nil {
		t.Fatalf("connection not closed by the server: %v", err)
	}
}

func requestHeader(op uint16, id uint64, length int) []byte {
	b := make([]byte, HeaderSize)
	encodeHeader(b, header{kind: kindRequest, op: op, id: id, length: uint32(length)})
	return b
}

func TestStalledHeader(t *testing.T) {
	tr, lb := boundedTransport(t, TCPOptions{FrameTimeout: 200 * time.Millisecond})
	l := serve(t, tr, echo)
	nc := rawDial(t, l.Addr())
	if _, err := nc.Write(requestHeader(1, 1, 0)[:10]); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, nc)
	waitUntil(t, "stall logged", func() bool { return strings.Contains(lb.String(), "frame header stalled") })
}

func TestStalledBody(t *testing.T) {
	tr, lb := boundedTransport(t, TCPOptions{FrameTimeout: 200 * time.Millisecond})
	l := serve(t, tr, echo)
	nc := rawDial(t, l.Addr())
	if _, err := nc.Write(append(requestHeader(1, 1, MaxBody), make([]byte, 1000)...)); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, nc)
	waitUntil(t, "stall logged", func() bool { return strings.Contains(lb.String(), "sent 1000 of 75497472 body bytes") })
	waitUntil(t, "budget given back", func() bool { return tr.budget.inUse() == 0 })
}

// 50 connections announcing MaxBody and stalling after 100 KiB hold about
// 50 MiB (a first chunk each), not 50 × 72 MiB.
func TestStalledBodiesMemoryBounded(t *testing.T) {
	tr, _ := boundedTransport(t, TCPOptions{})
	l := serve(t, tr, echo)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	const n = 50
	for i := 0; i < n; i++ {
		nc := rawDial(t, l.Addr())
		if _, err := nc.Write(append(requestHeader(1, 1, MaxBody), make([]byte, 100<<10)...)); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "every stalled body started", func() bool { return tr.budget.inUse() == n*bodyChunk })
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	grew := int64(after.HeapInuse) - int64(before.HeapInuse)
	t.Logf("budget in use %d MiB, heap in use grew by %d MiB", tr.budget.inUse()>>20, grew>>20)
	if grew > 4*n*bodyChunk {
		t.Fatalf("heap grew by %d MiB for %d stalled frames", grew>>20, n)
	}
}

// Bodies are read into a growing buffer; large ones arrive intact.
func TestGrowingBodies(t *testing.T) {
	tr, _ := boundedTransport(t, TCPOptions{})
	l := serve(t, tr, echo)
	c := dial(t, NewTCP(), l.Addr())
	for _, n := range []int{0, 1, bodyChunk - 1, bodyChunk, bodyChunk + 1, 5*bodyChunk + 3, MaxBody} {
		b := bytes.Repeat([]byte{byte(n)}, n)
		for i := range b {
			b[i] = byte(i * 7)
		}
		resp, err := c.Call(context.Background(), 1, b)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(resp, b) {
			t.Fatalf("%d-byte body came back different", n)
		}
	}
	waitUntil(t, "budget given back", func() bool { return tr.budget.inUse() == 0 })
}

// A reader that finds the body budget spent waits at most FrameTimeout,
// then its connection is closed; other connections go on.
func TestBodyBudget(t *testing.T) {
	release := make(chan struct{})
	held := make(chan struct{}, 1)
	tr, lb := boundedTransport(t, TCPOptions{MaxBodyBytes: bodyChunk, FrameTimeout: 300 * time.Millisecond})
	l := serve(t, tr, func(ctx context.Context, op uint16, req []byte) ([]byte, error) {
		if op == 1 {
			held <- struct{}{}
			<-release
		}
		return []byte("ok"), nil
	})
	a := dial(t, NewTCP(), l.Addr())
	aDone := make(chan error, 1)
	go func() {
		_, err := a.Call(context.Background(), 1, make([]byte, bodyChunk))
		aDone <- err
	}()
	<-held // a's body holds the whole budget while its handler runs
	b := dial(t, NewTCP(), l.Addr())
	// The wait is bounded by FrameTimeout (300ms), far within this ctx.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := b.Call(ctx, 2, []byte("small")); !errors.Is(err, syscall.EIO) {
		t.Fatalf("call while the budget is spent: %v, want EIO (connection closed after FrameTimeout)", err)
	}
	waitUntil(t, "budget refusal logged", func() bool { return strings.Contains(lb.String(), "request body budget") })
	close(release)
	if err := <-aDone; err != nil {
		t.Fatal(err)
	}
	c := dial(t, NewTCP(), l.Addr())
	if _, err := c.Call(context.Background(), 2, []byte("small")); err != nil {
		t.Fatal(err)
	}
}

// A client that does not read its responses is disconnected after
// WriteTimeout, and the handlers' memory is freed.
func TestUnreadResponses(t *testing.T) {
	tr, lb := boundedTransport(t, TCPOptions{WriteTimeout: 200 * time.Millisecond})
	big := make([]byte, 4<<20)
	l := serve(t, tr, func(ctx context.Context, op uint16, req []byte) ([]byte, error) { return big, nil })
	nc := rawDial(t, l.Addr())
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4 << 10)
	}
	var reqs []byte
	for i := 0; i < 32; i++ {
		reqs = append(reqs, requestHeader(1, uint64(i+1), 0)...)
	}
	if _, err := nc.Write(reqs); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "stalled writer disconnected", func() bool { return strings.Contains(lb.String(), "has not read its responses") })
	waitUntil(t, "connection gone", func() bool {
		ln := l.(*tcpListener)
		ln.mu.Lock()
		defer ln.mu.Unlock()
		return len(ln.conns) == 0
	})
}

func TestIdleTimeout(t *testing.T) {
	tr, _ := boundedTransport(t, TCPOptions{IdleTimeout: 200 * time.Millisecond})
	l := serve(t, tr, func(ctx context.Context, op uint16, req []byte) ([]byte, error) {
		if op == 2 { // longer than IdleTimeout: a call in flight is not idle
			time.Sleep(600 * time.Millisecond)
		}
		return req, nil
	})
	c := dial(t, NewTCP(), l.Addr())
	if _, err := c.Call(context.Background(), 2, []byte("slow")); err != nil {
		t.Fatalf("call longer than the idle timeout: %v", err)
	}
	waitUntil(t, "idle connection closed by the server", func() bool { return c.(*tcpConn).isBroken() })
}

func TestRetireIfIdle(t *testing.T) {
	release := make(chan struct{})
	l := serve(t, NewTCP(), func(ctx context.Context, op uint16, req []byte) ([]byte, error) {
		<-release
		return nil, nil
	})
	c := dial(t, NewTCP(), l.Addr()).(*tcpConn)
	done := make(chan error, 1)
	go func() { _, err := c.Call(context.Background(), 1); done <- err }()
	waitUntil(t, "call in flight", func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.pending) == 1 })
	if c.retireIfIdle(0) {
		t.Fatal("retired a connection with a call in flight")
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !c.retireIfIdle(0) {
		t.Fatal("idle connection not retired")
	}
	if _, err := c.Call(context.Background(), 1); !errors.Is(err, errNotSent) {
		t.Fatalf("call on a retired connection: %v, want an unsent error (Pool retries it)", err)
	}
}

func TestConnectionLimit(t *testing.T) {
	tr, lb := boundedTransport(t, TCPOptions{MaxConns: 2})
	l := serve(t, tr, echo)
	a := dial(t, NewTCP(), l.Addr())
	b, err := NewTCP().Dial(context.Background(), l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []Conn{a, b} {
		if _, err := c.Call(context.Background(), 1, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	over := rawDial(t, l.Addr())
	waitClosed(t, over)
	waitUntil(t, "refusal logged", func() bool { return strings.Contains(lb.String(), "connection limit") })
	b.Close()
	waitUntil(t, "a new connection served once one closed", func() bool {
		c, err := NewTCP().Dial(context.Background(), l.Addr())
		if err != nil {
			return false
		}
		defer c.Close()
		_, err = c.Call(context.Background(), 1, []byte("x"))
		return err == nil
	})
}

// Without Security every request still carries its Peer, with RoleNone.
func TestPeerWithoutSecurity(t *testing.T) {
	l := serve(t, NewTCP(), func(ctx context.Context, op uint16, req []byte) ([]byte, error) {
		p, ok := PeerFrom(ctx)
		if !ok || p.Role != RoleNone || p.Addr == "" {
			return nil, syscall.EINVAL
		}
		return []byte(p.Addr), nil
	})
	c := dial(t, NewTCP(), l.Addr())
	if _, err := c.Call(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
}

// One remote IP cannot hold more than MaxConnsPerIP connections, so one
// host cannot lock the others out: a connection from another IP is still
// served meanwhile.
func TestConnectionLimitPerIP(t *testing.T) {
	tr, lb := boundedTransport(t, TCPOptions{MaxConnsPerIP: 2})
	l, err := tr.Listen("0.0.0.0:0", echo)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	_, port, _ := net.SplitHostPort(l.Addr())
	addr := net.JoinHostPort("127.0.0.1", port)
	a := dial(t, NewTCP(), addr)
	b := dial(t, NewTCP(), addr)
	for _, c := range []Conn{a, b} {
		if _, err := c.Call(context.Background(), 1, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	over := rawDial(t, addr)
	waitClosed(t, over)
	waitUntil(t, "refusal logged", func() bool { return strings.Contains(lb.String(), "MaxConnsPerIP") })

	// From 127.0.0.2: a probe is answered.
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
	other, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Write(requestHeader(OpProbe, 1, 0)); err != nil {
		t.Fatal(err)
	}
	_ = other.SetReadDeadline(time.Now().Add(time.Minute))
	resp := make([]byte, HeaderSize)
	if _, err := io.ReadFull(other, resp); err != nil {
		t.Fatalf("a connection from another IP was not served: %v", err)
	}

	b.Close()
	waitUntil(t, "a new connection served once one closed", func() bool {
		c, err := NewTCP().Dial(context.Background(), addr)
		if err != nil {
			return false
		}
		defer c.Close()
		_, err = c.Call(context.Background(), 1, []byte("x"))
		return err == nil
	})
}
