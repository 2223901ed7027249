package raftlog

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"syscall"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/weft-fs/weft/wire"
)

// Answered calls (OpMessagesAnswered). A member's reply to a call carries
// its answer (answer.go): an append acknowledgement comes back once the
// member's log write is durable, so the call lasts a fsync, and a sender
// keeps up to maxCallsInFlight of them under way to one member. raft
// copes with messages that arrive out of order, but not cheaply (a
// follower rejects an append whose predecessor it has not seen, and the
// leader probes back), so the calls carry their order: an epoch and a
// sequence number, and the receiving member queues each call's messages
// to its node only after those of the call before it in the same epoch
// (callOrder). A call that fails makes the sender start a new epoch: the
// calls behind it, which would otherwise wait for a call that never
// comes, go ahead then, and so does any call whose context ends.

// maxCallsInFlight bounds the answered calls under way to one member.
const maxCallsInFlight = 4

// newEpoch is a sender's first epoch: random, so that a restarted
// member's calls are not taken for stale ones of its last incarnation.
func newEpoch() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:]) >> 1
}

// callAnswered sends msgs to member id as call seq of epoch and steps the
// answer its reply carries. An answer message that is not from id to this
// node fails the call (EPROTO) and none of it is stepped. A member that
// does not know the op (an older weft) is sent OpMessages from then on.
func (t *TCPTransport) callAnswered(ctx context.Context, id uint64, p *peer, epoch, seq uint64, msgs []*pb.Message) error {
	e := wire.NewEncoder(16 + messagesSize(msgs))
	e.U64(epoch)
	e.U64(seq)
	body, err := appendMessages(e, id, msgs)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, t.opts.CallTimeout)
	defer cancel()
	reply, err := t.opts.Pool.Call(cctx, p.addr, OpMessagesAnswered, body)
	if errors.Is(err, syscall.ENOSYS) {
		if !p.unanswered.Swap(true) {
			t.log.Info("raftlog: member does not answer in replies (an older version): it is sent messages it answers with calls of its own", "id", id, "addr", p.addr)
		}
		_, err = t.opts.Pool.Call(cctx, p.addr, OpMessages, body[16:])
		return err
	}
	if err != nil || len(reply) == 0 {
		return err
	}
	to, answer, err := decodeMessages(reply)
	if err != nil {
		return fmt.Errorf("raftlog: answer from %d: %w", id, err)
	}
	for _, m := range answer {
		if to != t.opts.ID || m.GetFrom() != id || m.GetTo() != t.opts.ID {
			return fmt.Errorf("raftlog: answer from %d holds a message from %d to %d: %w", id, m.GetFrom(), m.GetTo(), syscall.EPROTO)
		}
	}
	t.mu.Lock()
	n := t.node
	t.mu.Unlock()
	for _, m := range answer {
		n.Step(m)
	}
	return nil
}

// decodeCallOrder splits an OpMessagesAnswered body into its epoch and
// sequence number and the OpMessages body that follows.
func decodeCallOrder(body []byte) (epoch, seq uint64, rest []byte, err error) {
	if len(body) < 16 {
		return 0, 0, nil, fmt.Errorf("raftlog: answered messages of %d bytes, want at least 16: %w", len(body), syscall.EINVAL)
	}
	d := wire.NewDecoder(body[:16])
	epoch, seq = d.U64(), d.U64()
	return epoch, seq, body[16:], nil
}

// answer serves an OpMessagesAnswered call: msgs (checked by Handler) are
// queued to node n in the call's order, and the reply carries the node's
// answer to their sender.
func (t *TCPTransport) answer(ctx context.Context, n *Node, epoch, seq uint64, msgs []*pb.Message) ([]byte, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	from := msgs[0].GetFrom()
	for _, m := range msgs {
		if m.GetFrom() != from {
			return nil, fmt.Errorf("raftlog: answered messages from %d and %d in one call: %w", from, m.GetFrom(), syscall.EINVAL)
		}
	}
	out, err := t.callOrder(from).stepInOrder(ctx, n, epoch, seq, from, msgs)
	if err != nil || len(out) == 0 {
		return nil, err
	}
	if len(out) > maxBatch {
		// More than a reply may carry: the rest goes as calls.
		t.Send(out[maxBatch:])
		out = out[:maxBatch]
	}
	return encodeMessages(from, out)
}

// callOrder is where the answered calls from one member stand: the
// newest epoch seen and the sequence number due next in it.
type callOrder struct {
	mu          sync.Mutex
	epoch, next uint64
	moved       chan struct{} // closed and replaced when epoch or next moves
}

func (t *TCPTransport) callOrder(from uint64) *callOrder {
	t.mu.Lock()
	defer t.mu.Unlock()
	o, ok := t.orders[from]
	if !ok {
		o = newCallOrder()
		t.orders[from] = o
	}
	return o
}

func newCallOrder() *callOrder { return &callOrder{moved: make(chan struct{})} }

// await returns when call seq of epoch may queue its messages: the calls
// before it in its epoch have, or its epoch is no longer the newest (a
// call failed and the sender moved on: order is no longer promised), or
// ctx ended. A call of a new epoch starts it.
func (o *callOrder) await(ctx context.Context, epoch, seq uint64) {
	for {
		o.mu.Lock()
		if epoch > o.epoch {
			o.epoch, o.next = epoch, seq
			o.broadcast()
		}
		if epoch != o.epoch || seq <= o.next {
			o.mu.Unlock()
			return
		}
		moved := o.moved
		o.mu.Unlock()
		select {
		case <-moved:
		case <-ctx.Done():
			return
		}
	}
}

// done records that call seq of epoch queued its messages.
func (o *callOrder) done(epoch, seq uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if epoch == o.epoch && seq >= o.next {
		o.next = seq + 1
		o.broadcast()
	}
}

func (o *callOrder) broadcast() {
	close(o.moved)
	o.moved = make(chan struct{})
}
