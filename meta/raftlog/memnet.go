package raftlog

import (
	"bytes"
	"context"
	"fmt"
	"sync"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// MemNetwork connects nodes in one process, for tests: messages are
// encoded and decoded (as on a wire) and handed to the recipient's Step at
// once. Links can be cut one way or both, to model partitions; messages to
// a node that is not attached or over a cut link are dropped, as a network
// drops them.
type MemNetwork struct {
	mu        sync.Mutex
	nodes     map[uint64]*Node
	cut       map[[2]uint64]bool
	delivered uint64
	// ChunkSize, if set, is the snapshot chunk size (default ChunkSize).
	ChunkSize int
	// Answered, set before any message is sent, delivers messages as
	// TCPTransport's answered calls (tcpanswer.go) do: each on a
	// goroutine of its own, queued to the recipient in the order sent
	// (a callOrder per link), and what the recipient says back in answer
	// (answer.go) delivered to the sender if the link back is not cut.
	Answered bool
	inflight int // answered deliveries under way
	orders   map[[2]uint64]*callOrder
	seqs     map[[2]uint64]uint64
}

func (nw *MemNetwork) chunkSize() int {
	if nw.ChunkSize > 0 {
		return nw.ChunkSize
	}
	return ChunkSize
}

// NewMemNetwork returns a network with no nodes and no cut links.
func NewMemNetwork() *MemNetwork {
	return &MemNetwork{nodes: map[uint64]*Node{}, cut: map[[2]uint64]bool{},
		orders: map[[2]uint64]*callOrder{}, seqs: map[[2]uint64]uint64{}}
}

// Transport returns the transport of node id.
func (nw *MemNetwork) Transport(id uint64) Transport { return memTransport{nw, id} }

// Attach makes n reachable as id; Detach makes it unreachable.
func (nw *MemNetwork) Attach(id uint64, n *Node) {
	nw.mu.Lock()
	nw.nodes[id] = n
	nw.mu.Unlock()
}

// Detach drops node id from the network.
func (nw *MemNetwork) Detach(id uint64) {
	nw.mu.Lock()
	delete(nw.nodes, id)
	nw.mu.Unlock()
}

// Cut drops every message from a to b.
func (nw *MemNetwork) Cut(a, b uint64) {
	nw.mu.Lock()
	nw.cut[[2]uint64{a, b}] = true
	nw.mu.Unlock()
}

// Partition cuts every link between the two groups, both ways.
func (nw *MemNetwork) Partition(as, bs []uint64) {
	for _, a := range as {
		for _, b := range bs {
			nw.Cut(a, b)
			nw.Cut(b, a)
		}
	}
}

// Heal restores every link.
func (nw *MemNetwork) Heal() {
	nw.mu.Lock()
	clear(nw.cut)
	nw.mu.Unlock()
}

// Delivered counts the messages delivered so far, and answered deliveries
// and snapshot streams still under way (tests use them to tell when the network is quiet).
func (nw *MemNetwork) Delivered() (delivered uint64, underWay int) {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	return nw.delivered, nw.inflight
}

type memTransport struct {
	nw   *MemNetwork
	from uint64
}

func (t memTransport) Send(msgs []*pb.Message) {
	for _, m := range msgs {
		to, from := t.link(m.GetTo())
		if to == nil {
			if from != nil {
				from.reportUnreachable(m.GetTo())
				if m.GetType() == pb.MessageType_MsgSnap {
					from.reportSnapshot(m.GetTo(), raft.SnapshotFailure)
				}
			}
			continue
		}
		if m.GetType() == pb.MessageType_MsgSnap {
			// Streamed in chunks, as over TCP, by a goroutine of its own:
			// Send must not block. (A sender no longer attached is being
			// stopped: nothing to stream from, nobody to report to.)
			if from != nil {
				t.nw.mu.Lock()
				t.nw.inflight++ // the network is not quiet until it is reported
				t.nw.mu.Unlock()
				go t.sendSnapshot(from, m)
			}
			continue
		}
		if t.nw.Answered {
			t.deliverAnswered(to, m)
			continue
		}
		to.Step(wireCopy(m))
	}
}

// deliverAnswered hands m to node to as an answered call would, in the
// order of the link's calls, and delivers the answer back.
func (t memTransport) deliverAnswered(to *Node, m *pb.Message) {
	link := [2]uint64{t.from, m.GetTo()}
	t.nw.mu.Lock()
	o := t.nw.orders[link]
	if o == nil {
		o = newCallOrder()
		t.nw.orders[link] = o
	}
	t.nw.seqs[link]++
	seq := t.nw.seqs[link]
	t.nw.inflight++
	t.nw.mu.Unlock()
	go func() {
		defer func() {
			t.nw.mu.Lock()
			t.nw.inflight--
			t.nw.mu.Unlock()
		}()
		answer, err := o.stepInOrder(context.Background(), to, 1, seq, t.from, []*pb.Message{wireCopy(m)})
		if err != nil || len(answer) == 0 {
			return
		}
		back, _ := memTransport{t.nw, m.GetTo()}.link(t.from)
		if back == nil {
			return
		}
		for _, r := range answer {
			back.Step(wireCopy(r))
		}
	}()
}

// link returns the nodes at both ends of a message to id, to nil if the
// message cannot get there.
func (t memTransport) link(id uint64) (to, from *Node) {
	t.nw.mu.Lock()
	defer t.nw.mu.Unlock()
	to = t.nw.nodes[id]
	if t.nw.cut[[2]uint64{t.from, id}] {
		to = nil
	}
	if to != nil {
		t.nw.delivered++
	}
	return to, t.nw.nodes[t.from]
}

// sendSnapshot streams m's snapshot in chunks (of MemNetwork.ChunkSize,
// small in tests so that a snapshot takes many), each call checking the
// link again, and reports the outcome to the sender.
func (t memTransport) sendSnapshot(from *Node, m *pb.Message) {
	call := func(ctx context.Context, op uint16, body []byte) error {
		to, _ := t.link(m.GetTo())
		if to == nil {
			return fmt.Errorf("raftlog: node %d unreachable", m.GetTo())
		}
		return handleSnapshot(ctx, to, m.GetTo(), func(uint64) bool { return true }, op, bytes.Clone(body))
	}
	err := streamSnapshot(context.Background(), from.Snapshots(), wireCopy(m), t.nw.chunkSize(), call)
	status := raft.SnapshotFinish
	if err != nil {
		from.log.Warn("raftlog: snapshot not delivered", "from", t.from, "to", m.GetTo(), "err", err)
		status = raft.SnapshotFailure
	}
	from.reportSnapshotWait(m.GetTo(), status)
	t.nw.mu.Lock()
	t.nw.inflight--
	t.nw.mu.Unlock()
}

// wireCopy encodes and decodes m, as a wire would.
func wireCopy(m *pb.Message) *pb.Message {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	var c pb.Message
	if err := proto.Unmarshal(b, &c); err != nil {
		panic(err)
	}
	return &c
}
