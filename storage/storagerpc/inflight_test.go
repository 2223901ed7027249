package storagerpc

import (
	"context"
	"errors"
	"testing"
	"time"
)

func (f *inflight) waiters() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.waiting
}

// waitCond polls cond with a generous bound against hangs.
func waitCond(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within a minute", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestInflightBound: with a bound of 2, a third request to one server
// waits (another server's does not) until a slot frees; lifting the bound
// lets waiters go at once; a waiter gives up with its ctx.
func TestInflightBound(t *testing.T) {
	ctx := context.Background()
	var f inflight
	if held, err := f.acquire(ctx, "a"); held || err != nil {
		t.Fatalf("without a bound: held %v, %v", held, err)
	}
	f.set(2)
	for range 2 {
		if held, err := f.acquire(ctx, "a"); !held || err != nil {
			t.Fatalf("within the bound: held %v, %v", held, err)
		}
	}
	if held, err := f.acquire(ctx, "b"); !held || err != nil {
		t.Fatalf("another server: held %v, %v", held, err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := f.acquire(ctx, "a")
		got <- err
	}()
	waitCond(t, "a third request waits", func() bool { return f.waiters() == 1 })
	f.release("a")
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if f.used["a"] != 2 || f.peak["a"] != 2 {
		t.Fatalf("used %v, peak %v", f.used, f.peak)
	}
	// A waiter goes once the bound is lifted.
	go func() {
		_, err := f.acquire(ctx, "a")
		got <- err
	}()
	waitCond(t, "a request waits", func() bool { return f.waiters() == 1 })
	f.set(0)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	// A waiter gives up with its ctx and holds nothing.
	f.set(1)
	cctx, cancel := context.WithCancel(ctx)
	go func() {
		_, err := f.acquire(cctx, "a")
		got <- err
	}()
	waitCond(t, "a request waits", func() bool { return f.waiters() == 1 })
	cancel()
	if err := <-got; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v", err)
	}
	if f.waiters() != 0 || f.used["a"] != 3 { // the two first, and the one let go by the lifted bound
		t.Fatalf("after the cancelled waiter: waiting %d, used %v", f.waiters(), f.used)
	}
}
