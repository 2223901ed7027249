package raftlog

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
)

// TestAnsweredNetwork runs the node tests again with every message
// delivered as an answered call (the follower's acknowledgements, votes
// and heartbeat responses travel back in the answer, not as messages of
// their own): elections, replication, a crashed and a partitioned leader,
// a crash of all, snapshots and linearizable reads hold the same way.
func TestAnsweredNetwork(t *testing.T) {
	answeredNetworks.Store(true)
	defer answeredNetworks.Store(false)
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"ElectAndReplicate", TestElectAndReplicate},
		{"LeaderCrash", TestLeaderCrash},
		{"PartitionedLeader", TestPartitionedLeader},
		{"CrashAllRecovers", TestCrashAllRecovers},
		{"SnapshotCatchUp", TestSnapshotCatchUp},
		{"ReadIndex", TestReadIndex},
	} {
		t.Run(tc.name, tc.test)
	}
}

// recorder is a Transport that keeps what it is given.
type recorder struct {
	mu   sync.Mutex
	sent []*pb.Message
}

func (r *recorder) Send(msgs []*pb.Message) {
	r.mu.Lock()
	r.sent = append(r.sent, msgs...)
	r.mu.Unlock()
}

// TestStepAnswered: a follower handed a leader's append with stepAnswered
// acknowledges it in the answer, once the entry is in its log, and sends
// the leader nothing of its own; a heartbeat is answered at once.
func TestStepAnswered(t *testing.T) {
	c := newCluster(t, 1, nil)
	c.stopAll()
	rec := &recorder{}
	st, err := OpenStorage("log2", StorageOptions{FS: c.fs[1]})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// A member of a group of three whose leader, node 2, is in term 2.
	n, err := NewNode(Config{ID: 1, Peers: []uint64{1, 2, 3}, Storage: st, SM: newKV(), Transport: rec})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // against hangs only
	defer cancel()
	// The bootstrap's entries: one configuration change per member, in
	// term 1 (not all written to the log yet: raft holds them unstable).
	const last = uint64(3)
	app := &pb.Message{Type: pb.MessageType_MsgApp.Enum(), From: new(uint64(2)), To: new(uint64(1)), Term: new(uint64(2)),
		Index: new(last), LogTerm: new(uint64(1)), Commit: new(last),
		Entries: []*pb.Entry{{Term: new(uint64(2)), Index: new(last + 1), Data: []byte("x")}}}
	a, err := n.stepAnswered(ctx, 2, []*pb.Message{app})
	if err != nil {
		t.Fatal(err)
	}
	answer, err := n.awaitAnswer(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	var acked bool
	for _, m := range answer {
		if m.GetType() == pb.MessageType_MsgAppResp && m.GetTo() == 2 && !m.GetReject() && m.GetIndex() == last+1 {
			acked = true
		}
	}
	if !acked {
		t.Fatalf("answer to the append: %v, want an acknowledgement of index %d", answer, last+1)
	}
	if got, _ := st.LastIndex(); got != last+1 {
		t.Fatalf("acknowledged index %d with the log ending at %d", last+1, got)
	}
	hb := &pb.Message{Type: pb.MessageType_MsgHeartbeat.Enum(), From: new(uint64(2)), To: new(uint64(1)), Term: new(uint64(2)), Commit: new(last + 1)}
	if a, err = n.stepAnswered(ctx, 2, []*pb.Message{hb}); err != nil {
		t.Fatal(err)
	}
	if answer, err = n.awaitAnswer(ctx, a); err != nil || len(answer) != 1 || answer[0].GetType() != pb.MessageType_MsgHeartbeatResp {
		t.Fatalf("answer to a heartbeat: %v, %v", answer, err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, m := range rec.sent {
		if m.GetTo() == 2 {
			t.Fatalf("the follower also sent the leader %v", m)
		}
	}
}

// TestCallOrder: answered calls from one member queue their messages in
// the order sent even when they arrive out of order; a call of a newer
// epoch releases the calls waiting for one that never came.
func TestCallOrder(t *testing.T) {
	o := newCallOrder()
	ctx := context.Background()
	var mu sync.Mutex
	var order []uint64
	var wg sync.WaitGroup
	queue := func(epoch, seq uint64) {
		defer wg.Done()
		o.await(ctx, epoch, seq)
		mu.Lock()
		order = append(order, seq)
		mu.Unlock()
		o.done(epoch, seq)
	}
	wg.Add(1)
	queue(7, 1) // the first call of epoch 7
	for _, seq := range []uint64{4, 3, 2} {
		wg.Add(1)
		go queue(7, seq)
	}
	wg.Wait()
	if want := []uint64{1, 2, 3, 4}; !equalU64(order, want) {
		t.Fatalf("queued in order %v, want %v", order, want)
	}

	// Calls 5 and 6 are lost: 7 waits (it cannot go ahead before the
	// test goroutine queues call 8) until the sender's next epoch comes.
	order = nil
	wg.Add(2)
	go queue(7, 7)
	queue(8, 8)
	wg.Wait()
	if len(order) != 2 || order[0] != 8 {
		t.Fatalf("queued %v, want the new epoch's call 8 first, then the released 7", order)
	}
}

func equalU64(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestSnapshotNotAnswered: a snapshot message to a member whose call is
// being answered still goes over the transport (its files are streamed
// first; in an answer, the member would drop it and raft would wait for
// the stream's outcome forever), while other messages to it join the
// answer.
func TestSnapshotNotAnswered(t *testing.T) {
	a := &answer{from: 3, done: make(chan struct{})}
	snap := &pb.Message{Type: pb.MessageType_MsgSnap.Enum(), To: new(uint64(3))}
	app := &pb.Message{Type: pb.MessageType_MsgApp.Enum(), To: new(uint64(3))}
	other := &pb.Message{Type: pb.MessageType_MsgApp.Enum(), To: new(uint64(2))}
	rest := routeAnswers([]*answer{a}, []*pb.Message{snap, app, other})
	if len(rest) != 2 || rest[0] != snap || rest[1] != other || len(a.msgs) != 1 || a.msgs[0] != app {
		t.Fatalf("routed: rest %v, answer %v", rest, a.msgs)
	}
}

// TestHoldCommitOnly: a hand-ticked leader (no clock) holds back, while
// proposals are held, the empty appends (commit index only) to followers
// that replicate normally, and keeps those to a follower being probed,
// appends with entries, and other messages.
func TestHoldCommitOnly(t *testing.T) {
	c := newCluster(t, 3, nil)
	lead := c.waitLeader(c.ids)
	if _, err := c.propose(lead, "a=1"); err != nil {
		t.Fatal(err)
	}
	c.settle()
	fs := others(c.ids, lead)
	replicating, probed := fs[0], fs[1]
	// A report of an unreachable follower makes raft probe it.
	if err := c.nodes[lead].do(context.Background(), func() { c.nodes[lead].rn.ReportUnreachable(probed) }); err != nil {
		t.Fatal(err)
	}
	c.settle()
	empty := func(to uint64) *pb.Message {
		return &pb.Message{Type: pb.MessageType_MsgApp.Enum(), To: new(to), Commit: new(uint64(9))}
	}
	withEntries := &pb.Message{Type: pb.MessageType_MsgApp.Enum(), To: new(replicating), Entries: []*pb.Entry{{Data: []byte("x")}}}
	hb := &pb.Message{Type: pb.MessageType_MsgHeartbeat.Enum(), To: new(replicating)}
	toReplicating, toProbed := empty(replicating), empty(probed)
	got := make(chan []*pb.Message, 2)
	n := c.nodes[lead]
	if err := n.do(context.Background(), func() {
		// Nothing held: a hand-ticked leader sends them all.
		got <- n.holdAppends([]*pb.Message{toReplicating, toProbed})
		n.held = append(n.held, heldProposal{})
		got <- n.holdAppends([]*pb.Message{toReplicating, withEntries, toProbed, hb})
		n.held = n.held[:0]
	}); err != nil {
		t.Fatal(err)
	}
	if kept := <-got; len(kept) != 2 {
		t.Fatalf("nothing held: kept %v; want both", kept)
	}
	kept := <-got
	if len(kept) != 3 || kept[0] != withEntries || kept[1] != toProbed || kept[2] != hb {
		t.Fatalf("kept %v; want the append with entries, the probe of %d and the heartbeat", kept, probed)
	}
}

// countingTransport counts the appends without entries sent through it.
type countingTransport struct {
	Transport
	empty *atomic.Int64
}

func (t countingTransport) Send(msgs []*pb.Message) {
	for _, m := range msgs {
		if m.GetType() == pb.MessageType_MsgApp && len(m.GetEntries()) == 0 {
			t.empty.Add(1)
		}
	}
	t.Transport.Send(msgs)
}

// TestCommitNoticeHeldBack: a leader with a clock holds back the append
// that only tells a follower a new commit index; the next append with
// entries carries the index instead (no empty append is sent), and when
// none follows the notice still leaves after CommitNoticeDelay, so idle
// followers apply without a tick or another proposal.
func TestCommitNoticeHeldBack(t *testing.T) {
	for _, tc := range []struct {
		name  string
		delay time.Duration
	}{{"superseded", time.Hour}, {"sent", time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			var empty atomic.Int64
			c := newCluster(t, 3, func(cfg *Config) {
				cfg.TickInterval = time.Hour // a clock whose ticks never come: the test ticks
				cfg.CommitNoticeDelay = tc.delay
				cfg.Transport = countingTransport{cfg.Transport, &empty}
			})
			lead := c.waitLeader(c.ids)
			c.waitApplied(c.ids, c.nodes[lead].Status().Commit)
			before := empty.Load()
			if _, err := c.propose(lead, "a=1"); err != nil {
				t.Fatal(err)
			}
			fs := others(c.ids, lead)
			if tc.delay == time.Hour {
				if _, err := c.propose(lead, "b=2"); err != nil {
					t.Fatal(err)
				}
				// The append of b=2 told the followers that a=1 is
				// committed; the notice of b=2's commit is still held.
				idx := c.nodes[lead].Status().Applied - 1
				for _, f := range fs {
					c.waitStatus(f, fmt.Sprintf("node %d applies a=1 (index %d)", f, idx), func(s Status) bool { return s.Applied >= idx })
				}
				if n := empty.Load() - before; n != 0 {
					t.Fatalf("%d appends without entries sent; want none (an append with entries followed each commit)", n)
				}
				return
			}
			idx := c.nodes[lead].Status().Applied
			for _, f := range fs {
				c.waitStatus(f, fmt.Sprintf("node %d applies a=1 (index %d) with no tick", f, idx), func(s Status) bool { return s.Applied >= idx })
			}
			if n := empty.Load() - before; n == 0 {
				t.Fatal("the followers applied a=1 with no commit notice sent")
			}
		})
	}
}
