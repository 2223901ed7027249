package raftlog

import (
	"context"
	"fmt"

	pb "go.etcd.io/raft/v3/raftpb"
)

// An answer collects what a node says back to the member whose messages
// it was just handed (stepAnswered): the messages to that member of the
// Ready that follows the step, and, when that Ready's append holds
// responses for it (an append acknowledgement, a vote: raft sends them
// only once the append is durable), those too, after the write. The
// transport returns them in the reply of the call that brought the
// messages, so a follower acknowledges an append without a call of its
// own: one call per round instead of two, and no wake-up of a sender
// goroutine on either side.
//
// Invariant: an answer is closed exactly once, by the node goroutine
// (when its Ready has no append response for it, or no Ready follows the
// step) or by the appender (after the append that holds its responses is
// durable); msgs is written only before the close, and read only after.
type answer struct {
	from uint64
	msgs []*pb.Message
	done chan struct{}
}

func (a *answer) close() { close(a.done) }

// stepAnswered queues msgs, all from member from, to be stepped on the
// node goroutine (in the order of the calls, as Step's messages are), and
// returns the answer that collects what the node says back to from; the
// caller waits for it with awaitAnswer. A MsgSnap whose files this node
// has not received is dropped as Step drops it.
func (n *Node) stepAnswered(ctx context.Context, from uint64, msgs []*pb.Message) (*answer, error) {
	a := &answer{from: from, done: make(chan struct{})}
	err := n.do(ctx, func() {
		for _, m := range msgs {
			if m.GetType() == pb.MessageType_MsgSnap && !n.haveSnapshot(m.GetSnapshot()) {
				n.log.Warn("raftlog: a snapshot message without its files dropped", "id", n.cfg.ID, "from", m.GetFrom())
				continue
			}
			// Errors are messages raft ignores (a stale term).
			_ = n.rn.Step(m)
		}
		n.answers = append(n.answers, a)
	})
	if err != nil {
		return nil, err
	}
	return a, nil
}

// stepInOrder is what a member does with call seq of epoch from member
// from (an answered call): it queues msgs to node n after the calls
// before it (o), and returns n's answer.
func (o *callOrder) stepInOrder(ctx context.Context, n *Node, epoch, seq, from uint64, msgs []*pb.Message) ([]*pb.Message, error) {
	o.await(ctx, epoch, seq)
	a, err := n.stepAnswered(ctx, from, msgs)
	o.done(epoch, seq)
	if err != nil {
		return nil, err
	}
	return n.awaitAnswer(ctx, a)
}

// awaitAnswer returns a's messages once the node has closed it.
func (n *Node) awaitAnswer(ctx context.Context, a *answer) ([]*pb.Message, error) {
	select {
	case <-a.done:
		return a.msgs, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("raftlog: answer to %d: %w", a.from, ctx.Err())
	case <-n.done:
		return nil, ErrStopped
	}
}

// answerFor is the open answer to member to, if any (node goroutine).
func answerFor(as []*answer, to uint64) *answer {
	for _, a := range as {
		if a.from == to {
			return a
		}
	}
	return nil
}

// closeAnswers closes the answers taken since the last Ready, with what
// they hold: none is left waiting when no Ready follows a step.
func (n *Node) closeAnswers() {
	closeAll(n.answers)
	n.answers = n.answers[:0]
}

func closeAll(as []*answer) {
	for _, a := range as {
		a.close()
	}
}

// routeAnswers puts each of msgs addressed to an open answer's member in
// that answer and returns the others. A snapshot message is never an
// answer: its files are streamed to the member first (Transport.Send), and
// raft waits for the outcome of that stream.
func routeAnswers(as []*answer, msgs []*pb.Message) (rest []*pb.Message) {
	if len(as) == 0 {
		return msgs
	}
	for _, m := range msgs {
		if a := answerFor(as, m.GetTo()); a != nil && m.GetType() != pb.MessageType_MsgSnap {
			a.msgs = append(a.msgs, m)
		} else {
			rest = append(rest, m)
		}
	}
	return rest
}

// awaitingAppend splits the open answers into those the append m holds a
// response for (they wait for its write) and the others.
func awaitingAppend(as []*answer, m *pb.Message) (wait, now []*answer) {
	for _, a := range as {
		held := false
		for _, r := range m.GetResponses() {
			if r.GetTo() == a.from {
				held = true
				break
			}
		}
		if held {
			wait = append(wait, a)
		} else {
			now = append(now, a)
		}
	}
	return wait, now
}
