package transport

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestRoundTrip(t *testing.T) {
	tr, _ := newTestTransport(t)
	l := serve(t, tr, func(ctx context.Context, op uint16, req []byte) ([]byte, error) {
		return append([]byte(fmt.Sprintf("op%d:", op)), req...), nil
	})
	c := dial(t, tr, l.Addr())
	for _, tc := range []struct {
		op    uint16
		parts [][]byte
		want  string
	}{
		{1, nil, "op1:"},
		{2, [][]byte{[]byte("hello")}, "op2:hello"},
		{65535, [][]byte{[]byte("a"), nil, []byte(""), []byte("bc")}, "op65535:abc"},
	} {
		got, err := c.Call(context.Background(), tc.op, tc.parts...)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != tc.want {
			t.Fatalf("op %d: got %q, want %q", tc.op, got, tc.want)
		}
	}
}

func TestEmptyResponse(t *testing.T) {
	tr, _ := newTestTransport(t)
	l := serve(t, tr, func(ctx context.Context, op uint16, req []byte) ([]byte, error) { return nil, nil })
	c := dial(t, tr, l.Addr())
	got, err := c.Call(context.Background(), 1, []byte("x"))
	if err != nil || len(got) != 0 {
		t.Fatalf("got %q, %v", got, err)
	}
}

// TestOutOfOrder keeps many calls in flight on one connection and has the
// server finish them in reverse order of arrival: handler i waits for
// handler i+1. Without multiplexing this deadlocks.
func TestOutOfOrder(t *testing.T) {
	const n = 64
	var (
		finished [n]chan struct{}
		mu       sync.Mutex
		order    []int
	)
	for i := range finished {
		finished[i] = make(chan struct{})
	}
	tr, _ := newTestTransport(t)
	l := serve(t, tr, func(ctx context.Context, op uint16, req []byte) ([]byte, error) {
		i := int(binary.LittleEndian.Uint32(req))
		if i+1 < n {
			select {
			case <-finished[i+1]:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		mu.Lock()
		order = append(order, i)
		mu.Unlock()
		close(finished[i])
		return append([]byte("re:"), req...), nil
	})
	c := dial(t, tr, l.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			req := binary.LittleEndian.AppendUint32(nil, uint32(i))
			got, err := c.Call(ctx, 7, req)
			if err != nil {
				errs <- err
				return
			}
			if want := append([]byte("re:"), req...); !bytes.Equal(got, want) {
				errs <- fmt.Errorf("call %d got %q, want %q", i, got, want)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	mu.Lock() // TCP is invisible to the race detector
	defer mu.Unlock()
	if len(order) != n {
		t.Fatalf("server finished %d calls, want %d", len(order), n)
	}
	for k, i := range order {
		if i != n-1-k {
			t.Fatalf("server finished in order %v, want reverse", order)
		}
	}
}

func TestConcurrentRandomSizes(t *testing.T) {
	tr, _ := newTestTransport(t)
	l := serve(t, tr, echo)
	c := dial(t, tr, l.Addr())
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Go(func() {
			var seed [32]byte
			seed[0] = byte(g)
			src := rand.NewChaCha8(seed)
			rng := rand.New(src)
			for range 20 {
				b := make([]byte, rng.IntN(300<<10))
				_, _ = src.Read(b)
				cut := rng.IntN(len(b) + 1)
				got, err := c.Call(context.Background(), uint16(g+1), b[:cut], b[cut:])
				if err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(got, b) {
					errs <- fmt.Errorf("goroutine %d: echo of %d bytes differs", g, len(b))
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestErrnoPropagation(t *testing.T) {
	tr, lb := newTestTransport(t)
	l := serve(t, tr, func(ctx context.Context, op uint16, req []byte) ([]byte, error) {
		switch op {
		case 1:
			return nil, fmt.Errorf("meta: no such inode 42: %w", syscall.ENOENT)
		case 2:
			return nil, syscall.ENOSPC
		case 3:
			return nil, errors.New("meta: something odd")
		case 4:
			panic("handler bug")
		case 5:
			return nil, fmt.Errorf("long: %s: %w", strings.Repeat("x", 100<<10), syscall.EEXIST)
		}
		return []byte("ok"), nil
	})
	c := dial(t, tr, l.Addr())
	for _, tc := range []struct {
		op      uint16
		errno   syscall.Errno
		message string
	}{
		{1, syscall.ENOENT, "meta: no such inode 42"},
		{2, syscall.ENOSPC, "no space left on device"},
		{3, syscall.EIO, "meta: something odd"},
		{4, syscall.EIO, "handler bug"},
		{5, syscall.EEXIST, "long: xxx"},
	} {
		_, err := c.Call(context.Background(), tc.op)
		if !errors.Is(err, tc.errno) {
			t.Fatalf("op %d: got %v, want errno %v", tc.op, err, tc.errno)
		}
		var re *RemoteError
		if !errors.As(err, &re) || re.Op != tc.op || re.Addr != l.Addr() {
			t.Fatalf("op %d: %v is not a RemoteError from %s", tc.op, err, l.Addr())
		}
		if !strings.Contains(err.Error(), tc.message) || !strings.Contains(err.Error(), l.Addr()) {
			t.Fatalf("op %d: error %.200q lacks %q or the address", tc.op, err, tc.message)
		}
		if len(re.Msg) > maxErrMsg {
			t.Fatalf("op %d: message of %d bytes", tc.op, len(re.Msg))
		}
	}
	if !strings.Contains(lb.String(), "handler panicked") {
		t.Fatal("panic not logged")
	}
	// The connection and the server survived the panic.
	if got, err := c.Call(context.Background(), 9); err != nil || string(got) != "ok" {
		t.Fatalf("after panic: %q, %v", got, err)
	}
}

// slowServer serves a handler that waits for its ctx or release.
func slowServer(t *testing.T, tr Transport) (Listener, chan struct{}) {
	release := make(chan struct{})
	l := serve(t, tr, func(ctx context.Context, op uint16, req []byte) ([]byte, error) {
		if op == 1 {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return []byte("late"), nil
		}
		return []byte("fast"), nil
	})
	return l, release
}

func TestCallDeadline(t *testing.T) {
	tr, _ := newTestTransport(t)
	l, release := slowServer(t, tr)
	c := dial(t, tr, l.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Call(ctx, 1, []byte("x"))
	if !errors.Is(err, syscall.ETIMEDOUT) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want ETIMEDOUT", err)
	}
	if d := time.Since(start); d > 30*time.Second { // a hang, not a slow machine
		t.Fatalf("timed out after %v", d)
	}
	close(release) // the late response arrives for an abandoned call
	for range 3 {
		if got, err := c.Call(context.Background(), 2); err != nil || string(got) != "fast" {
			t.Fatalf("after timeout: %q, %v", got, err)
		}
	}
}

func TestCallCancel(t *testing.T) {
	tr, _ := newTestTransport(t)
	l, release := slowServer(t, tr)
	defer close(release)
	c := dial(t, tr, l.Addr())
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(30*time.Millisecond, cancel)
	_, err := c.Call(ctx, 1)
	if !errors.Is(err, syscall.EINTR) || !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want EINTR and context.Canceled", err)
	}
	// A ctx that is already done fails at once without sending.
	_, err = c.Call(ctx, 2)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v", err)
	}
	if got, err := c.Call(context.Background(), 2); err != nil || string(got) != "fast" {
		t.Fatalf("after cancel: %q, %v", got, err)
	}
}

// TestServerGoneMidCall closes the server while calls wait: they fail with
// EIO naming the address, and later calls on the connection fail too.
func TestServerGoneMidCall(t *testing.T) {
	tr, _ := newTestTransport(t)
	l, _ := slowServer(t, tr)
	c := dial(t, tr, l.Addr())
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			_, err := c.Call(context.Background(), 1, make([]byte, 1000))
			errs <- err
		}()
	}
	time.Sleep(50 * time.Millisecond)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		err := <-errs
		if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), l.Addr()) {
			t.Fatalf("got %v, want EIO naming %s", err, l.Addr())
		}
		var re *RemoteError
		if errors.As(err, &re) {
			t.Fatalf("%v is a remote error", err)
		}
	}
	_, err := c.Call(context.Background(), 2)
	if !errors.Is(err, syscall.EIO) || !errors.Is(err, errNotSent) {
		t.Fatalf("call on broken connection: %v", err)
	}
}

func TestBigBodies(t *testing.T) {
	tr, _ := newTestTransport(t)
	l := serve(t, tr, func(ctx context.Context, op uint16, req []byte) ([]byte, error) {
		out := make([]byte, len(req))
		for i, b := range req {
			out[i] = ^b
		}
		return out, nil
	})
	c := dial(t, tr, l.Addr())
	b := make([]byte, 4<<20)
	for i := range b {
		b[i] = byte(i * 7)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			got, err := c.Call(context.Background(), 100, b[:1<<20], b[1<<20:3<<20], b[3<<20:])
			if err != nil {
				errs <- err
				return
			}
			if len(got) != len(b) {
				errs <- fmt.Errorf("got %d bytes", len(got))
				return
			}
			for i := range got {
				if got[i] != ^b[i] {
					errs <- fmt.Errorf("byte %d differs", i)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestRequestTooLarge(t *testing.T) {
	tr, _ := newTestTransport(t)
	l := serve(t, tr, echo)
	c := dial(t, tr, l.Addr())
	chunk := make([]byte, 8<<20)
	parts := make([][]byte, MaxBody/len(chunk)+1)
	for i := range parts {
		parts[i] = chunk
	}
	_, err := c.Call(context.Background(), 1, parts...)
	if !errors.Is(err, syscall.EMSGSIZE) {
		t.Fatalf("got %v, want EMSGSIZE", err)
	}
	if got, err := c.Call(context.Background(), 1, []byte("ok")); err != nil || string(got) != "ok" {
		t.Fatalf("after refused call: %q, %v", got, err)
	}
}

func TestClosedConn(t *testing.T) {
	tr, _ := newTestTransport(t)
	l := serve(t, tr, echo)
	c, err := tr.Dial(context.Background(), l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal("second close:", err)
	}
	if _, err := c.Call(context.Background(), 1); !errors.Is(err, syscall.EIO) {
		t.Fatalf("call after close: %v", err)
	}
}

func TestDialFailure(t *testing.T) {
	tr, _ := newTestTransport(t)
	l := serve(t, tr, echo)
	addr := l.Addr()
	_ = l.Close()
	_, err := tr.Dial(context.Background(), addr)
	if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), addr) {
		t.Fatalf("got %v, want EIO naming %s", err, addr)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := tr.Dial(ctx, addr); !errors.Is(err, syscall.EINTR) {
		t.Fatalf("dial with cancelled ctx: %v", err)
	}
}

// TestListenerCloseWaitsForHandlers checks that Close cancels handler
// contexts and returns only once every handler has returned.
func TestListenerCloseWaitsForHandlers(t *testing.T) {
	tr, _ := newTestTransport(t)
	started := make(chan struct{}, 8)
	var mu sync.Mutex
	running := 0
	l, err := tr.Listen("127.0.0.1:0", func(ctx context.Context, op uint16, req []byte) ([]byte, error) {
		mu.Lock()
		running++
		mu.Unlock()
		started <- struct{}{}
		<-ctx.Done()
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		running--
		mu.Unlock()
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, tr, l.Addr())
	for range 8 {
		go func() { _, _ = c.Call(context.Background(), 1) }()
	}
	for range 8 {
		<-started
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if running != 0 {
		t.Fatalf("%d handlers still running after Close", running)
	}
}

// TestAbandonMidWrite: the server reads nothing, so a big request stalls in
// the middle of its write. When ctx expires, Call must still return (after
// the grace period, by closing the connection) and never leave the writer
// reading the caller's buffer.
func TestAbandonMidWrite(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		nc, err := ln.Accept()
		if err == nil {
			accepted <- nc
		}
	}()
	tr, _ := newTestTransport(t)
	c := dial(t, tr, ln.Addr().String())
	nc := <-accepted
	defer nc.Close()

	// Allocated first: on a loaded machine zeroing it may outlast ctx.
	big := make([]byte, 32<<20)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = c.Call(ctx, 1, big)
	if !errors.Is(err, syscall.ETIMEDOUT) {
		t.Fatalf("got %v, want ETIMEDOUT", err)
	}
	if d := time.Since(start); d < writeAbortGrace || d > writeAbortGrace+3*time.Second {
		t.Fatalf("returned after %v, want about %v", d, writeAbortGrace+100*time.Millisecond)
	}
	if _, err := c.Call(context.Background(), 1); !errors.Is(err, syscall.EIO) {
		t.Fatalf("connection closed by the abandoned write: %v", err)
	}
}
