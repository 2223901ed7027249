package raftlog

import (
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"syscall"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
	"google.golang.org/protobuf/proto"
)

// Membership. The group's configuration is raft's (ConfChangeV2 entries
// in the log, the ConfState in snapshots); this file proposes changes and
// reports the configuration. A change takes effect on each node when it
// is applied there; raft allows one change in flight at a time.

// Member is one member of the group as the node knows it.
type Member struct {
	ID      uint64
	Learner bool // receives the log but does not vote (yet)
	// What the leader knows of the member's log (zero on a follower):
	// Match is the last index known to be replicated there; Active means
	// it was heard from within the last election timeout.
	Match  uint64
	Active bool
	// Snapshot: the leader is sending it a snapshot (StateSnapshot).
	Snapshot bool
}

// Members returns the group's configuration as this node applied it,
// with the leader's view of each member's progress when it is leader.
func (n *Node) Members(ctx context.Context) ([]Member, error) {
	ch := make(chan []Member, 1)
	if err := n.do(ctx, func() { ch <- n.membersNow() }); err != nil {
		return nil, err
	}
	select {
	case m := <-ch:
		return m, nil
	case <-n.done:
		return nil, ErrStopped
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (n *Node) membersNow() []Member {
	var out []Member
	cs := n.cs
	st := n.rn.Status()
	add := func(id uint64, learner bool) {
		m := Member{ID: id, Learner: learner}
		if pr, ok := st.Progress[id]; ok && st.RaftState == raft.StateLeader {
			m.Match, m.Active = pr.Match, pr.RecentActive || id == n.cfg.ID
			m.Snapshot = pr.State == tracker.StateSnapshot
		}
		out = append(out, m)
	}
	for _, id := range cs.GetVoters() {
		add(id, false)
	}
	for _, id := range cs.GetLearners() {
		add(id, true)
	}
	for _, id := range cs.GetLearnersNext() {
		add(id, true)
	}
	slices.SortFunc(out, func(a, b Member) int { return int(a.ID) - int(b.ID) })
	return out
}

// Voters returns the voters of the configuration this node applied last
// (any goroutine; no call on the node).
func (n *Node) Voters() []uint64 {
	cs := n.members.Load()
	if cs == nil {
		return nil
	}
	return slices.Clone(cs.GetVoters())
}

func (n *Node) publishMembers() {
	n.members.Store(proto.Clone(pb.EnsureConfState(n.cs)).(*pb.ConfState))
}

// ErrConfChangeRefused: raft did not take the configuration change (one
// is already in flight, or the change is not valid for the group); nothing
// changed.
var ErrConfChangeRefused = fmt.Errorf("raftlog: configuration change refused: %w", syscall.EAGAIN)

// ChangeMembers proposes one configuration change on the leader and
// returns the configuration once the change is applied on this node; ctx
// bounds the wait (if it ends first the change may still be applied).
// addr is the address of the member the change adds ("" for a removal):
// it travels in the change (raft's context, after the proposal id) and
// every member records it (Addresses, Config.OnAddresses).
func (n *Node) ChangeMembers(ctx context.Context, changes []*pb.ConfChangeSingle, addr string) (*pb.ConfState, error) {
	payload := []byte(addr)
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
		n.nextID = (n.nextID + 1) & (1<<48 - 1)
		id := n.idHi | n.nextID
		cc := &pb.ConfChangeV2{Changes: changes, Context: append(binary.BigEndian.AppendUint64(nil, id), payload...)}
		if err := n.rn.ProposeConfChange(cc); err != nil {
			ch <- proposalResult{err: fmt.Errorf("%w: %v", ErrConfChangeRefused, err)}
			return
		}
		n.waiting[id] = &waiter{term: bs.GetTerm(), ch: ch}
	})
	if err != nil {
		return nil, err
	}
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, r.err
		}
		return r.v.(*pb.ConfState), nil
	case <-ctx.Done():
		return nil, fmt.Errorf("raftlog: configuration change outcome unknown: %w", ctx.Err())
	case <-n.done:
		return nil, ErrStopped
	}
}

// ConfChangePayload returns the address ChangeMembers attached to cc (nil
// for a change proposed otherwise).
func ConfChangePayload(cc *pb.ConfChangeV2) []byte {
	if len(cc.GetContext()) < 8 {
		return nil
	}
	return cc.GetContext()[8:]
}

// noteAddrs records the addresses a change carries (an added member's)
// and forgets removed members'; it reports whether anything changed.
func (n *Node) noteAddrs(cc *pb.ConfChangeV2) bool {
	if n.addrs == nil {
		n.addrs = map[uint64]string{}
	}
	changed := false
	addr := string(ConfChangePayload(cc))
	for _, ch := range cc.GetChanges() {
		id := ch.GetNodeId()
		switch ch.GetType() {
		case pb.ConfChangeType_ConfChangeAddNode, pb.ConfChangeType_ConfChangeAddLearnerNode:
			if addr != "" && n.addrs[id] != addr {
				n.addrs[id] = addr
				changed = true
			}
		case pb.ConfChangeType_ConfChangeRemoveNode:
			if _, ok := n.addrs[id]; ok {
				delete(n.addrs, id)
				changed = true
			}
		}
	}
	return changed
}

func (n *Node) publishAddrs() {
	m := maps.Clone(n.addrs)
	if m == nil {
		m = map[uint64]string{}
	}
	n.addrsCopy.Store(&m)
	if n.cfg.OnAddresses != nil {
		n.cfg.OnAddresses(maps.Clone(m))
	}
}

// Addresses returns the members' addresses the group recorded: those
// given to ChangeMembers when they were added (members of the initial
// configuration are not in it unless re-added: their addresses are the
// deployment's). Any goroutine.
func (n *Node) Addresses() map[uint64]string {
	if p := n.addrsCopy.Load(); p != nil {
		return maps.Clone(*p)
	}
	return map[uint64]string{}
}
