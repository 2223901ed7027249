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
// leader, and holds the appends to the other, merged into one; once sent,
// every member applies everything. When the follower in the quorum dies,
// proposals still commit (at the laggard's pace at first), and the
// laggard takes its place. Nothing here depends on how fast the machine
// is: the merged append leaves when the test sends what is due in two
// hours, and the swap is waited for.
func TestLaggardAppendsMerged(t *testing.T) {
	counters := map[uint64]*appendCounter{}
	c := newCluster(t, 3, func(cfg *Config) {
		cfg.TickInterval = time.Hour // a clock whose ticks never come: the test ticks
		cfg.LaggardDelay = time.Hour
		ac := &appendCounter{Transport: cfg.Transport, sent: map[uint64]int{}}
		counters[cfg.ID] = ac
		cfg.Transport = ac
	})
	lead := c.waitLeader(c.ids)
	// onLeader runs f on the leader's node goroutine and waits for it.
	onLeader := func(f func(n *Node)) {
		t.Helper()
		n := c.nodes[lead]
		done := make(chan struct{})
		if err := n.do(context.Background(), func() { f(n); close(done) }); err != nil {
			t.Fatal(err)
		}
		<-done
	}
	counters[lead].take()
	const rounds = 60
	for i := range rounds {
		if _, err := c.propose(lead, fmt.Sprintf("k%d=%d", i, i)); err != nil {
			t.Fatal(err)
		}
	}
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
	held := 0
	onLeader(func(n *Node) {
		if h := n.heldApps[slow]; h != nil {
			held = len(h.m.GetEntries())
		}
	})
	t.Logf("appends with entries: %d to the follower in the quorum, %d to the laggard; %d entries held for it in one", sent[fast], sent[slow], held)
	// The laggard may have been probed with an append or two while the
	// leader learned where its log ends.
	if sent[fast] < rounds || sent[slow] > 2 || held < rounds-2 {
		t.Fatalf("appends with entries: %d to %d, %d to laggard %d, %d entries held for it; want one a proposal to the first, the rest held in one for the laggard",
			sent[fast], fast, sent[slow], slow, held)
	}
	onLeader(func(n *Node) { n.sendDueAppends(time.Now().Add(2 * time.Hour)) })

	// Each follower applies everything. A restarted one needs ticks (the
	// leader's heartbeats find it), a laggard time.
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

	// The follower in the quorum dies: proposals still commit, each
	// within the (now short) delay, and the laggard takes its place once
	// the dead one's Match has not moved for twice the delay.
	onLeader(func(n *Node) { n.cfg.LaggardDelay = time.Millisecond })
	c.crash(fast)
	deadline := time.Now().Add(time.Minute) // against hangs only
	for i := 0; laggardOf(t, c.nodes[lead])[slow]; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("follower %d still a laggard after %d proposals with follower %d dead", slow, i, fast)
		}
		if _, err := c.propose(lead, fmt.Sprintf("after%d=%d", i, i)); err != nil {
			t.Fatal(err)
		}
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
