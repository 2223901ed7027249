package raftlog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/weft-fs/weft/transport"
	pb "go.etcd.io/raft/v3/raftpb"
)

// TestTCP runs a three-node group over weft's framed TCP transport (real
// sockets, no TLS): it elects a leader, and proposals on it are applied
// on all three. Node 3 is down (not started, and its handler refuses)
// until the proposals are in and the others compacted their logs past
// them: it catches up from a snapshot streamed over TCP. (Refusing its
// handler alone would not cut it off: the answers to its own calls come
// back in their replies.)
func TestTCP(t *testing.T) { testTCP(t, nil) }

// TestTCPOlderMembers: members that do not know answered calls (an older
// weft: ENOSYS for op 63; here 2 and 3, so that the leader sends to at
// least one) are sent plain ones, and the group works as before.
func TestTCPOlderMembers(t *testing.T) {
	older := map[uint64]bool{2: true, 3: true}
	ts, lead := testTCP(t, older)
	for id := range older {
		if id == lead {
			continue
		}
		if p, ok := ts[lead].peer(id); !ok || !p.unanswered.Load() {
			t.Fatalf("leader %d still sends answered calls to the older member %d", lead, id)
		}
	}
}

// testTCP is TestTCP with the members in older refusing answered calls
// as an older weft does; it returns the transports and the leader.
func testTCP(t *testing.T, older map[uint64]bool) ([4]*TCPTransport, uint64) {
	quiet := slog.New(slog.DiscardHandler)
	tr := transport.NewTCPWith(transport.TCPOptions{Logger: quiet})
	const n = 3
	var (
		ts [n + 1]*TCPTransport
		// The handlers find their transport here: it is made after the
		// listeners (it needs their addresses), and the race detector
		// sees no order through sockets.
		handlers [n + 1]atomic.Pointer[TCPTransport]
		lns      [n + 1]transport.Listener
		nodes    [n + 1]*Node
		sms      [n + 1]*kvSM
		peers    = map[uint64]string{}
	)
	for i := uint64(1); i <= n; i++ {
		ln, err := tr.Listen("127.0.0.1:0", func(ctx context.Context, op uint16, req []byte) ([]byte, error) {
			t := handlers[i].Load()
			if t == nil {
				return nil, syscall.EAGAIN
			}
			if older[i] && op == OpMessagesAnswered {
				return nil, fmt.Errorf("unknown op %d: %w", op, syscall.ENOSYS)
			}
			return t.Handler(ctx, op, req)
		})
		if err != nil {
			t.Fatal(err)
		}
		lns[i] = ln
		peers[i] = ln.Addr()
	}
	pool := transport.NewPool(tr, transport.PoolOptions{})
	for i := uint64(1); i <= n; i++ {
		p := map[uint64]string{}
		for id, a := range peers {
			p[id] = a
		}
		var err error
		ts[i], err = NewTCPTransport(TCPOptions{ID: i, Peers: p, Pool: pool, AllowUnauthenticated: true, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		if i != 3 {
			handlers[i].Store(ts[i])
		}
	}
	start := func(i uint64) {
		fs := vfs.NewMem()
		st, err := OpenStorage("log", StorageOptions{FS: fs})
		if err != nil {
			t.Fatal(err)
		}
		snaps, err := OpenSnapshots(fs, "snap")
		if err != nil {
			t.Fatal(err)
		}
		sms[i] = newKV()
		sms[i].fs = fs
		nodes[i], err = NewNode(Config{ID: i, Peers: []uint64{1, 2, 3}, Storage: st, SM: sms[i], Transport: ts[i],
			TickInterval: 10 * time.Millisecond, Snapshots: snaps, SnapshotEvery: 3})
		if err != nil {
			t.Fatal(err)
		}
		ts[i].Start(nodes[i])
		t.Cleanup(func() { st.Close() })
	}
	start(1)
	start(2)
	t.Cleanup(func() {
		for i := 1; i <= n; i++ {
			if nodes[i] != nil {
				nodes[i].Stop()
			}
			ts[i].Close()
			lns[i].Close()
		}
		pool.Close()
	})

	changed3 := func() <-chan struct{} {
		if nodes[3] == nil {
			return nil // not started: never changes
		}
		return nodes[3].Changed()
	}
	// Generous bounds against hangs; nothing here measures time.
	deadline := time.After(5 * time.Minute)
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			select {
			case <-nodes[1].Changed():
			case <-nodes[2].Changed():
			case <-changed3():
			case <-deadline:
				t.Fatalf("%s never happened", what)
			}
		}
	}
	var lead uint64
	waitUntil("a leader", func() bool {
		for i := 1; i <= 2; i++ {
			if nodes[i].Status().Ready {
				lead = uint64(i)
				return true
			}
		}
		return false
	})
	var commit uint64
	for i := 0; i < 10; {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := nodes[lead].Propose(ctx, []byte(fmt.Sprintf("k%d=%d", i, i)))
		cancel()
		if errors.Is(err, ErrNotLeader) || errors.Is(err, ErrNotReady) {
			// Leadership moved (a slow machine missed heartbeats): the
			// proposal was not taken; find the leader and propose again.
			waitUntil("a new leader", func() bool {
				for j := 1; j <= 2; j++ {
					if nodes[j].Status().Ready {
						lead = uint64(j)
						return true
					}
				}
				return false
			})
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		commit = nodes[lead].Status().Commit
		i++
	}
	if first, _ := nodes[lead].st.FirstIndex(); first <= 1 {
		t.Fatalf("the leader's log was not compacted (first index %d)", first)
	}
	start(3)
	handlers[3].Store(ts[3])
	waitUntil("every node applied the proposals", func() bool {
		for i := 1; i <= n; i++ {
			if nodes[i].Status().Applied < commit {
				return false
			}
		}
		return true
	})
	for i := 1; i <= n; i++ {
		if got, want := sms[i].dump(), sms[lead].dump(); got != want {
			t.Fatalf("node %d has %q, the leader %q", i, got, want)
		}
	}
	if sms[3].base == 0 {
		t.Fatal("node 3 caught up without a snapshot")
	}
	return ts, lead
}

// TestHandlerRefuses: only meta servers may send raft messages, only to
// the node that serves them, and only from members.
func TestHandlerRefuses(t *testing.T) {
	c := newCluster(t, 1, nil)
	pool := transport.NewPool(transport.NewTCP(), transport.PoolOptions{})
	defer pool.Close()
	tt, err := NewTCPTransport(TCPOptions{ID: 1, Peers: map[uint64]string{2: "h2:1", 3: "h3:1"},
		Pool: pool, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	tt.Start(c.nodes[1])
	defer tt.Close()
	msg := func(from, to uint64) *pb.Message {
		return &pb.Message{Type: pb.MessageType_MsgHeartbeat.Enum(), From: new(from), To: new(to), Term: new(uint64(1))}
	}
	body := func(to uint64, ms ...*pb.Message) []byte {
		b, err := encodeMessages(to, ms)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	as := func(role transport.Role) context.Context {
		return transport.WithPeer(context.Background(), transport.Peer{Addr: "10.0.0.9:1", Role: role, Name: "x"})
	}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		body []byte
		want error
	}{
		{"client", as(transport.RoleClient), body(1, msg(2, 1)), syscall.EACCES},
		{"storage", as(transport.RoleStorage), body(1, msg(2, 1)), syscall.EACCES},
		{"unauthenticated", as(transport.RoleNone), body(1, msg(2, 1)), syscall.EACCES},
		{"another node's", as(transport.RoleMeta), body(2, msg(3, 2)), syscall.EINVAL},
		{"from a non-member", as(transport.RoleMeta), body(1, msg(7, 1)), syscall.EINVAL},
		{"garbage", as(transport.RoleMeta), []byte{1, 2, 3}, syscall.EINVAL},
		{"meta", as(transport.RoleMeta), body(1, msg(2, 1)), nil},
	} {
		_, err := tt.Handler(tc.ctx, OpMessages, tc.body)
		if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

// FuzzDecodeMessages: the decoder of raft traffic off the network never
// panics, and what it accepts encodes back to the same messages.
func FuzzDecodeMessages(f *testing.F) {
	b, _ := encodeMessages(1, []*pb.Message{{Type: pb.MessageType_MsgApp.Enum(), From: new(uint64(2)), To: new(uint64(1)),
		Entries: []*pb.Entry{{Index: new(uint64(5)), Data: []byte("x")}}}})
	f.Add(b)
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 255, 255, 255, 255})
	f.Fuzz(func(t *testing.T, body []byte) {
		to, msgs, err := decodeMessages(body)
		if err != nil {
			return
		}
		again, err := encodeMessages(to, msgs)
		if err != nil {
			t.Fatal(err)
		}
		to2, msgs2, err := decodeMessages(again)
		if err != nil || to2 != to || len(msgs2) != len(msgs) {
			t.Fatalf("re-encoded messages decode differently: %v", err)
		}
	})
}

// TestTCPJoin: a one-node group over TCP compacts its log; a second node
// joins (Config.Join, knowing the first's address), is added as a learner
// with its address in the change's payload, which the first node's
// transport learns (SetPeer) when it applies the change; the new node
// catches up from a snapshot streamed over TCP and is promoted; removed,
// it is forgotten (RemovePeer) and its messages refused.
func TestTCPJoin(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	tr := transport.NewTCPWith(transport.TCPOptions{Logger: quiet})
	pool := transport.NewPool(tr, transport.PoolOptions{})
	defer pool.Close()
	var handlers [3]atomic.Pointer[TCPTransport]
	var addrs [3]string
	for i := 1; i <= 2; i++ {
		ln, err := tr.Listen("127.0.0.1:0", func(ctx context.Context, op uint16, req []byte) ([]byte, error) {
			if h := handlers[i].Load(); h != nil {
				return h.Handler(ctx, op, req)
			}
			return nil, syscall.EAGAIN
		})
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		addrs[i] = ln.Addr()
	}
	var nodes [3]*Node
	var sms [3]*kvSM
	var ts [3]*TCPTransport
	start := func(id uint64, peers map[uint64]string, join bool) {
		tt, err := NewTCPTransport(TCPOptions{ID: id, Peers: peers, Pool: pool, AllowUnauthenticated: true, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		fs := vfs.NewMem()
		st, err := OpenStorage("log", StorageOptions{FS: fs})
		if err != nil {
			t.Fatal(err)
		}
		snaps, err := OpenSnapshots(fs, "snap")
		if err != nil {
			t.Fatal(err)
		}
		sms[id] = newKV()
		sms[id].fs = fs
		nodes[id], err = NewNode(Config{ID: id, Peers: []uint64{1}, Join: join, Storage: st, SM: sms[id], Transport: tt,
			TickInterval: 10 * time.Millisecond, Snapshots: snaps, SnapshotEvery: 3,
			OnConfChange: func(cc *pb.ConfChangeV2, _ *pb.ConfState) {
				for _, ch := range cc.GetChanges() {
					switch ch.GetType() {
					case pb.ConfChangeType_ConfChangeAddLearnerNode, pb.ConfChangeType_ConfChangeAddNode:
						tt.SetPeer(ch.GetNodeId(), string(ConfChangePayload(cc)))
					case pb.ConfChangeType_ConfChangeRemoveNode:
						tt.RemovePeer(ch.GetNodeId())
					}
				}
			}})
		if err != nil {
			t.Fatal(err)
		}
		ts[id] = tt
		handlers[id].Store(tt)
		tt.Start(nodes[id])
		t.Cleanup(func() { nodes[id].Stop(); tt.Close(); st.Close() })
	}
	start(1, map[uint64]string{}, false)
	deadline := time.After(60 * time.Second) // against hangs only
	wait := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			select {
			case <-nodes[1].Changed():
			case <-time.After(10 * time.Millisecond):
			case <-deadline:
				t.Fatalf("%s never happened", what)
			}
		}
	}
	wait("node 1 leads", func() bool { return nodes[1].Status().Ready })
	ctx := context.Background()
	for i := range 10 {
		if _, err := nodes[1].Propose(ctx, []byte(fmt.Sprintf("k%d=%d", i, i))); err != nil {
			t.Fatal(err)
		}
	}
	start(2, map[uint64]string{1: addrs[1]}, true)
	if _, err := nodes[1].ChangeMembers(ctx, change(pb.ConfChangeType_ConfChangeAddLearnerNode, 2), addrs[2]); err != nil {
		t.Fatal(err)
	}
	if got := ts[1].Peers()[2]; got != addrs[2] {
		t.Fatalf("node 1's transport has node 2 at %q, want %q", got, addrs[2])
	}
	wait("node 2 catches up", func() bool { return nodes[2].Status().Applied >= nodes[1].Status().Commit })
	if sms[2].base == 0 || sms[2].dump() != sms[1].dump() {
		t.Fatalf("node 2: restored from %d, state %q; node 1 %q", sms[2].base, sms[2].dump(), sms[1].dump())
	}
	if _, err := nodes[1].ChangeMembers(ctx, change(pb.ConfChangeType_ConfChangeAddNode, 2), addrs[2]); err != nil {
		t.Fatal(err)
	}
	if _, err := nodes[1].Propose(ctx, []byte("after=1")); err != nil {
		t.Fatal(err)
	}
	wait("node 2 applies after promotion", func() bool { return sms[2].dump() == sms[1].dump() })
	for {
		_, err := nodes[1].ChangeMembers(ctx, change(pb.ConfChangeType_ConfChangeRemoveNode, 2), "")
		if errors.Is(err, ErrDropped) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		break
	}
	if _, ok := ts[1].Peers()[2]; ok {
		t.Fatal("node 1's transport still has the removed node 2")
	}
	body, _ := encodeMessages(1, []*pb.Message{{Type: pb.MessageType_MsgHeartbeat.Enum(), From: new(uint64(2)), To: new(uint64(1))}})
	if _, err := ts[1].Handler(ctx, OpMessages, body); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("a message from the removed member: %v, want EINVAL", err)
	}
}
