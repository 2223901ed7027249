package meta

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weft-fs/weft/meta/raftlog"
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

// TestReadBarrierLease: after a round confirmed leadership, reads within
// the lease need no round while the member leads in the same term; a new
// term, a lost leadership, or the lease's end need a round again.
func TestReadBarrierLease(t *testing.T) {
	var st atomic.Pointer[raftlog.Status]
	st.Store(&raftlog.Status{Ready: true, IsLeader: true, Term: 3})
	b := readBarrier{lease: time.Hour, status: func() raftlog.Status { return *st.Load() }}
	var rounds atomic.Int64
	issue := func(context.Context) error { rounds.Add(1); return nil }
	read := func() {
		t.Helper()
		if err := b.wait(context.Background(), issue); err != nil {
			t.Fatal(err)
		}
	}
	read()
	for range 5 {
		read()
	}
	if n := rounds.Load(); n != 1 {
		t.Fatalf("%d rounds for 6 reads within the lease, want 1", n)
	}
	st.Store(&raftlog.Status{Ready: true, IsLeader: true, Term: 4}) // leader again, in a new term
	read()
	if n := rounds.Load(); n != 2 {
		t.Fatalf("a read in a new term took %d rounds in all, want 2", n)
	}
	st.Store(&raftlog.Status{Term: 4}) // not leader: no lease (the round fails elsewhere)
	read()
	if n := rounds.Load(); n != 3 {
		t.Fatalf("a read on a member that does not lead: %d rounds in all, want 3", n)
	}
	st.Store(&raftlog.Status{Ready: true, IsLeader: true, Term: 4})
	b.mu.Lock()
	b.leaseUntil = time.Now().Add(-time.Second) // the lease ran out
	b.mu.Unlock()
	read()
	if n := rounds.Load(); n != 4 {
		t.Fatalf("a read after the lease: %d rounds in all, want 4", n)
	}
}
