package raftlog

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/weft-fs/weft/internal/ratelog"
	"github.com/weft-fs/weft/transport"
	"github.com/weft-fs/weft/wire"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Operations of the frame header that carry raft traffic: 60..63 are
// raft's (meta's client operations are 1..59 and 64..99: a member's
// listener serves both, so the range must not take any of theirs; it was
// 60..69 until `weft migrate`'s 64..68 met it, and a replicated group
// refused them as raft messages from a client).
const (
	// OpMessages carries raft messages for one node: a body of
	// version(1) to(8) count(4), then count × (length(4) raftpb.Message).
	OpMessages uint16 = 60
	// OpMessagesAnswered carries raft messages as OpMessages does, all
	// from one member, and its reply carries the receiver's answer (see
	// Node.stepAnswered) in the same form: the messages for the sender
	// that stepping them produced, append acknowledgements once durable.
	// A member that does not know the op (ENOSYS) is sent OpMessages.
	OpMessagesAnswered uint16 = 63
	// OpFirst and OpLast bound the range; a server hands every op in it
	// to Handler.
	OpFirst uint16 = 60
	OpLast  uint16 = 63

	msgsVersion = 1
	// maxBatch bounds the messages one call carries.
	maxBatch = 64
	// queueLen bounds the messages waiting for one peer; beyond it they
	// are dropped (raft resends) and the peer reported unreachable.
	queueLen = 4096
)

// TCPOptions configure a TCPTransport.
type TCPOptions struct {
	// ID is this node's id; Peers maps every other member's id to its
	// address.
	ID    uint64
	Peers map[uint64]string
	// Pool makes the calls (its transport authenticates this process as
	// a meta server).
	Pool *transport.Pool
	// CallTimeout bounds one call to a peer (default 5s).
	CallTimeout time.Duration
	// AllowUnauthenticated accepts messages from peers that did not
	// authenticate (tests without TLS). Otherwise only peers with role
	// meta are heard.
	AllowUnauthenticated bool
	Logger               *slog.Logger
}

// TCPTransport carries raft messages over weft's framed transport: Send
// queues messages per peer and starts caller goroutines that send them in
// batches, one call each, up to four calls under way to a peer (so a slow
// peer never holds up the others, and a call waiting for a follower's
// fsync never holds up the next append), and Handler serves the receiving
// side. Messages are best effort, as raft expects: a failed call drops
// its batch and reports the peer unreachable.
type TCPTransport struct {
	opts     TCPOptions
	log      *slog.Logger
	refusals ratelog.Limiter

	mu    sync.Mutex
	node  *Node
	peers map[uint64]*peer
	// snapping: peers a snapshot is being streamed to.
	snapping map[uint64]bool
	// orders: where the answered calls from each member stand
	// (tcpanswer.go).
	orders map[uint64]*callOrder
	stop   chan struct{}
	wg     sync.WaitGroup
	closed bool
}

// NewTCPTransport returns a transport for node opts.ID; Start connects it
// to its node.
func NewTCPTransport(opts TCPOptions) (*TCPTransport, error) {
	if opts.Pool == nil {
		return nil, errors.New("raftlog: TCPOptions.Pool is required")
	}
	if _, ok := opts.Peers[opts.ID]; ok {
		delete(opts.Peers, opts.ID)
	}
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = 5 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	t := &TCPTransport{opts: opts, log: opts.Logger, peers: map[uint64]*peer{}, snapping: map[uint64]bool{}, orders: map[uint64]*callOrder{}, stop: make(chan struct{})}
	for id, addr := range opts.Peers {
		t.peers[id] = newPeer(addr)
	}
	return t, nil
}

// Start delivers incoming messages to n (and the answers to this node's
// calls).
func (t *TCPTransport) Start(n *Node) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.node = n
}

// peer is another member: its address and the messages waiting for it.
// Messages leave in calls made by caller goroutines, started by Send
// when a message waits and fewer than the peer's limit of calls are
// under way (no goroutine waits for messages: a round of replication does
// not wake one); each caller sends what waits, up to maxBatch messages a
// call, until nothing does.
type peer struct {
	addr   string
	ctx    context.Context // ended when the member is removed or the transport closed
	cancel context.CancelFunc
	// unanswered: the member refused OpMessagesAnswered (an older
	// weft): it is sent OpMessages, one call at a time, and answers with
	// calls of its own.
	unanswered atomic.Bool
	// epoch orders the answered calls to the member with seq
	// (tcpanswer.go).
	epoch atomic.Uint64

	mu      sync.Mutex
	pending []*pb.Message
	callers int    // caller goroutines running
	seq     uint64 // of the last answered call
}

func newPeer(addr string) *peer {
	p := &peer{addr: addr}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.epoch.Store(newEpoch())
	return p
}

// SetPeer adds member id at addr (or moves it there): messages to it are
// sent, and messages from it heard. Package meta calls it when a
// configuration change that adds a member is applied.
func (t *TCPTransport) SetPeer(id uint64, addr string) {
	if id == t.opts.ID {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if old, ok := t.peers[id]; ok {
		if old.addr == addr {
			return
		}
		old.cancel()
	}
	t.peers[id] = newPeer(addr)
}

// RemovePeer forgets member id: nothing is sent to it or heard from it.
func (t *TCPTransport) RemovePeer(id uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p, ok := t.peers[id]; ok {
		p.cancel()
		delete(t.peers, id)
	}
}

// Peers returns the members' addresses this transport knows.
func (t *TCPTransport) Peers() map[uint64]string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[uint64]string, len(t.peers))
	for id, p := range t.peers {
		out[id] = p.addr
	}
	return out
}

func (t *TCPTransport) peer(id uint64) (*peer, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p, ok := t.peers[id]
	return p, ok
}

// Close stops the calls under way; waiting messages are dropped.
func (t *TCPTransport) Close() {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	t.closed = true
	close(t.stop)
	for _, p := range t.peers {
		p.cancel()
	}
	t.mu.Unlock()
	t.wg.Wait()
}

// Send implements Transport: it never blocks. A message for a member
// that already has queueLen waiting is dropped (raft sends again) and the
// member reported unreachable.
func (t *TCPTransport) Send(msgs []*pb.Message) {
	// Snapshots and messages for a full queue are handled once t.mu is
	// let go (sendSnapshot and report take it).
	var snaps, overflow []*pb.Message
	defer func() {
		for _, m := range snaps {
			t.sendSnapshot(m)
		}
		for _, m := range overflow {
			t.report(m.GetTo(), []*pb.Message{m})
		}
	}()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	for _, m := range msgs {
		id := m.GetTo()
		p, ok := t.peers[id]
		if !ok {
			t.log.Warn("raftlog: message for an unknown member dropped", "to", id, "type", m.GetType())
			continue
		}
		if m.GetType() == pb.MessageType_MsgSnap {
			snaps = append(snaps, m)
			continue
		}
		p.mu.Lock()
		if len(p.pending) >= queueLen {
			p.mu.Unlock()
			overflow = append(overflow, m)
			continue
		}
		p.pending = append(p.pending, m)
		p.mu.Unlock()
	}
	// Callers start once every message is queued, so that one call
	// carries all of a Ready's messages to a member.
	for id, p := range t.peers {
		p.mu.Lock()
		start := len(p.pending) > 0 && p.callers < p.maxCallers()
		if start {
			p.callers++
			t.wg.Add(1)
		}
		p.mu.Unlock()
		if start {
			go t.caller(id, p)
		}
	}
}

// maxCallers is how many calls may be under way to p at once: answered
// calls are queued in order by the member; plain ones are not, and go
// one at a time.
func (p *peer) maxCallers() int {
	if p.unanswered.Load() {
		return 1
	}
	return maxCallsInFlight
}

// caller sends p's waiting messages, a batch a call, until none wait.
func (t *TCPTransport) caller(id uint64, p *peer) {
	defer t.wg.Done()
	for {
		p.mu.Lock()
		if len(p.pending) == 0 || p.ctx.Err() != nil || p.callers > p.maxCallers() {
			p.callers--
			p.mu.Unlock()
			return
		}
		n := min(len(p.pending), maxBatch)
		batch := slices.Clone(p.pending[:n])
		p.pending = append(p.pending[:0], p.pending[n:]...)
		p.seq++
		seq, epoch := p.seq, p.epoch.Load()
		p.mu.Unlock()

		var err error
		if p.unanswered.Load() {
			err = t.callPlain(p, batch)
		} else {
			err = t.callAnswered(p.ctx, id, p, epoch, seq, batch)
		}
		if err != nil && p.ctx.Err() == nil {
			// The calls after it may wait on the member for this one:
			// a new epoch releases them.
			p.epoch.Add(1)
			t.log.Debug("raftlog: messages not delivered", "to", id, "addr", p.addr, "n", len(batch), "err", err)
			t.report(id, batch)
		}
	}
}

// callPlain sends msgs with OpMessages: the member steps them and answers
// with calls of its own.
func (t *TCPTransport) callPlain(p *peer, msgs []*pb.Message) error {
	body, err := encodeMessages(msgs[0].GetTo(), msgs)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(p.ctx, t.opts.CallTimeout)
	defer cancel()
	_, err = t.opts.Pool.Call(ctx, p.addr, OpMessages, body)
	return err
}

// sendSnapshot streams m's snapshot to its peer on a goroutine of its
// own (one at a time per peer: raft sends another only after hearing how
// the last went) and reports the outcome.
func (t *TCPTransport) sendSnapshot(m *pb.Message) {
	id := m.GetTo()
	t.mu.Lock()
	n := t.node
	busy := t.snapping[id] || t.closed
	if !busy {
		t.snapping[id] = true
		t.wg.Add(1)
	}
	t.mu.Unlock()
	if busy || n == nil {
		t.report(id, []*pb.Message{m})
		return
	}
	go func() {
		defer t.wg.Done()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			select {
			case <-t.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		p, ok := t.peer(id)
		if !ok {
			t.mu.Lock()
			delete(t.snapping, id)
			t.mu.Unlock()
			n.reportSnapshotWait(id, raft.SnapshotFailure)
			return
		}
		addr := p.addr
		call := func(ctx context.Context, op uint16, body []byte) error {
			cctx, ccancel := context.WithTimeout(ctx, t.opts.CallTimeout)
			defer ccancel()
			_, err := t.opts.Pool.Call(cctx, addr, op, body)
			return err
		}
		d, _ := DecodeSnapshotDesc(m.GetSnapshot().GetData())
		err := streamSnapshot(ctx, n.Snapshots(), m, ChunkSize, call)
		t.mu.Lock()
		delete(t.snapping, id)
		t.mu.Unlock()
		status := raft.SnapshotFinish
		if err != nil {
			status = raft.SnapshotFailure
			t.log.Warn("raftlog: snapshot not delivered", "to", id, "addr", addr, "err", err)
		} else if d != nil {
			t.log.Info("raftlog: snapshot sent", "to", id, "index", d.Index, "bytes", d.Size())
		}
		n.reportSnapshotWait(id, status)
	}()
}

// report tells the node that msgs to id were not delivered.
func (t *TCPTransport) report(id uint64, msgs []*pb.Message) {
	t.mu.Lock()
	n := t.node
	t.mu.Unlock()
	if n == nil {
		return
	}
	n.ReportUnreachable(id)
	for _, m := range msgs {
		if m.GetType() == pb.MessageType_MsgSnap {
			n.ReportSnapshot(id, raft.SnapshotFailure)
		}
	}
}

func encodeMessages(to uint64, msgs []*pb.Message) ([]byte, error) {
	e := wire.NewEncoder(messagesSize(msgs))
	return appendMessages(e, to, msgs)
}

// messagesSize is the size of msgs encoded.
func messagesSize(msgs []*pb.Message) int {
	size := 1 + 8 + 4
	for _, m := range msgs {
		size += 4 + proto.Size(m)
	}
	return size
}

// appendMessages encodes msgs for node to after what e holds. Each
// message is marshalled straight into the body, sized once by the
// caller: no buffer per message, no copy.
func appendMessages(e *wire.Encoder, to uint64, msgs []*pb.Message) ([]byte, error) {
	e.U8(msgsVersion)
	e.U64(to)
	e.U32(uint32(len(msgs)))
	for _, m := range msgs {
		at := len(e.B)
		e.U32(0)
		b, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(e.B, m)
		if err != nil {
			return nil, fmt.Errorf("raftlog: encode message: %w", err)
		}
		binary.LittleEndian.PutUint32(b[at:], uint32(len(b)-at-4))
		e.B = b
	}
	return e.B, nil
}

func decodeMessages(body []byte) (to uint64, msgs []*pb.Message, err error) {
	d := wire.NewDecoder(body)
	if v := d.U8(); v != msgsVersion && d.Err() == nil {
		return 0, nil, fmt.Errorf("raftlog: messages of version %d, want %d: %w", v, msgsVersion, syscall.EPROTO)
	}
	to = d.U64()
	n := d.Count(maxBatch, 4)
	for i := 0; i < n && d.Err() == nil; i++ {
		b := d.BytesMax(len(body))
		if d.Err() != nil {
			break
		}
		m := &pb.Message{}
		if err := proto.Unmarshal(b, m); err != nil {
			return 0, nil, fmt.Errorf("raftlog: message %d: %v: %w", i, err, syscall.EINVAL)
		}
		msgs = append(msgs, m)
	}
	if err := d.Done(); err != nil {
		return 0, nil, fmt.Errorf("raftlog: messages: %v: %w", err, syscall.EINVAL)
	}
	return to, msgs, nil
}

// Handler serves the raft operations (OpFirst..OpLast). Only a peer
// authenticated as a meta server is heard (EACCES otherwise, logged
// rate-limited); messages for another node id, or not from a member, are
// refused (EINVAL): a peer list that disagrees between members shows up
// here.
func (t *TCPTransport) Handler(ctx context.Context, op uint16, req []byte) ([]byte, error) {
	if p, ok := transport.PeerFrom(ctx); ok && p.Role != transport.RoleMeta &&
		!(p.Role == transport.RoleNone && t.opts.AllowUnauthenticated) {
		err := fmt.Errorf("raftlog: peer %q with role %q may not send raft messages: %w", p.Name, p.Role, syscall.EACCES)
		t.refusals.Warn(t.log, "raftlog: raft message refused", "peer", p.Addr, "role", p.Role, "name", p.Name, "err", err)
		return nil, err
	}
	if op == OpSnapChunk || op == OpSnapDone {
		t.mu.Lock()
		n := t.node
		t.mu.Unlock()
		if n == nil {
			return nil, fmt.Errorf("raftlog: node %d not started: %w", t.opts.ID, syscall.EAGAIN)
		}
		member := func(id uint64) bool { _, ok := t.peer(id); return ok }
		return nil, handleSnapshot(ctx, n, t.opts.ID, member, op, req)
	}
	if op != OpMessages && op != OpMessagesAnswered {
		return nil, fmt.Errorf("raftlog: unknown op %d: %w", op, syscall.ENOSYS)
	}
	var epoch, seq uint64
	if op == OpMessagesAnswered {
		var err error
		if epoch, seq, req, err = decodeCallOrder(req); err != nil {
			return nil, err
		}
	}
	to, msgs, err := decodeMessages(req)
	if err != nil {
		return nil, err
	}
	if to != t.opts.ID {
		return nil, fmt.Errorf("raftlog: messages for node %d reached node %d: %w", to, t.opts.ID, syscall.EINVAL)
	}
	t.mu.Lock()
	n := t.node
	t.mu.Unlock()
	if n == nil {
		return nil, fmt.Errorf("raftlog: node %d not started: %w", t.opts.ID, syscall.EAGAIN)
	}
	for _, m := range msgs {
		if _, member := t.peer(m.GetFrom()); !member || m.GetTo() != to {
			return nil, fmt.Errorf("raftlog: message from %d to %d: not from a member of node %d's group: %w", m.GetFrom(), m.GetTo(), to, syscall.EINVAL)
		}
	}
	if op == OpMessagesAnswered {
		return t.answer(ctx, n, epoch, seq, msgs)
	}
	for _, m := range msgs {
		n.Step(m)
	}
	return nil, nil
}
