package meta

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestReadBarrier: concurrent reads share rounds, and a read that arrives
// while a round is under way is answered only by a round issued after it
// arrived (never by the one already in flight).
func TestReadBarrier(t *testing.T) {
	var b readBarrier
	var issued atomic.Int64
	release := make(chan struct{})
	started := make(chan int64, 16)
	issue := func(ctx context.Context) error {
		n := issued.Add(1)
		started <- n
		<-release
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // against hangs only
	defer cancel()

	// Read A starts round 1 and waits in it.
	doneA := make(chan error, 1)
	go func() { doneA <- b.wait(ctx, issue) }()
	if n := <-started; n != 1 {
		t.Fatalf("first round is %d", n)
	}
	// Reads B1..B8 arrive while round 1 is in flight: they must not be
	// answered by it.
	var wg sync.WaitGroup
	var doneB atomic.Int64
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := b.wait(ctx, issue); err != nil {
				t.Error(err)
			}
			doneB.Add(1)
		}()
	}
	// Wait until all eight have joined the pending round.
	for {
		b.mu.Lock()
		joined := 0
		if b.next != nil {
			joined = b.next.reads
		}
		b.mu.Unlock()
		if joined == 8 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	release <- struct{}{} // round 1 confirms
	if err := <-doneA; err != nil {
		t.Fatal(err)
	}
	if n := <-started; n != 2 {
		t.Fatalf("second round is %d", n)
	}
	if got := doneB.Load(); got != 0 {
		t.Fatalf("%d reads that arrived during round 1 were answered by it", got)
	}
	release <- struct{}{} // round 2 confirms: every B read
	wg.Wait()
	if n := issued.Load(); n != 2 {
		t.Fatalf("%d rounds for 9 reads, want 2", n)
	}
}
