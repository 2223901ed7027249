package raftlog

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
)

// appendCounter counts the appends with entries sent through it, per
// follower.
type appendCounter struct {
	Transport
	mu   sync.Mutex
	sent map[uint64]int
}

func (t *appendCounter) Send(msgs []*pb.Message) {
	t.mu.Lock()
	for _, m := range msgs {
		if m.GetType() == pb.MessageType_MsgApp && len(m.GetEntries()) > 0 {
			t.sent[m.GetTo()]++
		}
	}
	t.mu.Unlock()
	t.Transport.Send(msgs)
}

func (t *appendCounter) take() map[uint64]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.sent
	t.sent = map[uint64]int{}
	return s
}

// laggardOf returns the followers node lead holds appends back for.
func laggardOf(t *testing.T, n *Node) map[uint64]bool {
	t.Helper()
	got := make(chan map[uint64]bool, 1)
	if err := n.do(context.Background(), func() {
		m := map[uint64]bool{}
		for id, lag := range n.laggards {
			if lag {
				m[id] = true
			}
		}
		got <- m
	}); err != nil {
		t.Fatal(err)
	}
	return <-got
}

// TestLaggardAppendsMerged: in a group of three the leader sends each
// proposal's append at once to one follower, which commits it with the
// leader, and the appends to the other merged, a few per laggard delay;
// every member still applies everything. When the follower in the
// quorum dies, proposals still commit (at the laggard's pace at first),
// and the laggard takes its place.
func TestLaggardAppendsMerged(t *testing.T) {
	counters := map[uint64]*appendCounter{}
	c := newCluster(t, 3, func(cfg *Config) {
		cfg.TickInterval = time.Hour // a clock whose ticks never come: the test ticks
		cfg.LaggardDelay = 50 * time.Millisecond
		ac := &appendCounter{Transport: cfg.Transport, sent: map[uint64]int{}}
		counters[cfg.ID] = ac
		cfg.Transport = ac
	})
	lead := c.waitLeader(c.ids)
	const rounds = 60
	for i := range rounds {
		if _, err := c.propose(lead, fmt.Sprintf("k%d=%d", i, i)); err != nil {
			t.Fatal(err)
		}
	}
	// Each follower applies everything: the laggard within the delay.
	// A restarted one needs ticks (the leader's heartbeats find it), a
	// laggard time.
	appliedAll := func() {
		t.Helper()
		commit := c.nodes[lead].Status().Commit
		deadline := time.Now().Add(time.Minute) // against hangs only
		for _, id := range c.ids {
			for c.nodes[id].Status().Applied < commit {
				if time.Now().After(deadline) {
					t.Fatalf("node %d never applied index %d; %s", id, commit, c.statuses())
				}
				c.tick()
				time.Sleep(time.Millisecond)
			}
		}
		c.checkSame(c.ids)
	}
	appliedAll()
	lag := laggardOf(t, c.nodes[lead])
	if len(lag) != 1 {
		t.Fatalf("laggards %v; want one of the two followers", lag)
	}
	var fast, slow uint64
	for _, id := range others(c.ids, lead) {
		if lag[id] {
			slow = id
		} else {
			fast = id
		}
	}
	sent := counters[lead].take()
	t.Logf("appends with entries: %d to the follower in the quorum, %d to the laggard", sent[fast], sent[slow])
	if sent[fast] < rounds || sent[slow] > sent[fast]/3 {
		t.Fatalf("appends with entries: %d to %d, %d to laggard %d; want one a proposal to the first, a third of that at most to the laggard",
			sent[fast], fast, sent[slow], slow)
	}

	// The follower in the quorum dies: proposals still commit, and the
	// laggard takes its place.
	c.crash(fast)
	for i := range rounds {
		if _, err := c.propose(lead, fmt.Sprintf("after%d=%d", i, i)); err != nil {
			t.Fatal(err)
		}
		if i > 5 && !laggardOf(t, c.nodes[lead])[slow] {
			break
		}
	}
	if laggardOf(t, c.nodes[lead])[slow] {
		t.Fatalf("follower %d still a laggard after %d proposals with follower %d dead", slow, rounds, fast)
	}
	counters[lead].take()
	for i := range 20 {
		if _, err := c.propose(lead, fmt.Sprintf("late%d=%d", i, i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := counters[lead].take()[slow]; n < 20 {
		t.Fatalf("%d appends with entries to %d, the only follower left, for 20 proposals; want one each", n, slow)
	}
	c.start(fast)
	appliedAll()
}
