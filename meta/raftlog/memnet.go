package raftlog

import (
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
}

// NewMemNetwork returns a network with no nodes and no cut links.
func NewMemNetwork() *MemNetwork {
	return &MemNetwork{nodes: map[uint64]*Node{}, cut: map[[2]uint64]bool{}}
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

// Delivered counts the messages delivered so far (tests use it to tell
// when the network is quiet).
func (nw *MemNetwork) Delivered() uint64 {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	return nw.delivered
}

type memTransport struct {
	nw   *MemNetwork
	from uint64
}

func (t memTransport) Send(msgs []*pb.Message) {
	for _, m := range msgs {
		t.nw.mu.Lock()
		to := t.nw.nodes[m.GetTo()]
		if t.nw.cut[[2]uint64{t.from, m.GetTo()}] {
			to = nil
		}
		from := t.nw.nodes[t.from]
		if to != nil {
			t.nw.delivered++
		}
		t.nw.mu.Unlock()
		if to == nil {
			if from != nil {
				from.reportUnreachable(m.GetTo())
				if m.GetType() == pb.MessageType_MsgSnap {
					from.reportSnapshot(m.GetTo(), raft.SnapshotFailure)
				}
			}
			continue
		}
		b, err := proto.Marshal(m)
		if err != nil {
			panic(err)
		}
		var c pb.Message
		if err := proto.Unmarshal(b, &c); err != nil {
			panic(err)
		}
		to.Step(&c)
		if m.GetType() == pb.MessageType_MsgSnap && from != nil {
			from.reportSnapshot(m.GetTo(), raft.SnapshotFinish)
		}
	}
}
