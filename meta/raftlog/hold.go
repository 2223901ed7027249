package raftlog

import (
	"cmp"
	"slices"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
)

// A leader with a clock holds back two kinds of append, per follower, and
// sends each when its delay runs out, or earlier with (merged into) the
// next append to the same follower that leaves at once:
//
//   - an append without entries to a follower that replicates normally
//     (raft's StateReplicate): raft sends one to every follower each time
//     its commit index moves, so that they apply sooner, and each costs
//     the follower a round of its own (a call, a Ready, a write of its
//     HardState, an acknowledgement) and the leader a send and an answer.
//     Every append with entries carries the commit index too, so under
//     load the next one makes it moot. Config.CommitNoticeDelay (2 ms);
//   - the appends with entries to a laggard: a voter the leader does not
//     need for its quorum. In a group of three one follower's
//     acknowledgement commits an entry; the other receives the entries
//     of several rounds merged into one append every Config.LaggardDelay
//     (5 ms), so it pays one message, one fsync and one acknowledgement
//     for all of them, and the leader one send. Nothing waits for it: an
//     entry is acknowledged once a quorum has it on disk, whichever
//     members they are, and the laggard is never further behind than
//     the delay.
//
// The laggards are chosen at each Ready, and keep their part: the quorum
// is the followers that were in it, unless one of them stalled (entries
// sent to it, its Match unmoved for twice the laggard delay: it died, or
// its link did) and a laggard did not; then they swap. Meanwhile commits
// go on at the laggard's pace, one merged append per delay. A follower
// being probed, a learner, and every follower of a group of one or two
// or in a joint configuration get every append at once.
//
// raft takes a held message as one delayed on the network, and a merged
// append as one that carried more entries: appends are merged only when
// contiguous and of the same term, the merged one carries the later
// commit index (a follower commits no further than the entries it got),
// and a held append is sent before any later one to its follower that
// cannot be merged, so a follower receives them in raft's order. A
// hand-ticked node (no TickInterval: tests that step the group
// deterministically) holds nothing back; it drops an append without
// entries to a follower that replicates normally while proposals are
// held (Node.held), as their append follows within the leader's log
// write.

// DefaultCommitNoticeDelay is how long a leader with a clock holds back
// an append that only tells a follower the commit index, waiting for an
// append with entries to carry it. Under load the next round leaves well
// within it; an idle group's followers learn the index this much later
// (they apply that much later; nothing waits for them).
const DefaultCommitNoticeDelay = 2 * time.Millisecond

// DefaultLaggardDelay is how long a leader with a clock holds back the
// appends to a laggard, merging them. With creates from four processes,
// three members on one 2-core machine, the laggard's CPU per create fell
// from 0.18 to 0.09-0.10 ms (docs/performance.md, issue 8 session 13); a
// longer delay saves less and less (an experiment that held for 2, 5 and
// 10 ms: 0.096, 0.062, 0.045 ms), and is how long commits wait, a round
// or two, when the follower in the quorum stops (above).
const DefaultLaggardDelay = 5 * time.Millisecond

// maxHeldBytes bounds the entries merged into one held append: beyond,
// it leaves at once (raft's own bound on an append is 1 MiB too).
const maxHeldBytes = 1 << 20

// heldApp is an append held back for its follower.
type heldApp struct {
	m     *pb.Message
	due   time.Time
	bytes int // of its entries' data
}

func (n *Node) commitNoticeDelay() time.Duration {
	return cmp.Or(n.cfg.CommitNoticeDelay, DefaultCommitNoticeDelay)
}

func (n *Node) laggardDelay() time.Duration {
	return cmp.Or(n.cfg.LaggardDelay, DefaultLaggardDelay)
}

// holdAppends takes, out of a leader's messages to its peers, the appends
// to hold back, merges them with those held already, and returns what
// leaves now, in order.
func (n *Node) holdAppends(msgs []*pb.Message) []*pb.Message {
	clocked := n.cfg.TickInterval > 0
	var states map[uint64]tracker.StateType
	var now time.Time
	// Not filtered in place: a held append may leave before m.
	out := make([]*pb.Message, 0, len(msgs))
	for _, m := range msgs {
		if m.GetType() != pb.MessageType_MsgApp {
			out = append(out, m)
			continue
		}
		if states == nil {
			if !clocked && len(n.held) == 0 {
				out = append(out, m) // nothing to hold anything for
				continue
			}
			now = time.Now()
			states = n.progressStates(clocked, now)
		}
		to := m.GetTo()
		replicating := states[to] == tracker.StateReplicate
		if !clocked {
			if replicating && len(m.GetEntries()) == 0 {
				continue // the held proposals' append carries the index
			}
			out = append(out, m)
			continue
		}
		var delay time.Duration // 0: now
		switch {
		case !replicating:
			// A probe, or what follows a snapshot: raft waits for its
			// answer before sending more.
		case n.laggards[to]:
			delay = n.laggardDelay()
		case len(m.GetEntries()) == 0:
			delay = n.commitNoticeDelay()
		}
		if h := n.heldApps[to]; h != nil {
			if mergeAppend(h.m, m) {
				h.bytes += entryBytes(m)
				if delay > 0 && h.bytes < maxHeldBytes {
					if due := now.Add(delay); due.Before(h.due) {
						h.due = due
					}
					n.armHoldTimer()
					continue
				}
				delete(n.heldApps, to)
				out = append(out, h.m)
				continue
			}
			delete(n.heldApps, to)
			if len(h.m.GetEntries()) > 0 {
				out = append(out, h.m) // before what follows it
			} // a commit notice alone: m tells a later index
		}
		if delay == 0 {
			out = append(out, m)
			continue
		}
		if n.heldApps == nil {
			n.heldApps = map[uint64]*heldApp{}
		}
		// The held append's entries slice becomes its own: merging
		// appends to it, and raft's may share an array with raft's log.
		m.Entries = slices.Clip(m.Entries)
		n.heldApps[to] = &heldApp{m: m, due: now.Add(delay), bytes: entryBytes(m)}
		n.armHoldTimer()
	}
	return out
}

// progressStates returns the replication state of every peer raft tracks,
// and (with a clock, at now) chooses the laggards.
func (n *Node) progressStates(clocked bool, now time.Time) map[uint64]tracker.StateType {
	type follower struct {
		id, match        uint64
		lagging, stalled bool
	}
	var fs []follower
	// Reused: this runs at every Ready of a busy leader.
	if n.states == nil {
		n.states = map[uint64]tracker.StateType{}
	}
	states := n.states
	clear(states)
	stallAfter := 2 * n.laggardDelay()
	n.rn.WithProgress(func(id uint64, typ raft.ProgressType, pr tracker.Progress) {
		states[id] = pr.State
		if !clocked || id == n.cfg.ID || typ != raft.ProgressTypePeer {
			return
		}
		f := follower{id: id, match: pr.Match, lagging: n.laggards[id]}
		if n.matches == nil {
			n.matches = map[uint64]matchSeen{}
		}
		// Seen only here, when appends are made: the stall clock starts
		// when it is first seen waiting for entries, and restarts when
		// its Match moves.
		caughtUp := pr.Match+1 >= pr.Next
		seen, ok := n.matches[id]
		if !ok || seen.match != pr.Match || caughtUp || seen.caughtUp {
			seen = matchSeen{match: pr.Match, since: now, caughtUp: caughtUp}
			n.matches[id] = seen
		}
		// Not replicating: raft is probing it (it did not answer, or
		// refused an append), or sending it a snapshot.
		f.stalled = pr.State != tracker.StateReplicate || (!caughtUp && now.Sub(seen.since) > stallAfter)
		fs = append(fs, f)
	})
	if !clocked {
		return states
	}
	voters := n.cs.GetVoters()
	if n.laggardDelay() < 0 || len(voters) < 3 || len(n.cs.GetVotersOutgoing()) > 0 {
		clear(n.laggards)
		return states
	}
	// The quorum is a majority of the voters, the leader one of them:
	// the first need followers in this order are in it. A follower keeps
	// its place unless it stalled and another did not.
	slices.SortFunc(fs, func(a, b follower) int {
		switch {
		case a.stalled != b.stalled:
			return cmpBool(a.stalled, b.stalled)
		case a.lagging != b.lagging:
			return cmpBool(a.lagging, b.lagging)
		case a.match != b.match:
			return cmp.Compare(b.match, a.match) // the most first
		}
		return cmp.Compare(a.id, b.id)
	})
	need := len(voters) / 2
	if n.laggards == nil {
		n.laggards = map[uint64]bool{}
	}
	clear(n.laggards)
	for _, f := range fs[min(need, len(fs)):] {
		n.laggards[f.id] = true
	}
	return states
}

// matchSeen is a follower's Match as the leader saw it last, since when,
// and whether it had everything sent to it then.
type matchSeen struct {
	match    uint64
	since    time.Time
	caughtUp bool
}

// cmpBool orders false before true.
func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// mergeAppend merges m, a later append to the same follower, into held if
// m continues it (the same term, entries starting where held's end) or
// only tells a commit index; false, held unchanged, if not.
func mergeAppend(held, m *pb.Message) bool {
	if held.GetTerm() != m.GetTerm() {
		return false
	}
	last, lastTerm := held.GetIndex(), held.GetLogTerm()
	if k := len(held.Entries); k > 0 {
		last, lastTerm = held.Entries[k-1].GetIndex(), held.Entries[k-1].GetTerm()
	}
	if len(m.GetEntries()) > 0 && (m.GetIndex() != last || m.GetLogTerm() != lastTerm) {
		return false
	}
	held.Entries = append(held.Entries, m.Entries...)
	held.Commit = new(max(held.GetCommit(), m.GetCommit()))
	return true
}

func entryBytes(m *pb.Message) int {
	b := 0
	for _, e := range m.GetEntries() {
		b += len(e.GetData())
	}
	return b
}

// armHoldTimer sets the hold timer to the earliest due held append.
func (n *Node) armHoldTimer() {
	var first time.Time
	for _, h := range n.heldApps {
		if first.IsZero() || h.due.Before(first) {
			first = h.due
		}
	}
	if first.IsZero() {
		return
	}
	d := time.Until(first)
	if n.holdTimer == nil {
		n.holdTimer = time.NewTimer(d)
		return
	}
	// Reset drops a value the timer left unread (as of Go 1.23).
	n.holdTimer.Reset(d)
}

// holdDueC is the channel the node waits on for held appends (nil, never
// ready, when none is held).
func (n *Node) holdDueC() <-chan time.Time {
	if len(n.heldApps) == 0 {
		return nil
	}
	return n.holdTimer.C
}

// sendDueAppends sends the held appends due by now, if this node still
// leads in their term (a deposed leader's would be refused as stale
// anyway), and sets the timer for the rest.
func (n *Node) sendDueAppends(now time.Time) {
	bs := n.rn.BasicStatus()
	var msgs []*pb.Message
	for to, h := range n.heldApps {
		switch {
		case bs.RaftState != raft.StateLeader || h.m.GetTerm() != bs.GetTerm():
			delete(n.heldApps, to)
		case !h.due.After(now):
			msgs = append(msgs, h.m)
			delete(n.heldApps, to)
		}
	}
	n.armHoldTimer()
	if len(msgs) > 0 {
		n.cfg.Transport.Send(msgs)
	}
}
