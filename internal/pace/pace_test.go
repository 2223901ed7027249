package pace

import (
	"context"
	"testing"
	"time"
)

// TestReserve: each range starts where the ranges before it end at the
// rate; unlimited and empty ranges start at once; a new rate forgets what
// the old one reserved. It computes reservations from a given clock, so it
// asserts no wall-clock time.
func TestReserve(t *testing.T) {
	now := time.Unix(1000, 0)
	p := New(1 << 20) // 1 MiB/s
	for i, want := range []time.Duration{0, time.Second, 2 * time.Second} {
		if got := p.reserve(now, 1<<20).Sub(now); got != want {
			t.Fatalf("range %d starts after %v, want %v", i, got, want)
		}
	}
	if got := p.reserve(now, 0); !got.Equal(now) {
		t.Fatalf("an empty range waits until %v", got)
	}
	// Later than everything reserved: starts at once.
	later := now.Add(time.Hour)
	if got := p.reserve(later, 512<<10); !got.Equal(later) {
		t.Fatalf("a range after an idle hour starts at %v, want %v", got, later)
	}
	if got := p.reserve(later, 1).Sub(later); got != 500*time.Millisecond {
		t.Fatalf("the range after half a MiB starts after %v", got)
	}
	p.Set(0)
	if got := p.reserve(later, 1<<30); !got.Equal(later) || p.Rate() != 0 {
		t.Fatalf("unlimited: range starts at %v, rate %d", got, p.Rate())
	}
	p.Set(2 << 20)
	if got := p.reserve(later, 2<<20); !got.Equal(later) {
		t.Fatalf("after a new rate the first range starts at %v", got)
	}
}

// TestWaitCancelled: Wait returns ctx's error when ctx ends first.
func TestWaitCancelled(t *testing.T) {
	p := New(1) // one byte per second
	ctx, cancel := context.WithCancel(context.Background())
	if err := p.Wait(ctx, 1); err != nil { // the first range starts at once
		t.Fatal(err)
	}
	cancel()
	if err := p.Wait(ctx, 1<<20); err == nil {
		t.Fatal("Wait with an ended context returned nil")
	}
}
