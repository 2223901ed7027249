package raftlog

import (
	"sync"
	"sync/atomic"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

// appender writes the log on a goroutine of its own: raft's asynchronous
// storage writes (raft.Config.AsyncStorageWrites, doc.go "How the node is
// driven"). The node goroutine hands it each Ready's MsgStorageAppend in
// order and goes on stepping messages and applying while the log is
// synced; in particular a leader takes its followers' acknowledgements
// during its own fsync, so an entry commits as soon as a quorum has it on
// disk, instead of after the leader's next fsync.
//
// Invariants: appends are written in the order they were queued; the
// responses of an append (acknowledgements to peers, and the
// self-addressed ones that tell raft the entries are stable) leave only
// after its write is durable; appends queued together share one fsync
// (the last write of a batch is synced when any of the batch needs it,
// and a synced pebble write makes the earlier unsynced ones durable too).
type appender struct {
	st     *Storage
	send   func([]*pb.Message) // to peers
	self   uint64
	q      chan appendJob
	stop   chan struct{}
	exited chan struct{}

	// Self-addressed responses of finished appends, taken in order by
	// the node goroutine (stepLocal) when kick fires. Never dropped: raft
	// learns that entries are stable only from them.
	mu    sync.Mutex
	resps []*pb.Message
	kick  chan struct{}
	// errc carries the write error that ended the appender.
	errc chan error
	// pending counts the appends queued and not yet written and
	// delivered (idle: none, and no response left for the node).
	pending atomic.Int64
	// written counts the batches written and delivered.
	written atomic.Uint64

	// The term and vote last written: a change of either must be synced
	// (raft's MustSync), a commit index alone need not.
	prevTerm, prevVote uint64
}

// appendJob is a MsgStorageAppend, or (m nil) a barrier closed once every
// append queued before it is durable and its responses delivered. The
// responses of m to the members of answers go in those answers (closed
// once the append is durable) instead of over the transport.
type appendJob struct {
	m       *pb.Message
	answers []*answer
	barrier chan struct{}
}

// maxAppendBatch bounds the appends written with one fsync.
const maxAppendBatch = 256

func newAppender(st *Storage, self uint64, send func([]*pb.Message)) *appender {
	hs, _, _ := st.InitialState()
	a := &appender{
		st: st, send: send, self: self,
		q: make(chan appendJob, 4096), stop: make(chan struct{}), exited: make(chan struct{}),
		kick: make(chan struct{}, 1), errc: make(chan error, 1),
	}
	a.prevTerm, a.prevVote = hs.GetTerm(), hs.GetVote()
	return a
}

func (a *appender) run() {
	defer close(a.exited)
	batch := make([]appendJob, 0, maxAppendBatch)
	for {
		select {
		case <-a.stop:
			return
		case j := <-a.q:
			batch = append(batch[:0], j)
		}
	more:
		for len(batch) < maxAppendBatch && batch[len(batch)-1].m != nil {
			select {
			case j := <-a.q:
				batch = append(batch, j)
			default:
				break more
			}
		}
		if err := a.write(batch); err != nil {
			a.errc <- err
			return
		}
	}
}

// write writes a batch of appends (a barrier can only end it), then
// delivers their responses and releases the barrier.
func (a *appender) write(batch []appendJob) error {
	msgs := make([]*pb.Message, 0, len(batch))
	for _, j := range batch {
		if j.m != nil {
			msgs = append(msgs, j.m)
		}
	}
	// One pass: the HardState of each append, whether the batch must be
	// synced (new entries, a new term or vote: raft's MustSync; a commit
	// index alone need not), and its last write that writes something,
	// which carries the sync: pebble commits an empty batch without
	// touching its WAL.
	hss := make([]*pb.HardState, len(msgs))
	needSync, lastWrite := false, -1
	for i, m := range msgs {
		hs := hardStateOf(m)
		hss[i] = hs
		if len(m.GetEntries()) > 0 || hs != nil {
			lastWrite = i
		}
		if len(m.GetEntries()) > 0 || hs != nil && (hs.GetTerm() != a.prevTerm || hs.GetVote() != a.prevVote) {
			needSync = true
		}
		if hs != nil {
			a.prevTerm, a.prevVote = hs.GetTerm(), hs.GetVote()
		}
	}
	for i := 0; i <= lastWrite; i++ {
		if err := a.st.Save(hss[i], msgs[i].GetEntries(), nil, needSync && i == lastWrite); err != nil {
			return err
		}
	}
	a.deliver(batch)
	a.pending.Add(-int64(len(msgs)))
	a.written.Add(1)
	// Wake the node even when no response is its own: it holds new
	// proposals back while a write is under way (Node.held).
	select {
	case a.kick <- struct{}{}:
	default:
	}
	if last := batch[len(batch)-1]; last.m == nil {
		close(last.barrier)
	}
	return nil
}

// deliver sends the responses of written appends: to peers now (in the
// answer of the call that brought the append's messages, when there is
// one), to this node through resps.
func (a *appender) deliver(batch []appendJob) {
	var local, peers []*pb.Message
	for _, j := range batch {
		if j.m == nil {
			continue
		}
		l, p := splitResponses(a.self, j.m.GetResponses())
		local = append(local, l...)
		peers = append(peers, routeAnswers(j.answers, p)...)
	}
	if len(peers) > 0 {
		a.send(peers)
	}
	for _, j := range batch {
		closeAll(j.answers)
	}
	if len(local) > 0 {
		a.mu.Lock()
		a.resps = append(a.resps, local...)
		a.mu.Unlock()
		select {
		case a.kick <- struct{}{}:
		default:
		}
	}
}

// splitResponses splits an append's responses into those for node self
// and those for its peers.
func splitResponses(self uint64, rs []*pb.Message) (local, peers []*pb.Message) {
	for _, r := range rs {
		if r.GetTo() == self {
			local = append(local, r)
		} else {
			peers = append(peers, r)
		}
	}
	return local, peers
}

// takeLocal returns the self-addressed responses delivered so far.
func (a *appender) takeLocal() []*pb.Message {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := a.resps
	a.resps = nil
	return r
}

// queue hands the appender m, and the answers that wait for its
// responses; it blocks only when 4096 appends wait.
func (a *appender) queue(m *pb.Message, answers []*answer) bool {
	a.pending.Add(1)
	select {
	case a.q <- appendJob{m: m, answers: answers}:
		return true
	case <-a.exited:
		return false
	}
}

// idle reports whether every queued append is written and its responses
// taken by the node (tests wait for a quiet group with it).
func (a *appender) idle() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.pending.Load() == 0 && len(a.resps) == 0
}

// flush waits until every append queued so far is durable and its
// responses delivered; false if the appender stopped (a write failed).
func (a *appender) flush() bool {
	b := make(chan struct{})
	select {
	case a.q <- appendJob{barrier: b}:
	case <-a.exited:
		return false
	}
	select {
	case <-b:
		return true
	case <-a.exited:
		return false
	}
}

// close stops the appender and waits for a write under way.
func (a *appender) close() {
	close(a.stop)
	<-a.exited
}

// hardStateOf is the HardState a MsgStorageAppend carries (nil: none).
func hardStateOf(m *pb.Message) *pb.HardState {
	if m.Term == nil && m.Vote == nil && m.Commit == nil {
		return nil
	}
	hs := &pb.HardState{Term: m.Term, Vote: m.Vote, Commit: m.Commit}
	if raft.IsEmptyHardState(hs) {
		return nil
	}
	return hs
}
