package transport

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestResponseBuffer: an ok response that fits is read into the caller's
// buffer; a longer one and an error response come in fresh memory.
func TestResponseBuffer(t *testing.T) {
	tr, _ := newTestTransport(t)
	l := serve(t, tr, func(ctx context.Context, op uint16, req []byte) ([]byte, error) {
		if op == 2 {
			return nil, syscall.ENOENT
		}
		return bytes.Repeat([]byte{byte(op)}, len(req)), nil
	})
	c := dial(t, tr, l.Addr())
	for _, tc := range []struct {
		name    string
		op      uint16
		n, dst  int
		aliases bool
	}{
		{"fits", 7, 100 << 10, 128 << 10, true},
		{"exact", 8, 4096, 4096, true},
		{"too long", 9, 5000, 4096, false},
		{"empty", 10, 0, 16, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := make([]byte, tc.dst)
			got, err := c.Call(WithResponseBuffer(context.Background(), dst), tc.op, make([]byte, tc.n))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, bytes.Repeat([]byte{byte(tc.op)}, tc.n)) {
				t.Fatalf("got %d bytes, wrong content", len(got))
			}
			if aliased := len(got) > 0 && &got[0] == &dst[0]; aliased != tc.aliases {
				t.Fatalf("response aliases the buffer: %v, want %v", aliased, tc.aliases)
			}
		})
	}
	dst := make([]byte, 64)
	_, err := c.Call(WithResponseBuffer(context.Background(), dst), 2, []byte("x"))
	if !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("error response: %v", err)
	}
	if !bytes.Equal(dst, make([]byte, 64)) {
		t.Fatal("error message written into the response buffer")
	}
}

// TestResponseBufferAbandoned: a call abandoned before its response comes
// leaves its buffer alone; the connection keeps working.
func TestResponseBufferAbandoned(t *testing.T) {
	tr, _ := newTestTransport(t)
	release := make(chan struct{})
	l := serve(t, tr, func(ctx context.Context, op uint16, req []byte) ([]byte, error) {
		if op == 1 {
			<-release
		}
		return bytes.Repeat([]byte{0xAB}, 1000), nil
	})
	c := dial(t, tr, l.Addr())
	dst := make([]byte, 1000)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := c.Call(WithResponseBuffer(ctx, dst), 1); !errors.Is(err, syscall.ETIMEDOUT) {
		t.Fatalf("abandoned call: %v", err)
	}
	close(release)
	got, err := c.Call(context.Background(), 3)
	if err != nil || len(got) != 1000 {
		t.Fatalf("next call: %d bytes, %v", len(got), err)
	}
	if !bytes.Equal(dst, make([]byte, 1000)) {
		t.Fatal("late response written into an abandoned call's buffer")
	}
}

// TestAfterResponse: hooks run after the response is written, and a body
// handed back with DoneWithRequest is reused for later requests.
func TestAfterResponse(t *testing.T) {
	tr, _ := newTestTransport(t)
	var hooks atomic.Int32
	var prev atomic.Pointer[byte]
	var reused atomic.Int32
	l := serve(t, tr, func(ctx context.Context, op uint16, req []byte) ([]byte, error) {
		if p := prev.Load(); p != nil && p == &req[0] {
			reused.Add(1)
		}
		prev.Store(&req[0])
		DoneWithRequest(ctx)
		resp := append([]byte(nil), req[:10]...)
		if !AfterResponse(ctx, func() { hooks.Add(1) }) {
			t.Error("AfterResponse refused a transport context")
		}
		return resp, nil
	})
	c := dial(t, tr, l.Addr())
	body := make([]byte, 256<<10)
	const calls = 20
	for i := range calls {
		body[0] = byte(i)
		got, err := c.Call(context.Background(), 1, body)
		if err != nil || got[0] != byte(i) {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	deadline := time.Now().Add(2 * time.Minute) // a hang guard
	for hooks.Load() < calls && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := hooks.Load(); n != calls {
		t.Fatalf("%d hooks ran for %d responses", n, calls)
	}
	if reused.Load() == 0 {
		t.Fatal("request bodies handed back are never reused")
	}
	if AfterResponse(context.Background(), func() {}) {
		t.Fatal("AfterResponse accepted a context not from the transport")
	}
}

// TestSendFile: a handler's file segment follows its body on the wire,
// read by the client into its buffers (head and body) or in one piece; a
// file shorter than promised is padded with zeros, so the frame keeps its
// length and the connection its framing; SendFile outside a request does
// nothing.
func TestSendFile(t *testing.T) {
	data := make([]byte, 3<<20+123)
	for i := range data {
		data[i] = byte(i*7 + i>>12)
	}
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if SendFile(context.Background(), f, 0, 10) {
		t.Fatal("SendFile outside a request registered a segment")
	}
	tr, _ := newTestTransport(t)
	l := serve(t, tr, func(ctx context.Context, op uint16, req []byte) ([]byte, error) {
		off, n := int64(binary.LittleEndian.Uint64(req)), int(binary.LittleEndian.Uint64(req[8:]))
		if !SendFile(ctx, f, off, n) {
			return nil, syscall.ENOTSUP
		}
		if SendFile(ctx, f, 0, 1) {
			return nil, errors.New("a second segment was taken")
		}
		return []byte("HEAD"), nil
	})
	c := dial(t, tr, l.Addr())
	req := func(off, n int) []byte {
		b := binary.LittleEndian.AppendUint64(nil, uint64(off))
		return binary.LittleEndian.AppendUint64(b, uint64(n))
	}
	for _, tc := range []struct{ off, n int }{{0, 4096}, {4096, 1 << 20}, {12345, 2<<20 + 7}, {len(data) - 100, 100}} {
		rb := &ResponseBuffers{Head: make([]byte, 4), Body: make([]byte, tc.n+10)}
		got, err := c.Call(WithResponseBuffers(context.Background(), rb), 1, req(tc.off, tc.n))
		if err != nil {
			t.Fatalf("%d+%d: %v", tc.off, tc.n, err)
		}
		if !rb.Fit || string(rb.Head) != "HEAD" || &got[0] != &rb.Body[0] || !bytes.Equal(got, data[tc.off:tc.off+tc.n]) {
			t.Fatalf("%d+%d: fit %v head %q, %d bytes, not the file's", tc.off, tc.n, rb.Fit, rb.Head, len(got))
		}
		got, err = c.Call(context.Background(), 1, req(tc.off, tc.n))
		if err != nil || string(got[:4]) != "HEAD" || !bytes.Equal(got[4:], data[tc.off:tc.off+tc.n]) {
			t.Fatalf("%d+%d in one piece: %v, %d bytes", tc.off, tc.n, err, len(got))
		}
	}
	// A body that does not fit the buffers comes whole, in fresh memory.
	rb := &ResponseBuffers{Head: make([]byte, 4), Body: make([]byte, 10)}
	got, err := c.Call(WithResponseBuffers(context.Background(), rb), 1, req(0, 100))
	if err != nil || rb.Fit || !bytes.Equal(got[4:], data[:100]) {
		t.Fatalf("too long for the buffers: %v, fit %v", err, rb.Fit)
	}
	// Past the end of the file: zeros, and the connection still serves.
	got, err = c.Call(context.Background(), 1, req(len(data)-10, 200<<10))
	if err != nil || len(got) != 4+200<<10 || !bytes.Equal(got[4:14], data[len(data)-10:]) || !bytes.Equal(got[14:], make([]byte, 200<<10-10)) {
		t.Fatalf("a file shorter than promised: %v, %d bytes", err, len(got))
	}
	if got, err := c.Call(context.Background(), 1, req(0, 10)); err != nil || !bytes.Equal(got[4:], data[:10]) {
		t.Fatalf("after a padded segment: %v", err)
	}
}
