package client

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/weft-fs/weft/proto"
)

// fakePinner answers PinOpens with done and err, counting the calls.
type fakePinner struct {
	calls int
	done  []bool
	err   error
}

func (f *fakePinner) PinOpens(_ context.Context, pins []proto.OpenHandle) ([]bool, error) {
	f.calls++
	if f.err != nil {
		return nil, f.err
	}
	return f.done[:len(pins)], nil
}

// TestPinOutcomes: what a pin's answer does to local handles (cached.go).
// Counted: they become the session's handles, released to the server. A
// refusal of the whole request before counting, or of an entry: they stay
// local, released silently, and are pinned again next time. No answer:
// the leader may have counted them, so they are neither pinned again nor
// released (either could drop another handle's count).
func TestPinOutcomes(t *testing.T) {
	s := &session{c: &Client{cfg: Config{Timeout: time.Second}}, registered: true,
		handles: map[proto.Ino]*proto.OpenHandle{}, local: map[proto.Ino]*localOpens{}}
	pin := func(fp *fakePinner, inos ...proto.Ino) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.pinLocked(context.Background(), fp, inos)
	}

	gen, g := s.openedLocal(5)
	fp := &fakePinner{err: syscall.ETIMEDOUT}
	if err := pin(fp, 5); err == nil {
		t.Fatal("a pin without an answer reported no error")
	}
	if !g.uncertain || s.local[5] != nil {
		t.Fatalf("after a pin without an answer: uncertain %v, still local %v", g.uncertain, s.local[5] != nil)
	}
	if err := pin(fp, 5); err != nil || fp.calls != 1 {
		t.Fatalf("an uncertain handle was pinned again (%d calls, %v)", fp.calls, err)
	}
	if s.released(5, gen, g) {
		t.Fatal("an uncertain handle's release would be sent")
	}

	gen, g = s.openedLocal(6)
	for _, e := range []error{syscall.ESTALE, syscall.EINVAL, syscall.EAGAIN} {
		if err := pin(&fakePinner{err: e}, 6); err == nil {
			t.Fatalf("refusal %v reported no error", e)
		}
		if g.uncertain || g.pinned || s.local[6] != g {
			t.Fatalf("after a refusal (%v) before counting: uncertain %v pinned %v local %v", e, g.uncertain, g.pinned, s.local[6] == g)
		}
	}
	if err := pin(&fakePinner{done: []bool{false}}, 6); err != nil || g.pinned || s.local[6] != g {
		t.Fatalf("a refused entry: err %v, pinned %v, local %v", err, g.pinned, s.local[6] == g)
	}
	if err := pin(&fakePinner{done: []bool{true}}, 6); err != nil || !g.pinned || s.local[6] != nil || s.handles[6] == nil || s.handles[6].Count != 1 {
		t.Fatalf("a counted pin: err %v, pinned %v, local %v, handles %+v", err, g.pinned, s.local[6] != nil, s.handles[6])
	}
	if !s.released(6, gen, g) || s.handles[6] != nil {
		t.Fatalf("a pinned handle's release is not sent, or its count kept: %+v", s.handles[6])
	}

	gen, g = s.openedLocal(7)
	if s.released(7, gen, g) || s.local[7] != nil {
		t.Fatal("an unpinned local handle's release would be sent, or it stayed counted")
	}
}
