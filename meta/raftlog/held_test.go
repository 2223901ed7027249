package raftlog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
)

// appWatch records, per sender and recipient, the payloads of the entries
// of every MsgApp a node sends.
type appWatch struct {
	mu   sync.Mutex
	apps map[[2]uint64][][]string
}

type watchedTransport struct {
	Transport
	w    *appWatch
	from uint64
}

func (t watchedTransport) Send(msgs []*pb.Message) {
	t.w.mu.Lock()
	for _, m := range msgs {
		if m.GetType() != pb.MessageType_MsgApp || len(m.GetEntries()) == 0 {
			continue
		}
		var ps []string
		for _, e := range m.GetEntries() {
			if len(e.GetData()) > 8 {
				ps = append(ps, string(e.GetData()[8:]))
			}
		}
		k := [2]uint64{t.from, m.GetTo()}
		t.w.apps[k] = append(t.w.apps[k], ps)
	}
	t.w.mu.Unlock()
	t.Transport.Send(msgs)
}

// holdWrites makes node n's leader act as if its log write were under
// way (the appender's pending count), so that proposals are held; the
// returned func ends that and wakes the node.
func holdWrites(n *Node) (release func()) {
	n.ap.pending.Add(1)
	return func() {
		n.ap.pending.Add(-1)
		select {
		case n.ap.kick <- struct{}{}:
		default:
		}
	}
}

// waitHeld waits until n holds want proposals.
func waitHeld(t *testing.T, n *Node, want int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute) // against hangs only
	for {
		ch := make(chan int, 1)
		if err := n.do(context.Background(), func() { ch <- len(n.held) }); err != nil {
			t.Fatal(err)
		}
		got := <-ch
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the leader holds %d proposals, want %d", got, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestHeldProposals: proposals that arrive while the leader's log write
// is under way are held, and then go to raft together: one append to
// each follower carries them all, in the order they were proposed, and
// each proposer gets its own result.
func TestHeldProposals(t *testing.T) {
	w := &appWatch{apps: map[[2]uint64][][]string{}}
	c := newCluster(t, 3, func(cfg *Config) {
		cfg.Transport = watchedTransport{Transport: cfg.Transport, w: w, from: cfg.ID}
	})
	lead := c.waitLeader(c.ids)
	n := c.nodes[lead]
	release := holdWrites(n)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // against hangs only
	defer cancel()
	const k = 5
	var results []<-chan asyncResult
	var want []string
	for i := range k {
		p := fmt.Sprintf("held%d=%d", i, i)
		want = append(want, p)
		results = append(results, c.proposeAsync(ctx, lead, p))
		waitHeld(t, n, i+1) // in this order
	}
	w.mu.Lock()
	for key, apps := range w.apps {
		for _, ps := range apps {
			if slices.ContainsFunc(ps, func(p string) bool { return strings.HasPrefix(p, "held") }) {
				t.Fatalf("%v: a held proposal was sent before the write ended: %v", key, ps)
			}
		}
	}
	w.mu.Unlock()
	release()
	for i, r := range results {
		res := <-r
		if res.err != nil {
			t.Fatalf("proposal %d: %v", i, res.err)
		}
	}
	c.waitApplied(c.ids, n.Status().Commit)
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, f := range others(c.ids, lead) {
		var carrying [][]string
		for _, ps := range w.apps[[2]uint64{lead, f}] {
			if slices.ContainsFunc(ps, func(p string) bool { return strings.HasPrefix(p, "held") }) {
				carrying = append(carrying, ps)
			}
		}
		if len(carrying) != 1 || !slices.Equal(carrying[0], want) {
			t.Fatalf("appends to %d with the held proposals: %v, want one with %v", f, carrying, want)
		}
	}
	for _, id := range c.ids {
		sm := c.sm[id]
		sm.mu.Lock()
		var got []string
		for _, o := range sm.order {
			if _, p, _ := strings.Cut(o, ":"); strings.HasPrefix(p, "held") {
				got = append(got, p)
			}
		}
		sm.mu.Unlock()
		if !slices.Equal(got, want) {
			t.Fatalf("node %d applied %v, want %v", id, got, want)
		}
	}
}

// TestHeldProposalsLeaderChange: proposals held when the leader loses
// its leadership are failed as not proposed (ErrNotLeader: safe to
// retry) and are never applied anywhere.
func TestHeldProposalsLeaderChange(t *testing.T) {
	c := newCluster(t, 3, nil)
	lead := c.waitLeader(c.ids)
	n := c.nodes[lead]
	release := holdWrites(n)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // against hangs only
	defer cancel()
	r1 := c.proposeAsync(ctx, lead, "lost1=1")
	r2 := c.proposeAsync(ctx, lead, "lost2=2")
	waitHeld(t, n, 2)
	next := others(c.ids, lead)[0]
	if err := n.TransferLeadership(ctx, next); err != nil {
		t.Fatal(err)
	}
	c.waitStatus(lead, "the old leader steps down", func(s Status) bool { return !s.IsLeader && s.Leader == next })
	release()
	for _, r := range []<-chan asyncResult{r1, r2} {
		if res := <-r; !errors.Is(res.err, ErrNotLeader) {
			t.Fatalf("a proposal held across a change of leader: %v, %v; want ErrNotLeader", res.v, res.err)
		}
	}
	if _, err := c.propose(c.waitLeader(c.ids), "after=1"); err != nil {
		t.Fatal(err)
	}
	c.waitApplied(c.ids, c.nodes[next].Status().Commit)
	for _, id := range c.ids {
		sm := c.sm[id]
		sm.mu.Lock()
		_, a := sm.kv["lost1"]
		_, b := sm.kv["lost2"]
		sm.mu.Unlock()
		if a || b {
			t.Fatalf("node %d applied a proposal that was reported not proposed", id)
		}
	}
}
