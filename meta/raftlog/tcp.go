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

// Operations of the frame header that carry raft traffic: 60..69 are
// raft's (meta's client operations are 1..59).
const (
	// OpMessages carries raft messages for one node: a body of
	// version(1) to(8) count(4), then count × (length(4) raftpb.Message).
	OpMessages uint16 = 60
	// OpMessagesAnswered carries raft messages as OpMessages does, all
	// from one member, and its reply carries the receiver's answer (see
	// Node.StepAnswered) in the same form: the messages for the sender
	// that stepping them produced, append acknowledgements once durable.
	// A member that does not know the op (ENOSYS) is sent OpMessages.
	OpMessagesAnswered uint16 = 63
	// OpFirst and OpLast bound the range; a server hands every op in it
	// to Handler.
	OpFirst uint16 = 60
	OpLast  uint16 = 69

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
// queues messages per peer, one goroutine per peer sends them in batches
// (one call each, so a slow peer never holds up the others), and Handler
// serves the receiving side. Messages are best effort, as raft expects:
// a failed call drops its batch and reports the peer unreachable.
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

// Start delivers incoming messages to n and starts the senders.
func (t *TCPTransport) Start(n *Node) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.node = n
	for id, p := range t.peers {
		t.wg.Add(1)
		go t.sender(id, p)
	}
}

// peer is another member: its address and the queue of its sender.
type peer struct {
	addr string
	q    chan *pb.Message
	quit chan struct{} // closed when the member is removed
	// unanswered: the member refused OpMessagesAnswered (an older
	// weft): it is sent OpMessages, and answers with calls of its own.
	unanswered atomic.Bool
	// epoch and the sender's sequence number order the answered calls
	// to the member (tcpanswer.go).
	epoch atomic.Uint64
}

func newPeer(addr string) *peer {
	p := &peer{addr: addr, q: make(chan *pb.Message, queueLen), quit: make(chan struct{})}
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
		close(old.quit)
	}
	p := newPeer(addr)
	t.peers[id] = p
	if t.node != nil && !t.closed {
		t.wg.Add(1)
		go t.sender(id, p)
	}
}

// RemovePeer forgets member id: nothing is sent to it or heard from it.
func (t *TCPTransport) RemovePeer(id uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p, ok := t.peers[id]; ok {
		close(p.quit)
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

// Close stops the senders; queued messages are dropped.
func (t *TCPTransport) Close() {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	t.closed = true
	close(t.stop)
	t.mu.Unlock()
	t.wg.Wait()
}

// Send implements Transport: it never blocks.
func (t *TCPTransport) Send(msgs []*pb.Message) {
	for _, m := range msgs {
		p, ok := t.peer(m.GetTo())
		if !ok {
			t.log.Warn("raftlog: message for an unknown member dropped", "to", m.GetTo(), "type", m.GetType())
			continue
		}
		if m.GetType() == pb.MessageType_MsgSnap {
			t.sendSnapshot(m)
			continue
		}
		select {
		case p.q <- m:
		default:
			t.report(m.GetTo(), []*pb.Message{m})
		}
	}
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

func (t *TCPTransport) sender(id uint64, p *peer) {
	defer t.wg.Done()
	addr, q := p.addr, p.q
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-t.stop:
		case <-p.quit:
		}
		cancel()
	}()
	// Answered calls run on goroutines of their own, up to
	// maxCallsInFlight at once (the member steps them in order,
	// tcpanswer.go): a call waits for the member's fsync, and the next
	// batch must not wait for it.
	slots := make(chan struct{}, maxCallsInFlight)
	var calls sync.WaitGroup
	defer calls.Wait()
	var seq uint64
	batch := make([]*pb.Message, 0, maxBatch)
	for {
		select {
		case <-t.stop:
			return
		case <-p.quit:
			return
		case m := <-q:
			batch = append(batch[:0], m)
		}
	more:
		for len(batch) < maxBatch {
			select {
			case m := <-q:
				batch = append(batch, m)
			default:
				break more
			}
		}
		if !p.unanswered.Load() {
			select {
			case slots <- struct{}{}:
			case <-t.stop:
				return
			case <-p.quit:
				return
			}
			seq++
			calls.Add(1)
			go func(sent []*pb.Message, epoch, seq uint64) {
				defer calls.Done()
				defer func() { <-slots }()
				if err := t.callAnswered(ctx, id, p, epoch, seq, sent); err != nil && ctx.Err() == nil {
					// The calls after it may wait on the member for this
					// one: a new epoch releases them.
					p.epoch.Add(1)
					t.log.Debug("raftlog: messages not delivered", "to", id, "addr", addr, "n", len(sent), "err", err)
					t.report(id, sent)
				}
			}(slices.Clone(batch), p.epoch.Load(), seq)
			continue
		}
		body, err := encodeMessages(id, batch)
		if err == nil {
			cctx, ccancel := context.WithTimeout(ctx, t.opts.CallTimeout)
			_, err = t.opts.Pool.Call(cctx, addr, OpMessages, body)
			ccancel()
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			t.log.Debug("raftlog: messages not delivered", "to", id, "addr", addr, "n", len(batch), "err", err)
			t.report(id, batch)
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
