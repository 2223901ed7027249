package raftlog

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
	"google.golang.org/protobuf/proto"
)

// Errors a proposer or reader can tell apart.
var (
	// ErrNotLeader: this node is not the leader (or lost leadership before
	// the request was taken): nothing was proposed. NotLeaderError says
	// which node is leader, if known.
	ErrNotLeader = fmt.Errorf("raftlog: not the leader: %w", syscall.EAGAIN)
	// ErrNotReady: this node was just elected and has not yet applied
	// the entries of earlier terms; nothing was proposed; retry shortly.
	ErrNotReady = fmt.Errorf("raftlog: new leader not ready yet: %w", syscall.EAGAIN)
	// ErrDropped: another entry was committed at the index the proposal
	// was appended at (a new leader overwrote it): it was not applied and
	// never will be; it is safe to propose again.
	ErrDropped = fmt.Errorf("raftlog: proposal dropped by a change of leader, not applied: %w", syscall.EAGAIN)
	// ErrUnknown: the proposal was appended to the log but this node can
	// no longer tell whether it will be applied (it lost leadership before
	// learning the entry's index, or a snapshot replaced its log). A
	// retry needs deduplication above the log.
	ErrUnknown = fmt.Errorf("raftlog: proposal outcome unknown: %w", syscall.ETIMEDOUT)
	// ErrStopped: the node stopped before the request completed; a
	// proposal's fate is unknown.
	ErrStopped = fmt.Errorf("raftlog: node stopped: %w", syscall.EIO)
)

// NotLeaderError is ErrNotLeader with the leader this node knows of (0:
// none known, an election is under way).
type NotLeaderError struct{ Leader uint64 }

func (e *NotLeaderError) Error() string {
	if e.Leader == 0 {
		return "raftlog: not the leader; no leader known"
	}
	return fmt.Sprintf("raftlog: not the leader; the leader is node %d", e.Leader)
}

func (e *NotLeaderError) Unwrap() error { return ErrNotLeader }

// StateMachine is what the log is applied to. The node calls it from its
// one goroutine, in log order. A state machine may also have an Err()
// error method: the node checks it after each Apply and stops (the
// entry's proposer gets ErrStopped) once it reports a failure, such as a
// store that failed a checksum: a member that cannot apply must not go on.
type StateMachine interface {
	// Apply applies the command of the committed entry at index and
	// returns what it did (handed to the proposer, if it is waiting on
	// this node). It must be deterministic and must not fail for reasons
	// outside the command and the state (an error for the command is part
	// of the result); a storage failure should stop the process.
	Apply(index uint64, data []byte) any
	// Applied is the index of the last entry whose effect is durable in
	// the state machine's store (read once, at start: the log is applied
	// again from the entry after it).
	Applied() uint64
	// Snapshot writes a copy of the state into dir, a directory that
	// does not exist yet on Config.Snapshots' file system (a pebble
	// checkpoint), durable when it returns. The state is the one after
	// entry index, the last one applied (entries that are not commands,
	// such as a new leader's empty entry, do not reach Apply: a state
	// machine that records its applied index records index here, so
	// that Applied is at least index after a Restore of this snapshot).
	// The node owns dir afterwards: the files must not change.
	Snapshot(index uint64, dir string) error
	// Restore replaces the state with the copy in dir, taken at index:
	// atomically (after a crash the state is the old one or the new one,
	// never a mix), and without changing or moving dir's files, which
	// the node may send on to another member.
	Restore(index uint64, dir string) error
}

// Transport sends raft messages to other nodes. Send must not block on
// the network: a message that cannot be sent is dropped (raft retries),
// and the transport calls Node.ReportUnreachable. The receiving side hands
// each message to its Node's Step.
type Transport interface {
	Send(msgs []*pb.Message)
}

// Config configures a Node.
type Config struct {
	ID uint64
	// Peers are the initial voters (ids, this node's included), used only
	// to bootstrap an empty log. Every member must be given the same list.
	Peers []uint64
	// Join: this node is being added to a running group (ChangeMembers
	// on its leader): an empty log is not bootstrapped, Peers is ignored,
	// and the node waits for the leader to send it the log or a snapshot.
	Join    bool
	Storage *Storage
	SM      StateMachine
	// Transport is where outgoing messages go.
	Transport Transport
	// ElectionTick and HeartbeatTick are in ticks (defaults 10 and 1).
	ElectionTick, HeartbeatTick int
	// TickInterval is how often the node ticks by itself; 0: never (tests
	// call Tick).
	TickInterval time.Duration
	// CommitNoticeDelay is how long a leader with a clock (TickInterval
	// > 0) holds back an append that only tells a follower a new commit
	// index, for an append with entries to carry the index instead
	// (hold.go); 0: DefaultCommitNoticeDelay.
	CommitNoticeDelay time.Duration
	// LaggardDelay is how long a leader with a clock holds back the
	// appends to a follower it does not need for its quorum, merging
	// them into one (hold.go); 0: DefaultLaggardDelay; negative: never
	// (every follower receives every append at once).
	LaggardDelay time.Duration
	// Snapshots is where the state machine's snapshots are kept, made
	// and received (nil: none; the log is never compacted and a member
	// that fell behind a peer's compacted log cannot catch up).
	Snapshots *Snapshots
	// SnapshotEvery: after this many applied entries since the last
	// snapshot, the node takes a snapshot and compacts the log, keeping
	// the last SnapshotKeep entries. 0: never.
	SnapshotEvery, SnapshotKeep uint64
	// OnLeader, if set, is called on the node goroutine when this node,
	// leader of term, has applied its term's first entry: every entry of
	// earlier terms is applied then, so the state machine holds all that
	// any earlier leader had committed. A proposer that decides things
	// from the applied state (meta's inode allocator) resynchronises here.
	OnLeader func(term uint64)
	// OnRole, if set, is called on the node goroutine each time this
	// node becomes raft's leader (true: as soon as it is elected, before
	// OnLeader) or stops being it (false: deposed, partitioned away,
	// removed). A node starts as a follower and is not told so.
	OnRole func(leader bool)
	// OnConfChange, if set, is called on the node goroutine when a
	// configuration change is applied, with the change and the new
	// configuration (a transport learns new members' addresses here).
	OnConfChange func(cc *pb.ConfChangeV2, cs *pb.ConfState)
	// OnAddresses, if set, is called with the members' addresses (see
	// Node.Addresses) when the node starts and whenever they change (on
	// the node goroutine): a transport adds the members it did not know.
	OnAddresses func(addrs map[uint64]string)
	Logger      *slog.Logger
}

// Node runs one member of a raft group: a RawNode driven by one goroutine
// (see doc.go for the order of a Ready's steps).
type Node struct {
	cfg  Config
	rn   *raft.RawNode
	st   *Storage
	sm   StateMachine
	log  *slog.Logger
	idHi uint64 // the high bits of this node's proposal ids

	reqs  chan func()
	recv  chan *pb.Message
	ap    *appender // writes the log (appender.go)
	ticks chan struct{}
	stop  chan struct{}
	done  chan struct{}

	// Owned by the node goroutine.
	nextID   uint64
	waiting  map[uint64]*waiter   // proposal id → proposer
	byIndex  map[uint64]uint64    // log index → id of the proposal appended there
	reads    map[uint64]*readWait // read request id → reader
	readyRds []*readWait          // reads whose index is known, waiting for apply
	// answers are the StepAnswered calls stepped since the last Ready
	// (answer.go): that Ready's messages to their members are put in
	// them, and they close with it or with its append.
	answers []*answer
	// held are proposals taken but not yet handed to raft: while this
	// leader's log write is under way they wait, and are proposed
	// together once it is done (flushHeld), so one Ready, one append and
	// one message to each follower carry them all instead of one each.
	// They wait for no more than the end of the write under way when the
	// first was taken (the appender's written count moves), and for none
	// when the appender is idle.
	held []heldProposal
	// heldSince is the appender's written count when the first held
	// proposal was taken: they wait for one write at most.
	heldSince uint64
	// heldApps are the appends held back per follower (hold.go), and
	// holdTimer fires when the first of them is due.
	heldApps  map[uint64]*heldApp
	holdTimer *time.Timer
	// laggards are the followers this leader last chose to leave out of
	// its quorum, and matches when it saw each follower's Match move
	// (hold.go, progressStates).
	laggards map[uint64]bool
	matches  map[uint64]matchSeen
	states   map[uint64]tracker.StateType // progressStates' answer, reused
	applied  uint64
	snapIdx  uint64
	// leader: raft's role as last told to Config.OnRole.
	leader bool
	// readyTerm is the term in which this node, as leader, applied its
	// term's first entry: it takes proposals only in that term.
	readyTerm uint64
	cs        *pb.ConfState
	// confChanged: a configuration change was applied since the last
	// snapshot. The next Ready takes one: a member added to the group
	// installs a snapshot only if its configuration includes the member
	// (raft refuses one that does not), so the leader's must be newer than
	// the change.
	confChanged bool
	// addrs are the members' addresses: from the changes that added them
	// (ChangeMembers' addr), kept in the log with the configuration and
	// in every snapshot, so a member learns them after a restart and a
	// new member from the snapshot it joins with.
	addrs map[uint64]string

	status    atomic.Pointer[Status]
	members   atomic.Pointer[pb.ConfState] // a copy of cs for readers
	addrsCopy atomic.Pointer[map[uint64]string]
	// changed is closed and replaced when the status changes (tests wait
	// on it instead of sleeping).
	chmu    sync.Mutex
	changed chan struct{}
}

// Status is what a node knows of the group.
type Status struct {
	ID, Leader, Term    uint64
	Commit, Applied     uint64
	IsLeader, Stopped   bool
	LastIndex, Snapshot uint64
	// Ready: IsLeader, and the node applied its term's first entry: it
	// takes proposals (see Config.OnLeader).
	Ready bool
}

type waiter struct {
	term  uint64 // term the proposal was made in
	index uint64 // where it was appended (0: not yet known)
	ch    chan proposalResult
}

type proposalResult struct {
	v   any
	err error
}

// heldProposal is a proposal taken by the node goroutine and not yet
// given to raft (Node.held): its waiter is in Node.waiting.
type heldProposal struct {
	id   uint64
	data []byte
}

// maxHeld bounds the proposals held back for one Ready.
const maxHeld = 256

type readWait struct {
	index uint64
	ch    chan error
}

// maxDrain bounds the events a node takes between two Readys.
const maxDrain = 1024

// NewNode starts a node on its storage: an empty log with Config.Peers is
// bootstrapped; otherwise the node restarts from the log's HardState and
// entries, and the state machine is restored from the log's snapshot if it
// is behind it.
func NewNode(cfg Config) (*Node, error) {
	if cfg.ID == 0 || cfg.ID >= 1<<16 {
		return nil, fmt.Errorf("raftlog: node id %d: ids are 1 to 65535", cfg.ID)
	}
	if cfg.Join {
		cfg.Peers = nil
	}
	if len(cfg.Peers) > 0 {
		seen := map[uint64]bool{}
		for _, id := range cfg.Peers {
			if id == 0 || id >= 1<<16 || seen[id] {
				return nil, fmt.Errorf("raftlog: peers %v: ids must be distinct, 1 to 65535", cfg.Peers)
			}
			seen[id] = true
		}
		if !seen[cfg.ID] {
			return nil, fmt.Errorf("raftlog: peers %v do not include this node's id %d", cfg.Peers, cfg.ID)
		}
	}
	if cfg.Storage == nil || cfg.SM == nil || cfg.Transport == nil {
		return nil, errors.New("raftlog: Config needs Storage, SM and Transport")
	}
	if cfg.ElectionTick == 0 {
		cfg.ElectionTick = 10
	}
	if cfg.HeartbeatTick == 0 {
		cfg.HeartbeatTick = 1
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	n := &Node{
		cfg: cfg, st: cfg.Storage, sm: cfg.SM, log: cfg.Logger,
		reqs: make(chan func(), 256), recv: make(chan *pb.Message, 1024), ticks: make(chan struct{}, 16),
		stop: make(chan struct{}), done: make(chan struct{}),
		waiting: map[uint64]*waiter{}, byIndex: map[uint64]uint64{}, reads: map[uint64]*readWait{},
		changed: make(chan struct{}),
	}
	// Proposal ids are the node id in the top 16 bits and a random
	// counter: an entry proposed before a restart can never wake a
	// proposer after it.
	var seed [8]byte
	rand.Read(seed[:])
	n.idHi = cfg.ID << 48
	n.nextID = binary.LittleEndian.Uint64(seed[:]) & (1<<48 - 1)

	snap, err := cfg.Storage.Snapshot()
	if err != nil {
		return nil, err
	}
	n.snapIdx = snap.GetMetadata().GetIndex()
	n.applied = cfg.SM.Applied()
	if n.applied < n.snapIdx {
		// The log was compacted past what the state machine holds (a
		// snapshot was received and the process stopped before restoring
		// it): restore it now.
		if err := n.restore(snap); err != nil {
			return nil, err
		}
	}
	hs, cs, _ := cfg.Storage.InitialState()
	last, _ := cfg.Storage.LastIndex()
	if n.applied > last {
		return nil, fmt.Errorf("raftlog: the state machine applied entry %d but the log ends at %d: the log is not this state's", n.applied, last)
	}
	// The state machine may be ahead of the commit index the log recorded
	// (commit index changes are written unsynced, while a state machine's
	// store has a life of its own): raft starts from the recorded commit
	// index, and the entries up to n.applied, which it delivers again once
	// the leader confirms they are committed, are skipped (apply).
	n.cs = cs
	n.publishMembers()
	n.addrs = cfg.Storage.Addresses()
	n.publishAddrs()
	rc := &raft.Config{
		ID: cfg.ID, ElectionTick: cfg.ElectionTick, HeartbeatTick: cfg.HeartbeatTick,
		Storage: cfg.Storage, Applied: min(n.applied, hs.GetCommit()),
		MaxSizePerMsg: 1 << 20, MaxInflightMsgs: 256, MaxUncommittedEntriesSize: 64 << 20,
		// CheckQuorum: a leader cut off from a majority steps down after an
		// election timeout; PreVote: a node coming back from a partition
		// does not disrupt the group with a higher term.
		CheckQuorum: true, PreVote: true,
		// A leader that removed itself steps down once the change is
		// applied (else it would lead a group it is not in until it
		// fails).
		StepDownOnRemoval: true,
		ReadOnlyOption:    raft.ReadOnlySafe,
		// Proposals go to the leader only: a follower tells its caller who
		// the leader is instead of forwarding (clients find the leader).
		DisableProposalForwarding: true,
		// The log is written by the appender, off the node goroutine.
		AsyncStorageWrites: true,
		Logger:             raftLogger{cfg.Logger},
	}
	n.rn, err = raft.NewRawNode(rc)
	if err != nil {
		return nil, fmt.Errorf("raftlog: %w", err)
	}
	if last == 0 && raft.IsEmptyHardState(hs) && !cfg.Join {
		if len(cfg.Peers) == 0 {
			return nil, errors.New("raftlog: an empty log needs Config.Peers to bootstrap")
		}
		peers := make([]raft.Peer, len(cfg.Peers))
		for i, id := range cfg.Peers {
			peers[i] = raft.Peer{ID: id}
		}
		if err := n.rn.Bootstrap(peers); err != nil {
			return nil, fmt.Errorf("raftlog: bootstrap: %w", err)
		}
	}
	n.ap = newAppender(cfg.Storage, cfg.ID, cfg.Transport.Send)
	go n.ap.run()
	n.publish()
	go n.run()
	return n, nil
}

// Stop stops the node goroutine; waiting proposers and readers get
// ErrStopped. It does not close the storage.
func (n *Node) Stop() {
	select {
	case <-n.stop:
	default:
		close(n.stop)
	}
	<-n.done
}

// Tick advances the node's logical clock by one tick.
func (n *Node) Tick() {
	select {
	case n.ticks <- struct{}{}:
	case <-n.done:
	}
}

// Step hands the node a message from another node. It drops the message
// when the node is stopped or its inbox is full (raft retries), and a
// MsgSnap whose snapshot files this node has not received and checked
// (they come first, see snapstream.go).
func (n *Node) Step(m *pb.Message) {
	if m.GetType() == pb.MessageType_MsgSnap && !n.haveSnapshot(m.GetSnapshot()) {
		n.log.Warn("raftlog: a snapshot message without its files dropped", "id", n.cfg.ID, "from", m.GetFrom())
		return
	}
	select {
	case n.recv <- m:
	default:
	}
}

// stepWait hands the node a message, waiting for room in its inbox.
func (n *Node) stepWait(ctx context.Context, m *pb.Message) error {
	select {
	case n.recv <- m:
		return nil
	case <-n.done:
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (n *Node) haveSnapshot(snap *pb.Snapshot) bool {
	if n.cfg.Snapshots == nil {
		return false
	}
	d, err := DecodeSnapshotDesc(snap.GetData())
	return err == nil && d.Index == snap.GetMetadata().GetIndex() && n.cfg.Snapshots.Has(d)
}

// restore restores the state machine from the sealed snapshot snap.
func (n *Node) restore(snap *pb.Snapshot) error {
	idx := snap.GetMetadata().GetIndex()
	if n.cfg.Snapshots == nil {
		return fmt.Errorf("raftlog: restore snapshot at %d: no snapshot directory configured", idx)
	}
	d, err := DecodeSnapshotDesc(snap.GetData())
	if err != nil {
		return fmt.Errorf("raftlog: restore snapshot at %d: %w", idx, err)
	}
	if !n.cfg.Snapshots.Has(d) {
		return fmt.Errorf("raftlog: restore snapshot at %d: its files (%s) are missing: wipe this member and let it re-sync", idx, n.cfg.Snapshots.Path(d))
	}
	if err := n.sm.Restore(idx, n.cfg.Snapshots.Path(d)); err != nil {
		return fmt.Errorf("raftlog: restore snapshot at %d: %w", idx, err)
	}
	n.applied, n.snapIdx = idx, idx
	if d.Addrs != nil {
		n.addrs = maps.Clone(d.Addrs)
		n.publishAddrs()
	}
	n.cfg.Snapshots.prune(d)
	n.log.Info("raftlog: state restored from a snapshot", "id", n.cfg.ID, "index", idx, "bytes", d.Size())
	return nil
}

// TransferLeadership asks this node, if leader, to hand leadership to
// member to (raft's leader transfer: the leader brings to's log up to
// date, then tells it to campaign at once). It returns when the request
// was taken; watch Status for the outcome.
func (n *Node) TransferLeadership(ctx context.Context, to uint64) error {
	ch := make(chan error, 1)
	if err := n.do(ctx, func() {
		bs := n.rn.BasicStatus()
		if bs.RaftState != raft.StateLeader {
			ch <- &NotLeaderError{Leader: bs.Lead}
			return
		}
		n.rn.TransferLeader(to)
		ch <- nil
	}); err != nil {
		return err
	}
	select {
	case err := <-ch:
		return err
	case <-n.done:
		return ErrStopped
	}
}

// Snapshots is the node's snapshot directory (nil: none).
func (n *Node) Snapshots() *Snapshots { return n.cfg.Snapshots }

// Campaign makes the node start an election now (tests, leadership
// transfer by an operator).
func (n *Node) Campaign(ctx context.Context) error {
	return n.do(ctx, func() { _ = n.rn.Campaign() })
}

// ReportUnreachable tells raft that a message to id could not be sent.
// It never blocks (a transport may call it from the node's own Send); a
// report that finds the node busy is dropped, as raft tolerates.
func (n *Node) ReportUnreachable(id uint64) { n.reportUnreachable(id) }

// ReportSnapshot tells raft whether a snapshot sent to id arrived; a
// transport must report every MsgSnap it was given. It never blocks, and
// the report is never dropped.
func (n *Node) ReportSnapshot(id uint64, status raft.SnapshotStatus) { n.reportSnapshot(id, status) }

func (n *Node) reportUnreachable(id uint64) { n.try(func() { n.rn.ReportUnreachable(id) }) }

func (n *Node) reportSnapshot(id uint64, status raft.SnapshotStatus) {
	f := func() { n.rn.ReportSnapshot(id, status) }
	select {
	case n.reqs <- f:
	default:
		// Unlike an unreachable report this one must not be dropped:
		// raft keeps the follower paused until it hears how the
		// snapshot went. The caller may be the node goroutine itself
		// (Send), which cannot wait for its own queue.
		go func() { _ = n.do(context.Background(), f) }()
	}
}

// reportSnapshotWait is ReportSnapshot for a snapshot sender's own
// goroutine: it waits for the node to take the report (raft keeps a
// follower's progress paused until it hears how a snapshot went).
func (n *Node) reportSnapshotWait(id uint64, status raft.SnapshotStatus) {
	_ = n.do(context.Background(), func() { n.rn.ReportSnapshot(id, status) })
}

// try runs f on the node goroutine if it can be queued at once.
func (n *Node) try(f func()) {
	select {
	case n.reqs <- f:
	default:
	}
}

// do runs f on the node goroutine.
func (n *Node) do(ctx context.Context, f func()) error {
	select {
	case n.reqs <- f:
		return nil
	case <-n.done:
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Status returns what the node knows now.
func (n *Node) Status() Status { return *n.status.Load() }

// Changed returns a channel closed at the next change of Status.
func (n *Node) Changed() <-chan struct{} {
	n.chmu.Lock()
	defer n.chmu.Unlock()
	return n.changed
}

// Propose replicates data and returns, once the entry is committed and
// applied on this node, what StateMachine.Apply returned for it. A node
// that is not the leader fails at once with a *NotLeaderError. If ctx ends
// or the node stops before the entry is applied the error says so, and the
// entry may or may not be committed later: the caller must treat the
// outcome as unknown (a retry needs deduplication above the log).
func (n *Node) Propose(ctx context.Context, data []byte) (any, error) {
	return n.ProposeIf(ctx, data, nil)
}

// ProposeIf is Propose that first runs check on the node goroutine, once
// the node is known to be a ready leader (see Config.OnLeader), and
// proposes nothing if check fails: a proposer validates there what
// OnLeader may have changed (an allocator reset at a change of leader).
func (n *Node) ProposeIf(ctx context.Context, data []byte, check func() error) (any, error) {
	ch := make(chan proposalResult, 1)
	err := n.do(ctx, func() {
		bs := n.rn.BasicStatus()
		if bs.RaftState != raft.StateLeader {
			ch <- proposalResult{err: &NotLeaderError{Leader: bs.Lead}}
			return
		}
		if n.readyTerm != bs.GetTerm() {
			ch <- proposalResult{err: ErrNotReady}
			return
		}
		if check != nil {
			if err := check(); err != nil {
				ch <- proposalResult{err: err}
				return
			}
		}
		n.nextID = (n.nextID + 1) & (1<<48 - 1)
		id := n.idHi | n.nextID
		buf := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(data)), id)
		n.waiting[id] = &waiter{term: bs.GetTerm(), ch: ch}
		if len(n.held) == 0 {
			n.heldSince = n.ap.written.Load()
		}
		n.held = append(n.held, heldProposal{id: id, data: append(buf, data...)})
	})
	if err != nil {
		return nil, err
	}
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("raftlog: proposal outcome unknown: %w", ctx.Err())
	case <-n.done:
		// The node may have delivered the result just before stopping.
		select {
		case r := <-ch:
			return r.v, r.err
		default:
		}
		return nil, ErrStopped
	}
}

// ReadIndex returns once this node, as leader, has confirmed with a quorum
// that it was still leader when the read arrived, and has applied every
// entry committed by then: a read of the state machine after it sees every
// change acknowledged before ReadIndex was called (linearizable). A node
// that is not leader fails with *NotLeaderError; a leader cut off from
// its quorum never confirms, and the call ends with ctx.
func (n *Node) ReadIndex(ctx context.Context) error {
	ch := make(chan error, 1)
	err := n.do(ctx, func() {
		if n.rn.BasicStatus().RaftState != raft.StateLeader {
			ch <- &NotLeaderError{Leader: n.rn.BasicStatus().Lead}
			return
		}
		n.nextID = (n.nextID + 1) & (1<<48 - 1)
		id := n.idHi | n.nextID
		n.reads[id] = &readWait{ch: ch}
		n.rn.ReadIndex(binary.BigEndian.AppendUint64(nil, id))
	})
	if err != nil {
		return err
	}
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return fmt.Errorf("raftlog: read index: %w", ctx.Err())
	case <-n.done:
		return ErrStopped
	}
}

func (n *Node) run() {
	defer close(n.done)
	defer n.failAll(ErrStopped)
	defer n.ap.close() // no write under way once the node is done
	defer func() {
		// raft panics when its storage fails a read; once the log is known
		// to be corrupt that is a stop with an error, not a crash.
		if r := recover(); r != nil {
			if err := n.st.Err(); err != nil {
				n.log.Error("raftlog: node stops: the log is corrupt", "id", n.cfg.ID, "err", err, "panic", fmt.Sprint(r), "hint", RecoverHint)
				return
			}
			panic(r)
		}
	}()
	var tick <-chan time.Time
	if n.cfg.TickInterval > 0 {
		t := time.NewTicker(n.cfg.TickInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		// Take whatever is waiting before each Ready, so that the
		// proposals and messages that arrived during the last one's fsync
		// share the next (raft's group commit: one fsync for all their
		// entries, on the leader and on each follower).
		if !n.drain(tick) {
			return
		}
		if len(n.held) > 0 && (n.ap.pending.Load() == 0 || n.ap.written.Load() != n.heldSince || len(n.held) >= maxHeld) {
			n.flushHeld()
		}
		if n.rn.HasReady() {
			if err := n.handleReady(); err != nil {
				n.log.Error("raftlog: node stops: cannot persist or apply the log", "id", n.cfg.ID, "err", err)
				return
			}
			continue
		}
		// Nothing to say: the members whose messages were just stepped
		// get an empty answer.
		n.closeAnswers()
		select {
		case <-n.stop:
			return
		case <-tick:
			n.rn.Tick()
		case <-n.ticks:
			n.rn.Tick()
		case m := <-n.recv:
			// Errors are messages for a peer raft does not know or a
			// stale term: raft ignores them.
			_ = n.rn.Step(m)
		case f := <-n.reqs:
			f()
		case <-n.ap.kick:
			n.stepLocal()
		case <-n.holdDueC():
			n.sendDueAppends(time.Now())
		case err := <-n.ap.errc:
			n.log.Error("raftlog: node stops: cannot persist the log", "id", n.cfg.ID, "err", err)
			return
		}
	}
}

// flushHeld hands the held proposals to raft as one MsgProp (raft then
// sends one append to each follower for all of them, where a proposal
// each makes one each), in the order they were taken. A proposal whose
// waiter is gone (resolved meanwhile) is not proposed; held ones are
// failed as never proposed, nothing of them in the log, if the term
// changed since they were taken or raft refuses them (this node is no
// longer leader, or too much is uncommitted).
func (n *Node) flushHeld() {
	bs := n.rn.BasicStatus()
	ents := make([]*pb.Entry, 0, len(n.held))
	ids := make([]uint64, 0, len(n.held))
	for i, h := range n.held {
		n.held[i] = heldProposal{}
		w, ok := n.waiting[h.id]
		if !ok {
			continue
		}
		switch {
		case bs.RaftState != raft.StateLeader || w.term != bs.GetTerm():
			n.resolve(h.id, proposalResult{err: &NotLeaderError{Leader: bs.Lead}})
		case n.readyTerm != bs.GetTerm():
			n.resolve(h.id, proposalResult{err: ErrNotReady})
		default:
			ents = append(ents, &pb.Entry{Data: h.data})
			ids = append(ids, h.id)
		}
	}
	n.held = n.held[:0]
	if len(ents) == 0 {
		return
	}
	m := &pb.Message{Type: pb.MessageType_MsgProp.Enum(), From: new(n.cfg.ID), Entries: ents}
	if err := n.rn.Step(m); err != nil {
		for _, id := range ids {
			n.resolve(id, proposalResult{err: fmt.Errorf("raftlog: propose: %v: %w", err, ErrNotLeader)})
		}
	}
}

// stepLocal steps the self-addressed responses of finished appends (the
// leader's acknowledgement of its own entries, MsgStorageAppendResp).
func (n *Node) stepLocal() {
	ms := n.ap.takeLocal()
	for _, m := range ms {
		_ = n.rn.Step(m)
	}
	if len(ms) > 0 {
		n.publish() // the log's end moved
	}
}

// drain takes up to maxDrain waiting ticks, messages and requests without
// blocking; false when the node is told to stop. Ticks are taken here too:
// under a steady load there is a Ready after every drain, and a leader
// that stopped ticking would stop sending heartbeats.
func (n *Node) drain(tick <-chan time.Time) bool {
	for range maxDrain {
		select {
		case <-n.stop:
			return false
		case <-tick:
			n.rn.Tick()
		case <-n.ticks:
			n.rn.Tick()
		case m := <-n.recv:
			_ = n.rn.Step(m)
		case f := <-n.reqs:
			f()
		case <-n.ap.kick:
			n.stepLocal()
		default:
			return true
		}
	}
	return true
}

// handleReady does one Ready's work (doc.go, "How the node is driven";
// raft's asynchronous storage writes): messages to peers leave at once
// (raft holds back the acknowledgements and votes that promise something
// about this node's disk: they are the append's responses); the log
// append goes to the appender, which syncs it and then delivers its
// responses; the committed entries, which raft hands over only once they
// are durable in this node's log, are applied here, and the apply's
// response stepped. A received snapshot is written and restored here,
// after every earlier append.
func (n *Node) handleReady() error {
	rd := n.rn.Ready()
	n.noteIndexes(rd.Entries)
	peers := make([]*pb.Message, 0, len(rd.Messages)) // grown one by one: an allocation each time
	var appendMsg, applyMsg *pb.Message
	for _, m := range rd.Messages {
		switch m.GetTo() {
		case raft.LocalAppendThread:
			appendMsg = m
		case raft.LocalApplyThread:
			applyMsg = m
		default:
			peers = append(peers, m)
		}
	}
	peers = n.holdAppends(peers)
	// What goes to a member whose messages were just stepped goes back
	// in the reply of its call (answer.go); the rest leaves at once.
	peers = routeAnswers(n.answers, peers)
	answers := n.answers
	n.answers = nil
	if appendMsg != nil {
		if snap := appendMsg.GetSnapshot(); snap != nil && !raft.IsEmptySnap(snap) {
			if err := n.saveSnapshot(appendMsg); err != nil {
				return err
			}
		} else {
			// An answer the append holds a response for (an append
			// acknowledgement, a vote) closes once the append is durable.
			wait, now := awaitingAppend(answers, appendMsg)
			if !n.ap.queue(appendMsg, wait) {
				return fmt.Errorf("raftlog: the log writer stopped")
			}
			answers = now
		}
	}
	// The messages leave after the append is queued, not before: both
	// wake a goroutine (the appender; a caller per member, Send), and the
	// one readied last is the next to run on this thread once the node
	// waits, while the other waits for another thread to pick it up (on
	// this VM 25-90 µs: waking an idle thread). The append's pebble
	// commit spends about 30 µs of CPU before it waits for its fsync; a
	// caller writes its call in a few. Queued the other way round, the
	// appends to the followers left 34 µs (median) after the Ready, with
	// the followers' fsyncs, not the leader's, on a create's critical
	// path (docs/performance.md, "Where a replicated create waits").
	if len(peers) > 0 {
		n.cfg.Transport.Send(peers)
	}
	if appendMsg != nil && applyMsg != nil && n.rn.BasicStatus().RaftState != raft.StateLeader {
		// A follower lets its appender run now, on this thread, and
		// applies after: the append's fsync is what the leader waits for,
		// the apply nobody. Otherwise the appender waited for the apply
		// (about 30 µs) or for another thread to wake (34 µs median).
		// A leader does not: its apply answers the proposers.
		runtime.Gosched()
	}
	closeAll(answers)
	for _, rs := range rd.ReadStates {
		if len(rs.RequestCtx) != 8 {
			continue
		}
		id := binary.BigEndian.Uint64(rs.RequestCtx)
		if w, ok := n.reads[id]; ok {
			delete(n.reads, id)
			w.index = rs.Index
			n.readyRds = append(n.readyRds, w)
		}
	}
	if applyMsg != nil {
		if err := n.apply(applyMsg.GetEntries()); err != nil {
			return err
		}
		for _, r := range applyMsg.GetResponses() {
			_ = n.rn.Step(r)
		}
	}
	if rd.SoftState != nil {
		leader := rd.SoftState.RaftState == raft.StateLeader
		if !leader {
			// Reads waiting for a quorum's confirmation will not get it
			// from this node any more.
			n.failReads(&NotLeaderError{Leader: rd.SoftState.Lead})
		}
		if leader != n.leader {
			n.leader = leader
			if n.cfg.OnRole != nil {
				n.cfg.OnRole(leader)
			}
		}
	}
	n.wakeReads()
	n.dropUnplaced()
	n.maybeSnapshot()
	n.publish()
	return nil
}

// saveSnapshot writes an append that carries a snapshot received from the
// leader, synced, once every earlier append is durable, and restores the
// state machine from it before its responses go out (raft then counts
// the snapshot applied).
func (n *Node) saveSnapshot(m *pb.Message) error {
	if !n.ap.flush() {
		return fmt.Errorf("raftlog: the log writer stopped")
	}
	n.stepLocal()
	snap := m.GetSnapshot()
	if err := n.st.Save(hardStateOf(m), m.GetEntries(), snap, true); err != nil {
		return err
	}
	idx := snap.GetMetadata().GetIndex()
	if err := n.restore(snap); err != nil {
		return err
	}
	// What the snapshot covers was applied without this node seeing
	// the entries: the proposals appended there may or may not be in it.
	for i, id := range n.byIndex {
		if i <= idx {
			delete(n.byIndex, i)
			n.resolve(id, proposalResult{err: fmt.Errorf("raftlog: a snapshot replaced the log: %w", ErrUnknown)})
		}
	}
	n.cs = proto.Clone(pb.EnsureConfState(snap.GetMetadata().GetConfState())).(*pb.ConfState)
	if n.cfg.OnConfChange != nil {
		n.cfg.OnConfChange(nil, n.cs)
	}
	n.publishMembers()
	local, peers := splitResponses(n.cfg.ID, m.GetResponses())
	for _, r := range local {
		_ = n.rn.Step(r)
	}
	if len(peers) > 0 {
		n.cfg.Transport.Send(peers)
	}
	return nil
}

func (n *Node) apply(ents []*pb.Entry) error {
	for _, e := range ents {
		idx := e.GetIndex()
		if idx <= n.applied {
			continue
		}
		if pid, ok := n.byIndex[idx]; ok {
			delete(n.byIndex, idx)
			if entryID(e) != pid {
				n.resolve(pid, proposalResult{err: ErrDropped})
			}
		}
		switch e.GetType() {
		case pb.EntryNormal:
			if len(e.GetData()) < 8 {
				// The empty entry a new leader appends first.
				if bs := n.rn.BasicStatus(); bs.RaftState == raft.StateLeader && e.GetTerm() == bs.GetTerm() {
					n.applied = idx
					n.readyTerm = e.GetTerm()
					if n.cfg.OnLeader != nil {
						n.cfg.OnLeader(e.GetTerm())
					}
				}
				break
			}
			id := binary.BigEndian.Uint64(e.GetData())
			v := n.sm.Apply(idx, e.GetData()[8:])
			if f, ok := n.sm.(interface{ Err() error }); ok {
				if err := f.Err(); err != nil {
					// The state machine's store failed: applying more
					// would diverge from the other members.
					return fmt.Errorf("raftlog: state machine failed at entry %d: %w", idx, err)
				}
			}
			n.resolve(id, proposalResult{v: v})
		case pb.EntryConfChange, pb.EntryConfChangeV2:
			var cc pb.ConfChangeI
			if e.GetType() == pb.EntryConfChange {
				var c pb.ConfChange
				if err := proto.Unmarshal(e.GetData(), &c); err != nil {
					return fmt.Errorf("raftlog: conf change at %d: %w", idx, err)
				}
				cc = &c
			} else {
				var c pb.ConfChangeV2
				if err := proto.Unmarshal(e.GetData(), &c); err != nil {
					return fmt.Errorf("raftlog: conf change at %d: %w", idx, err)
				}
				cc = &c
			}
			n.cs = n.rn.ApplyConfChange(cc)
			v2 := cc.AsV2()
			addrsChanged := n.noteAddrs(v2)
			if err := n.st.SetConfState(n.cs, n.addrs); err != nil {
				return err
			}
			if addrsChanged {
				n.publishAddrs()
			}
			if n.cfg.OnConfChange != nil {
				n.cfg.OnConfChange(v2, n.cs)
			}
			if len(v2.GetContext()) >= 8 {
				n.resolve(binary.BigEndian.Uint64(v2.GetContext()), proposalResult{v: n.cs})
			}
			n.publishMembers()
			// Not the bootstrap's entries (ConfChange, not V2): nobody
			// joins from them.
			n.confChanged = n.confChanged || e.GetType() == pb.EntryConfChangeV2
		}
		n.applied = idx
	}
	return nil
}

// entryID is the proposal id an entry carries (0: none).
func entryID(e *pb.Entry) uint64 {
	switch {
	case e.GetType() == pb.EntryNormal && len(e.GetData()) >= 8:
		return binary.BigEndian.Uint64(e.GetData())
	case e.GetType() == pb.EntryConfChangeV2:
		var cc pb.ConfChangeV2
		if proto.Unmarshal(e.GetData(), &cc) == nil && len(cc.GetContext()) >= 8 {
			return binary.BigEndian.Uint64(cc.GetContext())
		}
	}
	return 0
}

// noteIndexes records where this node's proposals were appended, so that
// each is resolved when that index is applied: by its own entry (the
// result), or by another one (ErrDropped, a definite failure).
func (n *Node) noteIndexes(ents []*pb.Entry) {
	if len(n.waiting) == 0 {
		return
	}
	for _, e := range ents {
		id := entryID(e)
		if id == 0 {
			continue
		}
		if w, ok := n.waiting[id]; ok && w.index == 0 {
			w.index = e.GetIndex()
			n.byIndex[w.index] = id
		}
	}
}

func (n *Node) resolve(id uint64, r proposalResult) {
	if w, ok := n.waiting[id]; ok {
		delete(n.waiting, id)
		w.ch <- r
	}
}

// dropUnplaced resolves the proposals of an earlier term that never
// reached this node's Ready (raft truncated them from its unstable log
// when it lost leadership): no index will resolve them. Messages carrying
// them may have left, so their outcome is unknown.
func (n *Node) dropUnplaced() {
	if len(n.waiting) == 0 {
		return
	}
	st := n.rn.BasicStatus()
	if st.RaftState == raft.StateLeader {
		return
	}
	// Held proposals never reached raft: not proposed (flushHeld fails
	// them so on a node that is not leader).
	n.flushHeld()
	for id, w := range n.waiting {
		if w.index == 0 && w.term < st.GetTerm() {
			n.resolve(id, proposalResult{err: fmt.Errorf("raftlog: leadership lost since the proposal (term %d, now %d): %w", w.term, st.GetTerm(), ErrUnknown)})
		}
	}
}

func (n *Node) wakeReads() {
	k := 0
	for _, w := range n.readyRds {
		if w.index <= n.applied {
			w.ch <- nil
			continue
		}
		n.readyRds[k] = w
		k++
	}
	clear(n.readyRds[k:])
	n.readyRds = n.readyRds[:k]
}

func (n *Node) failReads(err error) {
	for id, w := range n.reads {
		delete(n.reads, id)
		w.ch <- err
	}
}

func (n *Node) failAll(err error) {
	for id := range n.waiting {
		n.resolve(id, proposalResult{err: err})
	}
	clear(n.byIndex)
	n.failReads(err)
	for _, w := range n.readyRds {
		w.ch <- err
	}
	n.readyRds = nil
	n.publishStopped()
}

func (n *Node) maybeSnapshot() {
	if n.cfg.SnapshotEvery == 0 || n.cfg.Snapshots == nil || n.applied == n.snapIdx {
		return
	}
	if n.applied-n.snapIdx < n.cfg.SnapshotEvery && !n.confChanged {
		return
	}
	if err := n.snapshot(); err != nil {
		n.log.Error("raftlog: snapshot failed; the log is not compacted", "id", n.cfg.ID, "applied", n.applied, "err", err)
	}
}

// snapshot has the state machine write a snapshot at the applied index,
// seals it, records it in the log and compacts the log.
func (n *Node) snapshot() error {
	term, err := n.st.Term(n.applied)
	if err != nil {
		return err
	}
	tmp := n.cfg.Snapshots.tempDir()
	if err := n.sm.Snapshot(n.applied, tmp); err != nil {
		_ = n.cfg.Snapshots.fs.RemoveAll(tmp)
		return err
	}
	d, err := n.cfg.Snapshots.seal(tmp, n.applied, term, n.addrs)
	if err != nil {
		_ = n.cfg.Snapshots.fs.RemoveAll(tmp)
		return err
	}
	if err := n.st.CreateSnapshot(n.applied, n.cs, d.Encode(), n.cfg.SnapshotKeep); err != nil {
		return err
	}
	n.snapIdx = n.applied
	n.confChanged = false
	n.cfg.Snapshots.prune(d)
	return nil
}

func (n *Node) publish() {
	bs := n.rn.BasicStatus()
	last, _ := n.st.LastIndex()
	st := &Status{
		ID: n.cfg.ID, Leader: bs.Lead, Term: bs.GetTerm(), Commit: bs.GetCommit(), Applied: n.applied,
		IsLeader: bs.RaftState == raft.StateLeader, LastIndex: last, Snapshot: n.snapIdx,
	}
	st.Ready = st.IsLeader && n.readyTerm == st.Term
	if old := n.status.Load(); old != nil && *old == *st {
		return
	}
	n.status.Store(st)
	n.notify()
}

func (n *Node) publishStopped() {
	st := *n.status.Load()
	st.Stopped, st.IsLeader, st.Ready = true, false, false
	n.status.Store(&st)
	n.notify()
}

func (n *Node) notify() {
	n.chmu.Lock()
	close(n.changed)
	n.changed = make(chan struct{})
	n.chmu.Unlock()
}

// raftLogger sends raft's log to slog: debug and info at debug level (raft
// is chatty about elections), warnings and errors at their own.
type raftLogger struct{ l *slog.Logger }

func (r raftLogger) Debug(v ...any)              { r.l.Debug(fmt.Sprint(v...)) }
func (r raftLogger) Debugf(f string, v ...any)   { r.l.Debug(fmt.Sprintf(f, v...)) }
func (r raftLogger) Info(v ...any)               { r.l.Debug(fmt.Sprint(v...)) }
func (r raftLogger) Infof(f string, v ...any)    { r.l.Debug(fmt.Sprintf(f, v...)) }
func (r raftLogger) Warning(v ...any)            { r.l.Warn(fmt.Sprint(v...)) }
func (r raftLogger) Warningf(f string, v ...any) { r.l.Warn(fmt.Sprintf(f, v...)) }
func (r raftLogger) Error(v ...any)              { r.l.Error(fmt.Sprint(v...)) }
func (r raftLogger) Errorf(f string, v ...any)   { r.l.Error(fmt.Sprintf(f, v...)) }
func (r raftLogger) Fatal(v ...any)              { r.l.Error(fmt.Sprint(v...)); panic(fmt.Sprint(v...)) }
func (r raftLogger) Fatalf(f string, v ...any) {
	r.l.Error(fmt.Sprintf(f, v...))
	panic(fmt.Sprintf(f, v...))
}
func (r raftLogger) Panic(v ...any)            { panic(fmt.Sprint(v...)) }
func (r raftLogger) Panicf(f string, v ...any) { panic(fmt.Sprintf(f, v...)) }
