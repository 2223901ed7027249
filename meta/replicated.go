package meta

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/weft-fs/weft/meta/raftlog"
	"github.com/weft-fs/weft/proto"
)

// Replica makes a Server one member of a raft group (Options.Replica; nil:
// a single server on the local log). The commit path is then raftLog: the
// same Commands, replicated by package meta/raftlog and applied on every
// member.
type Replica struct {
	ID uint64
	// Peers are the initial voters' ids (this one's included): they
	// bootstrap an empty log, and must be the same on every member.
	Peers []uint64
	// Addrs are the members' addresses by id (where clients and peers
	// reach them): a follower names the leader's to clients
	// (NotLeaderError, Members). Optional in tests.
	Addrs map[uint64]string
	// Log is the raft log, a pebble instance of its own (not Store). The
	// caller opens and closes it.
	Log *raftlog.Storage
	// Transport carries raft messages (raftlog.MemNetwork in tests, a
	// raftlog.TCPTransport between processes).
	Transport raftlog.Transport
	// Started, if set, is called with the node once it runs (a
	// TCPTransport's Start).
	Started func(*raftlog.Node)
	// OnRole, if set, is told each time this member becomes the group's
	// leader (true) or stops being it (false); it starts a follower
	// (raftlog.Config.OnRole: on the node goroutine, so it must be quick).
	OnRole func(leader bool)
	// TickInterval is raft's clock (default 100ms; negative: no clock,
	// tests tick the node themselves). The election timeout is
	// ElectionTick ticks (default 10), heartbeats every HeartbeatTick
	// (default 1).
	TickInterval                time.Duration
	ElectionTick, HeartbeatTick int
	// Snapshots (snapshot.go): with a store that can be checkpointed
	// (pebble), a snapshot is taken every SnapshotEvery applied entries
	// (default DefaultSnapshotEvery) into SnapshotDir (default the
	// store's directory + ".snapshots", on the store's file system) and
	// the log compacted to the last SnapshotKeep entries (default
	// DefaultSnapshotKeep).
	SnapshotDir                 string
	SnapshotEvery, SnapshotKeep uint64
	// Join: this server is a new member of a running group (added with
	// Server.AddMember, `weft admin meta add`): its store and log must be
	// empty; Peers is not used to bootstrap, and the state comes from the
	// leader (a snapshot, then the log). It must know the others'
	// addresses (its transport's peers).
	Join bool
	// ReadLease, if positive, lets the leader answer reads without a
	// quorum round for this long after a ReadIndex round confirmed its
	// leadership (readBarrier). It must be below the election timeout
	// (ElectionTick ticks): followers that acknowledged the round refuse
	// to vote for anyone else for that long (raft's CheckQuorum lease), so
	// no other leader can commit anything meanwhile. 0: every read waits
	// for a round of its own.
	ReadLease time.Duration
}

// raftLog is the commit path of a replicated server. Proposals go to the
// raft leader only: a follower's propose fails with EAGAIN
// (raftlog.ErrNotLeader, naming the leader), and so does a new leader's
// until it has applied the earlier terms' entries. Batches are committed
// unsynced, and a member's pebble store has no WAL (Run opens it with
// store.PebbleOptions.NoWAL): an apply is a memtable insert, durable when
// pebble flushes the memtable. An entry is durable in the raft log
// (fsync'd on a majority) before it is applied, and after a crash the log
// is applied again from the index the store recorded in its last flushed
// state (applied_index: every batch carries it, so it is never ahead of
// what the store holds). The log is compacted only after a snapshot,
// whose checkpoint flushes the store first (snapshot.go).
type raftLog struct {
	node *raftlog.Node
	// minIno: new inode numbers below it were allocated before this
	// server last became leader, possibly from an allocator behind the
	// applied log (a follower's does not move); they are refused (EAGAIN)
	// rather than risk reusing a number an earlier leader handed out.
	// Written by OnLeader and read by ProposeIf's check, both on the node
	// goroutine.
	minIno           uint64
	notLeader        func(error) error // Server.notLeader
	reads            readBarrier
	groups, commands atomic.Uint64
}

// raftApplier applies committed entries to the state machine: it is the
// raftlog.StateMachine of a replicated Server.
type raftApplier struct {
	sm   *stateMachine
	hook func(*Command)
	// raise keeps the server's inode allocator at or above the applied
	// high-water mark, on every member (a follower's allocator is the
	// one a new leader starts from).
	raise func(next uint64)
	// restored reloads the server's in-memory state after Restore
	// (snapshot.go).
	restored func() error
	// registered is told the id of every target registration applied.
	registered func(proto.TargetID)
	// paramSet is told the name of every persisted parameter applied, on
	// every member: a member that restarts replays the ones its store
	// lacked (it has no WAL: they may be after its last flush), and
	// applies them then, not only at start.
	paramSet func(name string)
}

// appliedEntry is what Apply returns to the proposer.
type appliedEntry struct {
	res applyResult
	err error
}

func (a *raftApplier) Apply(index uint64, data []byte) any {
	c, err := DecodeCommand(data)
	if err != nil {
		// Every member decodes the same bytes the same way: all refuse it.
		return appliedEntry{err: errnof(syscall.EIO, "log entry %d does not decode: %v", index, err)}
	}
	if a.hook != nil {
		a.hook(c)
	}
	res, err := a.sm.applyAt(c, index, false)
	if err == nil {
		a.raise(a.sm.nextIno)
		if c.Op == OpRegisterTarget && a.registered != nil {
			a.registered(res.target)
		}
		if c.Op == OpSetParam && a.paramSet != nil {
			a.paramSet(c.Name)
		}
	}
	return appliedEntry{res, err}
}

func (a *raftApplier) Applied() uint64 { return a.sm.applied }

func (l *raftLog) stats() (groups, commands uint64)    { return l.groups.Load(), l.commands.Load() }
func isNewInode(c *Command) bool                       { return c.Op == OpCreate || c.Op == OpMkdir || c.Op == OpSymlink }
func (l *raftLog) status() raftlog.Status              { return l.node.Status() }
func (l *raftLog) stop()                               { l.node.Stop() }
func (l *raftLog) readIndex(ctx context.Context) error { return l.reads.wait(ctx, l.node.ReadIndex) }

// leadUntil passes a read barrier whose lease has at least minLeft to
// run, and returns when that lease ends: until then no other member can
// have become leader (zero without lease reads: no such bound).
func (l *raftLog) leadUntil(ctx context.Context, minLeft time.Duration) (time.Time, error) {
	return l.reads.waitUntil(ctx, l.node.ReadIndex, minLeft)
}
func (l *raftLog) propose(ctx context.Context, c *Command) (applyResult, error) {
	check := func() error {
		if isNewInode(c) && uint64(c.Ino) < l.minIno {
			return errnof(syscall.EAGAIN, "inode %d was allocated before this server became leader; retry", c.Ino)
		}
		return nil
	}
	v, err := l.node.ProposeIf(ctx, c.Encode(), check)
	if err != nil {
		// EAGAIN: not applied, nothing changed (not leader, not ready,
		// dropped by a new leader); EIO: the node stopped. Otherwise ctx
		// ended or the outcome is unknown (ETIMEDOUT): the command may
		// yet be applied.
		if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EIO) || errors.Is(err, syscall.ETIMEDOUT) {
			return applyResult{}, fmt.Errorf("meta: %w", l.notLeader(err))
		}
		return applyResult{}, fmt.Errorf("meta: %v: %w", err, syscall.ETIMEDOUT)
	}
	l.groups.Add(1)
	l.commands.Add(1)
	r := v.(appliedEntry)
	return r.res, r.err
}

// startReplica starts the raft node of a replicated server. OnLeader
// (on the node goroutine, when this server as new leader has applied
// every earlier entry) raises the inode allocator to the applied
// high-water mark, and formats an empty store.
func (s *Server) startReplica(r *Replica) error {
	if r.ID == 0 || r.Log == nil || r.Transport == nil {
		return errors.New("meta: Replica needs ID, Log and Transport")
	}
	tick := r.TickInterval
	switch {
	case tick == 0:
		tick = 100 * time.Millisecond
	case tick < 0:
		tick = 0
	}
	l := &raftLog{notLeader: s.notLeader}
	et := tick * time.Duration(cmp.Or(r.ElectionTick, 10))
	s.electionTimeout = et
	if r.ReadLease > 0 && tick > 0 && r.ReadLease >= et {
		return fmt.Errorf("meta: read lease %v must be shorter than the election timeout %v", r.ReadLease, et)
	}
	if tick > 0 {
		// Without a clock (tests tick by hand) there is no lease.
		l.reads.lease = r.ReadLease
		s.boundPollBeat(r.ReadLease)
	}
	l.reads.status = func() raftlog.Status { return l.node.Status() }
	cfg := raftlog.Config{
		ID: r.ID, Peers: r.Peers, Storage: r.Log, Transport: r.Transport,
		SM: &raftApplier{sm: s.sm, hook: s.opts.applyHook, raise: s.raiseIno, restored: s.restored, registered: s.reg.noteApplied,
			paramSet: s.applyParams},
		TickInterval: tick, ElectionTick: r.ElectionTick, HeartbeatTick: r.HeartbeatTick,
		Logger: s.log, OnRole: r.OnRole,
		OnLeader: func(term uint64) {
			s.raiseIno(s.sm.nextIno)
			l.minIno = s.nextIno.Load()
			s.log.Info("meta: leader", "id", r.ID, "term", term, "applied", s.sm.applied)
			s.becameLeader(term)
			if s.sm.nextIno == 0 {
				s.bg.Add(1)
				go func() {
					defer s.bg.Done()
					// The file system id is made once, by the first leader,
					// and replicated with the format.
					fsid, err := newFSID()
					if err != nil {
						s.log.Error("meta: format store", "err", err)
						return
					}
					_, err = s.propose(s.ctx, &Command{Op: OpInit, Now: s.now(), Mode: 0755, Uid: s.opts.RootUid, Gid: s.opts.RootGid, Text: fsid})
					if err != nil && !errors.Is(err, syscall.EEXIST) {
						s.log.Error("meta: format store", "err", err)
					}
				}()
			}
		},
	}
	if err := r.configure(s, &cfg); err != nil {
		return err
	}
	n, err := raftlog.NewNode(cfg)
	if err != nil {
		return fmt.Errorf("meta: %w", err)
	}
	l.node = n
	s.commits, s.replica = l, l
	if r.Started != nil {
		r.Started(n)
	}
	return nil
}

// reader is caller for the read-only requests (Lookup, GetAttr, Readlink,
// ReadDir, GetXattr, ListXattr, StatFS). On a replicated server it first
// passes a read barrier: only the leader answers (a follower fails with
// EAGAIN naming the leader), and only once it has confirmed with a quorum
// that it is still leader and has applied everything committed when the
// request arrived (raft's ReadIndex), so a read sees every change
// acknowledged before it, also right after a failover, and a deposed
// leader never answers from stale state. A single server reads at once.
func (s *Server) reader(ctx context.Context) (caller, error) {
	cl, err := s.caller(ctx)
	if err != nil || s.replica == nil {
		return cl, err
	}
	if err := s.replica.readIndex(ctx); err != nil {
		return cl, s.readFailed(err)
	}
	return cl, nil
}

// readFailed is the error of a read whose barrier failed with err: EAGAIN
// naming the leader (not the leader, or not yet), else ETIMEDOUT.
func (s *Server) readFailed(err error) error {
	if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EIO) {
		return fmt.Errorf("meta: read: %w", s.notLeader(err))
	}
	return fmt.Errorf("meta: read: %v: %w", err, syscall.ETIMEDOUT)
}

// raiseIno raises the inode allocator to at least next.
func (s *Server) raiseIno(next uint64) {
	for {
		cur := s.nextIno.Load()
		if cur >= next || s.nextIno.CompareAndSwap(cur, next) {
			return
		}
	}
}

// ReplicaStatus returns what this server's raft node knows (ok false for a
// single server).
func (s *Server) ReplicaStatus() (st raftlog.Status, ok bool) {
	if s.replica == nil {
		return raftlog.Status{}, false
	}
	return s.replica.status(), true
}

// readRoundTimeout bounds one ReadIndex of the read barrier: a leader cut
// off from its quorum never confirms, and its readers must not wait for
// it longer than this (they get ETIMEDOUT and try another member).
const readRoundTimeout = 5 * time.Second

// readBarrier coalesces the read barriers of concurrent reads: a read
// joins the next round of raft's ReadIndex that has not been issued yet,
// or starts one; while a round is under way, reads that arrive join the
// round after it. Every round is issued after each of its reads arrived,
// so it confirms leadership and the commit index as of a moment after
// the read arrived, which is what a linearizable read needs; but a burst
// of N concurrent reads costs one or two quorum rounds, not N.
//
// With a lease (Replica.ReadLease), a round that confirmed leadership
// also lets reads that arrive within the lease after the round was issued
// be answered at once, while this member still leads in the same term:
// the followers that acknowledged the round will not vote for another
// member until an election timeout after it, so no other leader can have
// committed anything; and every change this leader acknowledged is
// applied here. The lease is measured on the monotonic clock from before
// the round was issued; it assumes clocks that advance at about the same
// rate on every member (the lease is half the election timeout to leave
// room for that).
type readBarrier struct {
	mu       sync.Mutex
	next     *readRound // the round arriving reads join; nil: none yet
	inflight bool       // a round is being issued

	lease      time.Duration         // 0: no lease reads
	status     func() raftlog.Status // the node's status
	leaseUntil time.Time             // reads before it (in leaseTerm) need no round
	leaseTerm  uint64
}

type readRound struct {
	done  chan struct{}
	err   error
	until time.Time // the lease the round confirmed (zero: none)
	reads int       // how many reads joined (tests)
}

// wait returns once a round issued after the call has confirmed (or
// failed: its error), or when ctx ends.
func (b *readBarrier) wait(ctx context.Context, issue func(context.Context) error) error {
	_, err := b.waitUntil(ctx, issue, 0)
	return err
}

// waitUntil is wait that also returns the end of the lease the read is
// covered by (zero without lease reads). The lease must have at least
// minLeft to run, or the read waits for a round of its own.
func (b *readBarrier) waitUntil(ctx context.Context, issue func(context.Context) error, minLeft time.Duration) (time.Time, error) {
	if b.lease > 0 {
		st := b.status()
		b.mu.Lock()
		until := b.leaseUntil
		ok := st.Ready && st.Term == b.leaseTerm && time.Now().Add(minLeft).Before(until)
		b.mu.Unlock()
		if ok {
			return until, nil
		}
	}
	b.mu.Lock()
	r := b.next
	if r == nil {
		r = &readRound{done: make(chan struct{})}
		b.next = r
	}
	r.reads++
	if !b.inflight {
		b.inflight, b.next = true, nil
		go b.run(r, issue)
	}
	b.mu.Unlock()
	select {
	case <-r.done:
		return r.until, r.err
	case <-ctx.Done():
		return time.Time{}, fmt.Errorf("meta: read barrier: %w", ctx.Err())
	}
}

// run issues round r, then every round that filled meanwhile, until none
// waits.
func (b *readBarrier) run(r *readRound, issue func(context.Context) error) {
	for r != nil {
		var (
			start = time.Now()
			st    raftlog.Status
		)
		if b.lease > 0 {
			st = b.status()
		}
		ctx, cancel := context.WithTimeout(context.Background(), readRoundTimeout)
		r.err = issue(ctx)
		cancel()
		if r.err == nil && b.lease > 0 && st.Ready {
			if now := b.status(); now.Ready && now.Term == st.Term {
				b.mu.Lock()
				b.leaseUntil, b.leaseTerm = start.Add(b.lease), st.Term
				b.mu.Unlock()
				r.until = start.Add(b.lease)
			}
		}
		close(r.done)
		b.mu.Lock()
		r, b.next = b.next, nil
		if r == nil {
			b.inflight = false
		}
		b.mu.Unlock()
	}
}
