package transport

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func frame(h header, body []byte) []byte {
	b := make([]byte, HeaderSize, HeaderSize+len(body))
	h.length = uint32(len(body))
	encodeHeader(b, h)
	return append(b, body...)
}

// TestGarbageFrames writes malformed input to a real listener. Each time the
// server must log why, close that connection (and only that one), and keep
// answering a well-behaved client.
func TestGarbageFrames(t *testing.T) {
	oversized := frame(header{kind: kindRequest, op: 1, id: 1}, nil)
	binary.LittleEndian.PutUint32(oversized[20:], 1<<31)
	reseal(oversized)
	badCRC := frame(header{kind: kindRequest, op: 1, id: 1}, []byte("abc"))
	badCRC[10] ^= 0xff

	for _, tc := range []struct {
		name   string
		input  []byte
		reason string
	}{
		{"garbage", []byte("GET / HTTP/1.1\r\nHost: weft.example\r\n\r\n"), "bad frame magic"},
		{"bad crc", badCRC, "checksum"},
		{"oversized", oversized, "too large"},
		{"short header", []byte("WEFT\x01\x01"), "truncated frame header"},
		{"truncated body", frame(header{kind: kindRequest, op: 1, id: 1}, make([]byte, 1000))[:HeaderSize+10], "truncated frame"},
		{"response kind", frame(header{kind: kindResponse, op: 1, id: 1}, nil), "bad frame kind"},
		{"good then bad", append(frame(header{kind: kindRequest, op: 1, id: 1}, []byte("x")), 0, 1, 2), "truncated frame header"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, lb := newTestTransport(t)
			l := serve(t, tr, echo)
			good := dial(t, tr, l.Addr())

			var before runtime.MemStats
			runtime.ReadMemStats(&before)

			nc, err := net.Dial("tcp", l.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			if _, err := nc.Write(tc.input); err != nil {
				t.Fatal(err)
			}
			_ = nc.(*net.TCPConn).CloseWrite() // so truncated input ends
			_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
			// The server closes the connection; whatever it answered
			// before (the good frame) is a well-formed response.
			got, err := io.ReadAll(nc)
			if err != nil {
				t.Fatalf("server did not close the connection: %v", err)
			}
			if len(got) > 0 {
				if _, err := decodeHeader(got); err != nil {
					t.Fatalf("server answered garbage with %q", got)
				}
			}

			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
				t.Fatalf("server allocated %d bytes for bad input", grew)
			}

			// The log names the reason and the peer.
			deadline := time.Now().Add(2 * time.Minute) // a hang guard
			for !strings.Contains(lb.String(), "protocol error") && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			log := lb.String()
			if !strings.Contains(log, tc.reason) || !strings.Contains(log, nc.LocalAddr().String()) {
				t.Fatalf("log lacks reason %q or remote %s:\n%s", tc.reason, nc.LocalAddr(), log)
			}

			if resp, err := good.Call(context.Background(), 1, []byte("still here")); err != nil || string(resp) != "still here" {
				t.Fatalf("good client after garbage: %q, %v", resp, err)
			}
		})
	}
}

// TestClientBadResponse has a fake server answer with a corrupt frame: the
// call fails with EIO and the connection is not used again.
func TestClientBadResponse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		var hb [HeaderSize]byte
		if _, err := io.ReadFull(nc, hb[:]); err != nil {
			return
		}
		resp := frame(header{kind: kindResponse, op: 1, id: 1}, []byte("x"))
		resp[3] ^= 1 // bad magic
		_, _ = nc.Write(resp)
		_, _ = io.Copy(io.Discard, nc)
	}()
	tr, lb := newTestTransport(t)
	c := dial(t, tr, ln.Addr().String())
	_, err = c.Call(context.Background(), 1)
	if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "magic") {
		t.Fatalf("got %v, want EIO for bad magic", err)
	}
	if !strings.Contains(lb.String(), "bad frame from server") {
		t.Fatalf("not logged:\n%s", lb)
	}
	if _, err := c.Call(context.Background(), 1); !errors.Is(err, syscall.EIO) {
		t.Fatalf("second call: %v", err)
	}
	_ = c.Close()
	<-done
}

// TestSlowReaderBackpressure: a client that sends requests but never reads
// responses must not make the server queue unbounded responses; closing the
// listener still ends everything.
func TestSlowReaderBackpressure(t *testing.T) {
	tr := NewTCPWith(TCPOptions{MaxInflight: 4, Logger: slog.New(slog.DiscardHandler)})
	calls := make(chan struct{}, 1000)
	big := bytes.Repeat([]byte("r"), 1<<20)
	l, err := tr.Listen("127.0.0.1:0", func(ctx context.Context, op uint16, req []byte) ([]byte, error) {
		calls <- struct{}{}
		return big, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := net.Dial("tcp", l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.(*net.TCPConn).SetReadBuffer(4096)
	go func() {
		for i := range 500 {
			if _, err := nc.Write(frame(header{kind: kindRequest, op: 1, id: uint64(i + 1)}, nil)); err != nil {
				return
			}
		}
	}()
	time.Sleep(300 * time.Millisecond)
	if n := len(calls); n >= 100 {
		t.Fatalf("server ran %d handlers for a client that reads nothing", n)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestProbeAnsweredByTransport: OpProbe gets an empty ok answer from the
// transport itself; the handler never sees it and nothing is logged.
func TestProbeAnsweredByTransport(t *testing.T) {
	tr, lb := newTestTransport(t)
	var mu sync.Mutex
	var ops []uint16
	l := serve(t, tr, func(ctx context.Context, op uint16, req []byte) ([]byte, error) {
		mu.Lock()
		ops = append(ops, op)
		mu.Unlock()
		return nil, fmt.Errorf("no such op %d: %w", op, syscall.ENOSYS)
	})
	c := dial(t, tr, l.Addr())
	for _, body := range [][]byte{nil, []byte("ignored")} {
		resp, err := c.Call(context.Background(), OpProbe, body)
		if err != nil || len(resp) != 0 {
			t.Fatalf("probe with %d body bytes: %q, %v; want an empty ok answer", len(body), resp, err)
		}
	}
	if _, err := c.Call(context.Background(), 1); !errors.Is(err, syscall.ENOSYS) {
		t.Fatalf("op 1: %v, want the handler's ENOSYS", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ops) != 1 || ops[0] != 1 {
		t.Errorf("handler saw ops %v, want [1]", ops)
	}
	if s := lb.String(); strings.Contains(s, "WARN") || strings.Contains(s, "ERROR") {
		t.Errorf("probes logged:\n%s", s)
	}
}

// TestHandlerWorkers: the server reuses handler goroutines across requests,
// and handlers that block (up to MaxInflight-1 of them) never hold up
// others on the same connection, whether or not an idle worker is left.
func TestHandlerWorkers(t *testing.T) {
	tr := NewTCPWith(TCPOptions{MaxInflight: 3, Logger: slog.New(slog.DiscardHandler)})
	var mu sync.Mutex
	gids := make(map[string]bool)
	blocked := make(chan struct{}, 10)
	l, err := tr.Listen("127.0.0.1:0", func(ctx context.Context, op uint16, req []byte) ([]byte, error) {
		var buf [64]byte
		id, _, _ := strings.Cut(string(buf[:runtime.Stack(buf[:], false)]), " [")
		mu.Lock()
		gids[id] = true
		mu.Unlock()
		if op == 2 {
			blocked <- struct{}{}
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return req, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			_ = l.Close()
		}
	}()
	c := dial(t, tr, l.Addr())
	ctx := context.Background()
	const n = 200
	for i := range n {
		want := fmt.Sprint(i)
		if resp, err := c.Call(ctx, 1, []byte(want)); err != nil || string(resp) != want {
			t.Fatalf("call %d: %q, %v", i, resp, err)
		}
	}
	mu.Lock()
	if len(gids) > n/4 {
		t.Errorf("%d sequential calls ran on %d goroutines, want handler goroutines reused", n, len(gids))
	}
	mu.Unlock()

	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := c.Call(ctx, 2)
			errs <- err
		}()
	}
	for range 2 {
		select {
		case <-blocked:
		case <-time.After(5 * time.Minute):
			t.Fatal("blocking handlers did not start")
		}
	}
	for i := range 50 {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := c.Call(cctx, 1, []byte("x"))
		cancel()
		if err != nil || string(resp) != "x" {
			t.Fatalf("call %d beside 2 blocked handlers (MaxInflight 3): %q, %v", i, resp, err)
		}
	}
	closed = true
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-errs; !errors.Is(err, syscall.EIO) {
			t.Errorf("blocked call after Close: %v, want EIO", err)
		}
	}
}

// TestHandlersInFlightTogether: a handler that blocks (a synced commit
// waiting for its group) never stops the server from reading the
// connection. Every handler waits until N requests of one connection are
// inside the handler at once, which only happens if the connection is read
// while the first ones block; with MaxInflight = N all slots are taken.
func TestHandlersInFlightTogether(t *testing.T) {
	for _, maxInflight := range []int{8, 256} {
		t.Run(fmt.Sprint("maxinflight=", maxInflight), func(t *testing.T) {
			const n = 8
			tr := NewTCPWith(TCPOptions{MaxInflight: maxInflight, Logger: slog.New(slog.DiscardHandler)})
			var mu sync.Mutex
			inside := 0
			all := make(chan struct{})
			l := serve(t, tr, func(ctx context.Context, op uint16, req []byte) ([]byte, error) {
				mu.Lock()
				inside++
				if inside == n {
					close(all)
				}
				mu.Unlock()
				select {
				case <-all:
					return req, nil
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			})
			c := dial(t, tr, l.Addr())
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			var wg sync.WaitGroup
			errs := make(chan error, n)
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					want := fmt.Sprint(i)
					resp, err := c.Call(ctx, 1, []byte(want))
					if err == nil && string(resp) != want {
						err = fmt.Errorf("call %d got %q", i, resp)
					}
					errs <- err
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					mu.Lock()
					defer mu.Unlock()
					t.Fatalf("%v (handlers inside at once: %d of %d)", err, inside, n)
				}
			}
		})
	}
}
