package transport

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Tests of the client's reader role: callers take turns reading the
// connection (see tcpConn).

// expiring is a context whose deadline the test expires by hand, so a
// caller's ctx can time out exactly while it holds the reader role.
type expiring struct {
	context.Context
	once sync.Once
	done chan struct{}
}

func newExpiring() *expiring {
	return &expiring{Context: context.Background(), done: make(chan struct{})}
}

func (e *expiring) Deadline() (time.Time, bool) { return time.Now().Add(time.Hour), true }
func (e *expiring) Done() <-chan struct{}       { return e.done }
func (e *expiring) expire()                     { e.once.Do(func() { close(e.done) }) }
func (e *expiring) Err() error {
	select {
	case <-e.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// fakeServer accepts one connection on a loopback port and lets the test
// read requests and write response bytes by hand.
func fakeServer(t *testing.T) (addr string, accept func() net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return ln.Addr().String(), func() net.Conn {
		nc, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = nc.Close() })
		return nc
	}
}

// readRequest reads one request frame from nc.
func readRequest(t *testing.T, nc net.Conn) header {
	t.Helper()
	var hb [HeaderSize]byte
	if _, err := io.ReadFull(nc, hb[:]); err != nil {
		t.Fatal(err)
	}
	h, err := decodeHeader(hb[:])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(io.Discard, nc, int64(h.length)); err != nil {
		t.Fatal(err)
	}
	return h
}

// waitState polls the connection's reader state until ok holds.
func waitState(t *testing.T, c Conn, what string, ok func(tc *tcpConn) bool) {
	t.Helper()
	tc := c.(*tcpConn)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		tc.mu.Lock()
		done := ok(tc)
		tc.mu.Unlock()
		if done {
			return
		}
	}
	t.Fatalf("timed out waiting until %s", what)
}

type result struct {
	resp []byte
	err  error
}

// recv waits for a call's result; a call that never returns fails the test.
func recv(t *testing.T, ch <-chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("call did not return")
		return result{}
	}
}

// TestReaderTimesOut: caller A holds the reader role when its ctx times out,
// once between frames and once halfway through a frame (its own, read into
// its response buffer, or B's). The role must pass to B, which waits; B
// gets exactly its own response; A's late response is delivered to nobody,
// and A's buffer is not written after A returned.
func TestReaderTimesOut(t *testing.T) {
	for _, tc := range []struct {
		name    string
		partial string // "", "own" or "other": the frame interrupted halfway
	}{{"between frames", ""}, {"in own body", "own"}, {"in other's body", "other"}} {
		t.Run(tc.name, func(t *testing.T) {
			addr, accept := fakeServer(t)
			tr, _ := newTestTransport(t)
			c := dial(t, tr, addr)
			nc := accept()

			bufA := bytes.Repeat([]byte{0xaa}, 100)
			ctxA := newExpiring()
			resA := make(chan result, 1)
			go func() {
				resp, err := c.Call(WithResponseBuffer(ctxA, bufA), 1, []byte("A"))
				resA <- result{resp, err}
			}()
			hA := readRequest(t, nc)
			waitState(t, c, "A reads", func(tc *tcpConn) bool { return tc.reading && tc.reader != nil })

			resB := make(chan result, 1)
			go func() {
				resp, err := c.Call(context.Background(), 2, []byte("B"))
				resB <- result{resp, err}
			}()
			hB := readRequest(t, nc)
			waitState(t, c, "B waits", func(tc *tcpConn) bool { return len(tc.waiters) == 1 })

			bodyA := bytes.Repeat([]byte("a"), 100)
			bodyB := bytes.Repeat([]byte("b"), 5000)
			frameA := frame(header{kind: kindResponse, op: 1, id: hA.id}, bodyA)
			frameB := frame(header{kind: kindResponse, op: 2, id: hB.id}, bodyB)
			var rest []byte
			switch tc.partial {
			case "own":
				_, _ = nc.Write(frameA[:HeaderSize+40])
				rest = append(frameA[HeaderSize+40:], frameB...)
			case "other":
				_, _ = nc.Write(frameB[:HeaderSize+2000])
				rest = append(frameB[HeaderSize+2000:], frameA...)
			default:
				rest = append(frameB, frameA...)
			}
			time.Sleep(20 * time.Millisecond) // let A read the partial frame (not required)
			ctxA.expire()
			a := recv(t, resA)
			if !errors.Is(a.err, syscall.ETIMEDOUT) || !errors.Is(a.err, context.DeadlineExceeded) {
				t.Fatalf("A: %q, %v; want ETIMEDOUT", a.resp, a.err)
			}
			snapshot := bytes.Clone(bufA)

			if _, err := nc.Write(rest); err != nil {
				t.Fatal(err)
			}
			b := recv(t, resB)
			if b.err != nil || !bytes.Equal(b.resp, bodyB) {
				t.Fatalf("B: %d bytes, %v; want its own %d bytes", len(b.resp), b.err, len(bodyB))
			}
			if !bytes.Equal(bufA, snapshot) {
				t.Fatal("A's response buffer was written after A returned")
			}

			// The connection still works: C gets its own answer, not A's.
			resC := make(chan result, 1)
			go func() {
				resp, err := c.Call(context.Background(), 1, []byte("C"))
				resC <- result{resp, err}
			}()
			hC := readRequest(t, nc)
			if _, err := nc.Write(frame(header{kind: kindResponse, op: 1, id: hC.id}, []byte("for C"))); err != nil {
				t.Fatal(err)
			}
			if r := recv(t, resC); r.err != nil || string(r.resp) != "for C" {
				t.Fatalf("C: %q, %v", r.resp, r.err)
			}
			waitState(t, c, "nobody reads", func(tc *tcpConn) bool { return !tc.reading && len(tc.pending) == 0 })
		})
	}
}

// TestReaderRoleHandedOn: a caller with a deadline that never fires gets
// the reader role from a caller whose ctx was cancelled while waiting for
// the role, and from one that got its own answer first.
func TestReaderRoleHandedOn(t *testing.T) {
	addr, accept := fakeServer(t)
	tr, _ := newTestTransport(t)
	c := dial(t, tr, addr)
	nc := accept()

	call := func(ctx context.Context, op uint16) chan result {
		ch := make(chan result, 1)
		go func() {
			resp, err := c.Call(ctx, op, []byte{byte(op)})
			ch <- result{resp, err}
		}()
		return ch
	}
	resA := call(context.Background(), 1)
	hA := readRequest(t, nc)
	waitState(t, c, "A reads", func(tc *tcpConn) bool { return tc.reading })
	ctxB, cancelB := context.WithCancel(context.Background())
	resB := call(ctxB, 2)
	readRequest(t, nc)
	ctxD, cancelD := context.WithTimeout(context.Background(), time.Hour)
	defer cancelD()
	resD := call(ctxD, 3)
	hD := readRequest(t, nc)
	waitState(t, c, "B and D wait", func(tc *tcpConn) bool { return len(tc.waiters) == 2 })
	cancelB()
	if r := recv(t, resB); !errors.Is(r.err, syscall.EINTR) || !errors.Is(r.err, context.Canceled) {
		t.Fatalf("B: %q, %v; want EINTR", r.resp, r.err)
	}
	// A gets its answer and must hand the role to D.
	if _, err := nc.Write(frame(header{kind: kindResponse, op: 1, id: hA.id}, []byte("for A"))); err != nil {
		t.Fatal(err)
	}
	if r := recv(t, resA); r.err != nil || string(r.resp) != "for A" {
		t.Fatalf("A: %q, %v", r.resp, r.err)
	}
	if _, err := nc.Write(frame(header{kind: kindResponse, op: 3, id: hD.id}, []byte("for D"))); err != nil {
		t.Fatal(err)
	}
	if r := recv(t, resD); r.err != nil || string(r.resp) != "for D" {
		t.Fatalf("D: %q, %v", r.resp, r.err)
	}
}

// TestManyCallersMixed: many callers on one connection with mixed request
// and response sizes, with and without response buffers (fitting or not),
// some with deadlines that expire, answered out of order. Every answered
// call gets exactly its own response.
func TestManyCallersMixed(t *testing.T) {
	tr, _ := newTestTransport(t)
	// The response is the request's first 8 bytes (a call's number)
	// repeated to the length in bytes 8..12, after a delay in 13..14 (µs).
	l := serve(t, tr, func(ctx context.Context, op uint16, req []byte) ([]byte, error) {
		n := int(binary.LittleEndian.Uint32(req[8:]))
		d := time.Duration(binary.LittleEndian.Uint16(req[12:])) * time.Microsecond
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		resp := make([]byte, n)
		for i := 0; i < n; i += 8 {
			copy(resp[i:], req[:8])
		}
		return resp, nil
	})
	c := dial(t, tr, l.Addr())
	const callers, per = 24, 40
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for g := range callers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for k := range per {
				id := uint64(g)<<32 | uint64(k)
				size := rng.IntN(2000)
				if rng.IntN(8) == 0 {
					size = rng.IntN(600 << 10)
				}
				req := make([]byte, 14+rng.IntN(3000))
				binary.LittleEndian.PutUint64(req, id)
				binary.LittleEndian.PutUint32(req[8:], uint32(size))
				binary.LittleEndian.PutUint16(req[12:], uint16(rng.IntN(2000)))
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				if rng.IntN(4) == 0 {
					ctx, cancel = context.WithTimeout(ctx, time.Duration(rng.IntN(1500))*time.Microsecond)
				}
				var buf []byte
				if rng.IntN(2) == 0 {
					buf = make([]byte, rng.IntN(4000))
					ctx = WithResponseBuffer(ctx, buf)
				}
				resp, err := c.Call(ctx, uint16(1+g%3), req)
				cancel()
				if err != nil {
					if errors.Is(err, syscall.ETIMEDOUT) && errors.Is(err, context.DeadlineExceeded) {
						continue
					}
					errs <- fmt.Errorf("call %x: %w", id, err)
					return
				}
				want := make([]byte, size)
				for i := 0; i < size; i += 8 {
					copy(want[i:], binary.LittleEndian.AppendUint64(nil, id))
				}
				if !bytes.Equal(resp, want) {
					errs <- fmt.Errorf("call %x: got %d bytes that are not its own response of %d", id, len(resp), size)
					return
				}
				if buf != nil && size > 0 && size <= len(buf) && &resp[0] != &buf[0] {
					errs <- fmt.Errorf("call %x: response of %d bytes not read into the %d-byte buffer", id, size, len(buf))
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

// TestConnFailsWhileCallersWait: the server's end closes while one caller
// reads (halfway through a response read into a buffer) and others wait:
// every call fails with EIO, and so does the next one.
func TestConnFailsWhileCallersWait(t *testing.T) {
	addr, accept := fakeServer(t)
	tr, _ := newTestTransport(t)
	c := dial(t, tr, addr)
	nc := accept()
	const n = 6
	res := make(chan result, n)
	var ids []header
	for i := range n {
		go func() {
			ctx := context.Background()
			if i%2 == 0 {
				ctx = WithResponseBuffer(ctx, make([]byte, 100))
			}
			resp, err := c.Call(ctx, 1, []byte{byte(i)})
			res <- result{resp, err}
		}()
		ids = append(ids, readRequest(t, nc))
	}
	waitState(t, c, "all wait", func(tc *tcpConn) bool { return tc.reading && len(tc.waiters) == n-1 })
	// Half of a response that fits its caller's buffer, then the end.
	fr := frame(header{kind: kindResponse, op: 1, id: ids[0].id}, make([]byte, 50))
	_, _ = nc.Write(fr[:HeaderSize+10])
	time.Sleep(10 * time.Millisecond)
	_ = nc.Close()
	for range n {
		r := recv(t, res)
		if !errors.Is(r.err, syscall.EIO) {
			t.Fatalf("got %q, %v; want EIO", r.resp, r.err)
		}
	}
	if _, err := c.Call(context.Background(), 1); !errors.Is(err, syscall.EIO) || !errors.Is(err, errNotSent) {
		t.Fatalf("call on the broken connection: %v", err)
	}
}

// TestCloseWithCallsInFlight: Close fails every call in flight, the reader
// among them, with EIO and returns; the calls return too.
func TestCloseWithCallsInFlight(t *testing.T) {
	tr, _ := newTestTransport(t)
	l, _ := slowServer(t, tr)
	c, err := tr.Dial(context.Background(), l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	const n = 5
	res := make(chan result, n)
	for range n {
		go func() {
			resp, err := c.Call(WithResponseBuffer(context.Background(), make([]byte, 64)), 1, []byte("x"))
			res <- result{resp, err}
		}()
	}
	waitState(t, c, "all wait", func(tc *tcpConn) bool { return tc.reading && len(tc.waiters) == n-1 })
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for range n {
		if r := recv(t, res); !errors.Is(r.err, syscall.EIO) {
			t.Fatalf("got %q, %v; want EIO", r.resp, r.err)
		}
	}
}
