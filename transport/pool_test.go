package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// countingTransport counts dials and can make them hang until ctx ends.
type countingTransport struct {
	Transport
	dials atomic.Int32
	hang  atomic.Bool
}

func (c *countingTransport) Dial(ctx context.Context, addr string) (Conn, error) {
	c.dials.Add(1)
	if c.hang.Load() {
		<-ctx.Done()
		return nil, fmt.Errorf("hung dial: %w", ctx.Err())
	}
	return c.Transport.Dial(ctx, addr)
}

func newPool(t *testing.T, tr Transport, opts PoolOptions) *Pool {
	p := NewPool(tr, opts)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func TestPoolRoundRobin(t *testing.T) {
	tr, _ := newTestTransport(t)
	l := serve(t, tr, echo)
	ct := &countingTransport{Transport: tr}
	p := newPool(t, ct, PoolOptions{ConnsPerAddr: 3})
	for i := range 12 {
		msg := fmt.Sprint(i)
		got, err := p.Call(context.Background(), l.Addr(), 1, []byte(msg))
		if err != nil || string(got) != msg {
			t.Fatalf("call %d: %q, %v", i, got, err)
		}
	}
	if n := ct.dials.Load(); n != 3 {
		t.Fatalf("%d dials, want 3 (one per slot)", n)
	}
}

func TestPoolConcurrent(t *testing.T) {
	tr, _ := newTestTransport(t)
	l1 := serve(t, tr, echo)
	l2 := serve(t, tr, echo)
	ct := &countingTransport{Transport: tr}
	p := newPool(t, ct, PoolOptions{})
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Go(func() {
			for i := range 50 {
				addr := l1.Addr()
				if (g+i)%2 == 0 {
					addr = l2.Addr()
				}
				msg := fmt.Sprintf("%d/%d", g, i)
				got, err := p.Call(context.Background(), addr, 1, []byte(msg))
				if err != nil || string(got) != msg {
					errs <- fmt.Errorf("%s: %q, %v", msg, got, err)
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
	if n := ct.dials.Load(); n != 4 {
		t.Fatalf("%d dials, want 2 addresses x 2 conns = 4", n)
	}
}

// TestPoolRedial stops the server and starts it again on the same address:
// calls fail with EIO while it is down and succeed again once it is back,
// without any action from the caller.
func TestPoolRedial(t *testing.T) {
	tr, _ := newTestTransport(t)
	l := serve(t, tr, echo)
	addr := l.Addr()
	p := newPool(t, tr, PoolOptions{DialTimeout: time.Second})
	ctx := context.Background()
	for range 4 {
		if _, err := p.Call(ctx, addr, 1, []byte("a")); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		_, err := p.Call(ctx, addr, 1, []byte("b"))
		if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), addr) {
			t.Fatalf("server down: got %v, want EIO naming %s", err, addr)
		}
	}
	l2, err := tr.Listen(addr, func(ctx context.Context, op uint16, req []byte) ([]byte, error) {
		return append([]byte("new:"), req...), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	for range 4 {
		got, err := p.Call(ctx, addr, 1, []byte("c"))
		if err != nil || string(got) != "new:c" {
			t.Fatalf("after restart: %q, %v", got, err)
		}
	}
}

// TestPoolServerRestartBetweenCalls: the connections break while idle; the
// next calls must not fail, since the pool sees the broken connections
// before sending and redials.
func TestPoolServerRestartBetweenCalls(t *testing.T) {
	tr, _ := newTestTransport(t)
	l := serve(t, tr, echo)
	addr := l.Addr()
	p := newPool(t, tr, PoolOptions{})
	ctx := context.Background()
	for range 4 {
		if _, err := p.Call(ctx, addr, 1, []byte("a")); err != nil {
			t.Fatal(err)
		}
	}
	_ = l.Close()
	l2, err := tr.Listen(addr, echo)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	time.Sleep(20 * time.Millisecond) // let the client see the FINs
	for i := range 4 {
		if got, err := p.Call(ctx, addr, 1, []byte("b")); err != nil || string(got) != "b" {
			t.Fatalf("call %d after restart: %q, %v", i, got, err)
		}
	}
}

func TestPoolDialErrors(t *testing.T) {
	tr, _ := newTestTransport(t)
	l := serve(t, tr, echo)
	addr := l.Addr()
	_ = l.Close()

	ct := &countingTransport{Transport: tr}
	p := newPool(t, ct, PoolOptions{DialTimeout: 200 * time.Millisecond})
	_, err := p.Call(context.Background(), addr, 1)
	if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), addr) {
		t.Fatalf("refused: got %v, want EIO naming %s", err, addr)
	}

	// The dial hangs: the caller's ctx expires first -> ETIMEDOUT.
	ct.hang.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	_, err = p.Call(ctx, addr, 1)
	if !errors.Is(err, syscall.ETIMEDOUT) || !strings.Contains(err.Error(), addr) {
		t.Fatalf("ctx expired while dialing: got %v, want ETIMEDOUT naming %s", err, addr)
	}
	// A dial that got no answer marks the address suspect, like an
	// unanswered call: the next call fails at once, without dialing (it has
	// no deadline and the dial would hang: only the suspicion can fail it).
	_, err = p.Call(context.Background(), addr, 1)
	if !errors.Is(err, syscall.ETIMEDOUT) {
		t.Fatalf("after an unanswered dial: got %v, want an immediate ETIMEDOUT", err)
	}

	// The pool's dial timeout expires first -> EIO (fresh pool).
	p2 := newPool(t, ct, PoolOptions{DialTimeout: 200 * time.Millisecond})
	_, err = p2.Call(context.Background(), addr, 1)
	if !errors.Is(err, syscall.EIO) || errors.Is(err, syscall.ETIMEDOUT) || !strings.Contains(err.Error(), addr) {
		t.Fatalf("dial timeout: got %v, want EIO naming %s", err, addr)
	}
	// ... and it too marks the address suspect.
	if _, err = p2.Call(context.Background(), addr, 1); !errors.Is(err, syscall.ETIMEDOUT) {
		t.Fatalf("after a dial timeout: got %v, want ETIMEDOUT (suspect)", err)
	}
}

// TestPoolSharedDial: calls waiting for the same slot share one dial.
func TestPoolSharedDial(t *testing.T) {
	tr, _ := newTestTransport(t)
	l := serve(t, tr, echo)
	ct := &countingTransport{Transport: tr}
	p := newPool(t, ct, PoolOptions{ConnsPerAddr: 1})
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if _, err := p.Call(context.Background(), l.Addr(), 1); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := ct.dials.Load(); n != 1 {
		t.Fatalf("%d dials, want 1", n)
	}
}

func TestPoolClose(t *testing.T) {
	tr, _ := newTestTransport(t)
	l, release := slowServer(t, tr)
	defer close(release)
	p := NewPool(tr, PoolOptions{})
	if _, err := p.Call(context.Background(), l.Addr(), 2); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := p.Call(context.Background(), l.Addr(), 1)
		errc <- err
	}()
	time.Sleep(30 * time.Millisecond)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, syscall.EIO) {
		t.Fatalf("call in flight at Close: %v", err)
	}
	if _, err := p.Call(context.Background(), l.Addr(), 2); !errors.Is(err, syscall.EIO) {
		t.Fatalf("call after Close: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal("second close:", err)
	}
}

// TestPoolCloseDuringDial: Close does not wait out a hung dial's timeout.
func TestPoolCloseDuringDial(t *testing.T) {
	tr, _ := newTestTransport(t)
	ct := &countingTransport{Transport: tr}
	ct.hang.Store(true)
	p := NewPool(ct, PoolOptions{DialTimeout: time.Minute})
	errc := make(chan error, 1)
	go func() {
		_, err := p.Call(context.Background(), "127.0.0.1:1", 1)
		errc <- err
	}()
	for ct.dials.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	_ = p.Close()
	if err := <-errc; !errors.Is(err, syscall.EIO) {
		t.Fatalf("call whose dial was cut by Close: %v", err)
	}
}

// freezable stands in front of a server like a SIGSTOPed process: a TCP
// proxy that, while frozen, still accepts connections (as the kernel does
// for a stopped process) but moves no bytes until thawed. Freezing the
// process, not a handler, matters: the transport itself answers OpProbe.
type freezable struct {
	ln     net.Listener
	target string
	done   chan struct{} // closed by close
	wg     sync.WaitGroup

	mu     sync.Mutex
	thawed chan struct{} // closed while not frozen
	conns  []net.Conn
	closed bool
}

// newFreezable starts a proxy to target, closed at cleanup.
func newFreezable(t *testing.T, target string) *freezable {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezable{ln: ln, target: target, done: make(chan struct{}), thawed: make(chan struct{})}
	close(f.thawed)
	f.wg.Add(1)
	go f.accept()
	t.Cleanup(f.close)
	return f
}

func (f *freezable) Addr() string { return f.ln.Addr().String() }
func (f *freezable) freeze()      { f.mu.Lock(); f.thawed = make(chan struct{}); f.mu.Unlock() }
func (f *freezable) thaw()        { f.mu.Lock(); close(f.thawed); f.mu.Unlock() }

func (f *freezable) close() {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return
	}
	f.closed = true
	close(f.done)
	conns := f.conns
	f.mu.Unlock()
	_ = f.ln.Close()
	for _, c := range conns {
		_ = c.Close()
	}
	f.wg.Wait()
}

func (f *freezable) accept() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", f.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		f.mu.Lock()
		if f.closed {
			f.mu.Unlock()
			_ = c.Close()
			_ = s.Close()
			return
		}
		f.conns = append(f.conns, c, s)
		f.wg.Add(2)
		f.mu.Unlock()
		go f.pipe(c, s)
		go f.pipe(s, c)
	}
}

// pipe copies src to dst, holding every chunk while frozen.
func (f *freezable) pipe(dst, src net.Conn) {
	defer f.wg.Done()
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			f.mu.Lock()
			thawed := f.thawed
			f.mu.Unlock()
			select {
			case <-thawed:
			case <-f.done:
				return
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// callTimed calls addr with a deadline of d and returns the error and how
// long the call took.
func callTimed(p *Pool, addr string, d time.Duration) (error, time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	start := time.Now()
	_, err := p.Call(ctx, addr, 1, []byte("x"))
	return err, time.Since(start)
}

// TestPoolFrozenServer: once a call to a frozen server timed out, further
// calls fail at once with ETIMEDOUT instead of waiting out their own
// deadlines; other addresses are unaffected; after the server thaws, the
// probe clears the suspicion and calls work again by themselves.
func TestPoolFrozenServer(t *testing.T) {
	tr, _ := newTestTransport(t)
	f := newFreezable(t, serve(t, tr, echo).Addr())
	l := f
	other := serve(t, tr, echo)
	p := newPool(t, tr, PoolOptions{})
	if err, _ := callTimed(p, l.Addr(), 5*time.Second); err != nil {
		t.Fatal(err)
	}

	f.freeze()
	err, took := callTimed(p, l.Addr(), 100*time.Millisecond)
	if !errors.Is(err, syscall.ETIMEDOUT) || took < 100*time.Millisecond {
		t.Fatalf("first call to a frozen server: %v after %v, want ETIMEDOUT after the 100ms deadline", err, took)
	}
	// With a deadline far beyond any test run, only the suspicion can
	// fail these calls: waiting would hang the test.
	for i := range 3 {
		err, took := callTimed(p, l.Addr(), time.Hour)
		if !errors.Is(err, syscall.ETIMEDOUT) || !strings.Contains(err.Error(), l.Addr()) {
			t.Fatalf("call %d to a suspect server: %v after %v, want ETIMEDOUT naming %s at once", i, err, took, l.Addr())
		}
	}
	if err, _ := callTimed(p, other.Addr(), 5*time.Second); err != nil {
		t.Fatalf("call to another server while one is suspect: %v", err)
	}

	f.thaw()
	thawed := time.Now()
	for {
		err, _ := callTimed(p, l.Addr(), 5*time.Second)
		if err == nil {
			break
		}
		if time.Since(thawed) > 5*time.Minute { // against hangs only
			t.Fatalf("calls still fail 5 minutes after the server thawed: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("calls work again %v after the thaw", time.Since(thawed).Round(time.Millisecond))
}

// TestPoolSuspectOnlyOnDeadline: handler errors (even ETIMEDOUT) and
// cancelled calls leave the address trusted; a call that timed out on a
// slow but live server makes it suspect only until the probe's prompt
// answer.
func TestPoolSuspectOnlyOnDeadline(t *testing.T) {
	tr, _ := newTestTransport(t)
	l := serve(t, tr, func(ctx context.Context, op uint16, req []byte) ([]byte, error) {
		switch op {
		case 2:
			return nil, fmt.Errorf("downstream: %w", syscall.ETIMEDOUT)
		case 3:
			select {
			case <-time.After(300 * time.Millisecond):
			case <-ctx.Done():
			}
		}
		return req, nil
	})
	p := newPool(t, tr, PoolOptions{})
	ctx := context.Background()
	fine := func(what string) {
		t.Helper()
		if _, err := p.Call(ctx, l.Addr(), 1); err != nil {
			t.Fatalf("call after %s: %v", what, err)
		}
	}
	if _, err := p.Call(ctx, l.Addr(), 2); !errors.Is(err, syscall.ETIMEDOUT) {
		t.Fatalf("handler ETIMEDOUT: %v", err)
	}
	fine("a handler's ETIMEDOUT")

	cctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(20*time.Millisecond, cancel)
	if _, err := p.Call(cctx, l.Addr(), 3); !errors.Is(err, syscall.EINTR) {
		t.Fatalf("cancelled call: %v", err)
	}
	fine("a cancelled call")

	dctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := p.Call(dctx, l.Addr(), 3); !errors.Is(err, syscall.ETIMEDOUT) {
		t.Fatalf("slow call: %v", err)
	}
	start := time.Now()
	for {
		_, err := p.Call(ctx, l.Addr(), 1)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.ETIMEDOUT) || time.Since(start) > 5*time.Minute { // against hangs only
			t.Fatalf("after a slow call: %v (%v later)", err, time.Since(start))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestPoolCloseDuringProbe: Close stops a probe that waits on a frozen
// server (goleak in TestMain checks it is gone).
func TestPoolCloseDuringProbe(t *testing.T) {
	tr, _ := newTestTransport(t)
	f := newFreezable(t, serve(t, tr, echo).Addr())
	l := f
	p := NewPool(tr, PoolOptions{})
	f.freeze()
	if err, _ := callTimed(p, l.Addr(), 50*time.Millisecond); !errors.Is(err, syscall.ETIMEDOUT) {
		t.Fatalf("call to a frozen server: %v", err)
	}
	if err := p.Close(); err != nil { // waiting for the probe would hang here
		t.Fatal(err)
	}
	if err, _ := callTimed(p, l.Addr(), time.Second); !errors.Is(err, syscall.EIO) {
		t.Fatalf("call after Close: %v", err)
	}
}
