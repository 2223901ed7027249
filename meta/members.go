package meta

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"syscall"
	"time"

	"github.com/weft-fs/weft/meta/metarpc"
	"github.com/weft-fs/weft/meta/raftlog"
	"github.com/weft-fs/weft/transport"
	pb "go.etcd.io/raft/v3/raftpb"
)

// Membership of a replicated group (`weft admin meta list|add|remove`):
// raft's configuration changes (ConfChangeV2), proposed by the leader one
// at a time. A new member is added as a learner (it receives the log, or
// a snapshot, and does not vote), promoted to voter once it caught up, so
// adding an empty member never costs the group its quorum; replacing a
// member whose disk died is an add of a fresh one, then a remove of the
// dead one. The new member's address travels in the change's payload:
// every member records it with the configuration (in its raft log and in
// every snapshot), and its transport learns it: when it applies the
// change, when it restarts, and, for a member that joins later, from the
// snapshot it joins with.
//
// Who may change the group: only a peer authenticated as a metadata
// server (role meta: `weft admin` run on a metadata host with its
// certificate), or an in-process caller; an unauthenticated peer only with
// Options.AllowUnauthenticated (tests). A client, even root on an admin
// network, may not: membership decides where the namespace lives.

// memberAddrs are the members' addresses this server knows: from its
// transport's peer list and from applied changes.
type memberAddrs struct {
	mu    sync.Mutex
	addrs map[uint64]string
}

// peerSetter is a transport that can learn and forget members
// (raftlog.TCPTransport).
type peerSetter interface {
	SetPeer(id uint64, addr string)
	RemovePeer(id uint64)
}

// onConfChange runs on the node goroutine when a change is applied (cc
// nil: a snapshot's configuration was installed): a removed member is
// forgotten by the transport.
func (s *Server) onConfChange(tr raftlog.Transport, cc *pb.ConfChangeV2, cs *pb.ConfState) {
	ps, _ := tr.(peerSetter)
	for _, ch := range cc.GetChanges() {
		if ch.GetType() != pb.ConfChangeType_ConfChangeRemoveNode {
			continue
		}
		id := ch.GetNodeId()
		s.members.mu.Lock()
		delete(s.members.addrs, id)
		s.members.mu.Unlock()
		if ps != nil {
			ps.RemovePeer(id)
		}
		if s.opts.Replica != nil && id == s.opts.Replica.ID {
			s.log.Warn("meta: this server was removed from the group; it no longer serves", "id", id)
		}
	}
	s.log.Info("meta: group configuration", "voters", cs.GetVoters(), "learners", cs.GetLearners())
}

// onAddresses runs when the node starts and whenever the members'
// addresses the group recorded change (raftlog.Config.OnAddresses): the
// transport learns the members it was not started with.
func (s *Server) onAddresses(tr raftlog.Transport, addrs map[uint64]string) {
	ps, _ := tr.(peerSetter)
	s.members.mu.Lock()
	if s.members.addrs == nil {
		s.members.addrs = map[uint64]string{}
	}
	for id, addr := range addrs {
		s.members.addrs[id] = addr
	}
	s.members.mu.Unlock()
	if ps != nil {
		for id, addr := range addrs {
			ps.SetPeer(id, addr)
		}
	}
}

// adminCaller authorizes a membership request.
func (s *Server) adminCaller(ctx context.Context) error {
	p, ok := transport.PeerFrom(ctx)
	if !ok || p.Role == transport.RoleMeta || (p.Role == transport.RoleNone && s.opts.AllowUnauthenticated) {
		return nil
	}
	s.refuse(p, "membership change from a peer that is not a metadata server")
	return errnof(syscall.EACCES, "peer %s (role %q) may not change or list the metadata group: only metadata servers may", p.Addr, p.Role)
}

func (s *Server) node() (*raftlog.Node, error) {
	if s.replica == nil {
		return nil, errnof(syscall.ENOTSUP, "a single metadata server has no group")
	}
	return s.replica.node, nil
}

// Members implements metarpc.MemberAdmin.
func (s *Server) Members(ctx context.Context) ([]metarpc.Member, error) {
	if err := s.adminCaller(ctx); err != nil {
		return nil, err
	}
	n, err := s.node()
	if err != nil {
		return nil, err
	}
	ms, err := n.Members(ctx)
	if err != nil {
		return nil, fmt.Errorf("meta: members: %w", err)
	}
	st := n.Status()
	s.members.mu.Lock()
	addrs := maps.Clone(s.members.addrs)
	s.members.mu.Unlock()
	out := make([]metarpc.Member, 0, len(ms))
	for _, m := range ms {
		out = append(out, metarpc.Member{ID: m.ID, Addr: addrs[m.ID], Learner: m.Learner, Leader: m.ID == st.Leader,
			Match: m.Match, Active: m.Active, Snapshot: m.Snapshot})
	}
	return out, nil
}

// changeMembers proposes one change on the leader, again if raft was still
// applying the last one (ErrDropped: nothing changed).
func (s *Server) changeMembers(ctx context.Context, ch *pb.ConfChangeSingle, addr string) (*pb.ConfState, error) {
	n, err := s.node()
	if err != nil {
		return nil, err
	}
	for {
		cs, err := n.ChangeMembers(ctx, []*pb.ConfChangeSingle{ch}, addr)
		if errors.Is(err, raftlog.ErrDropped) || errors.Is(err, raftlog.ErrConfChangeRefused) {
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("meta: %v: %w", err, syscall.ETIMEDOUT)
			case <-time.After(50 * time.Millisecond):
				continue
			}
		}
		if err != nil {
			if errors.Is(err, syscall.EAGAIN) {
				return nil, fmt.Errorf("meta: %w", err)
			}
			return nil, fmt.Errorf("meta: %v: %w", err, syscall.ETIMEDOUT)
		}
		return cs, nil
	}
}

// AddMember implements metarpc.MemberAdmin: id joins as a learner, and
// is promoted to voter once the leader has replicated to it everything
// committed when it joined (ctx bounds the wait; if it ends first the
// member stays a learner, and AddMember may be called again). The new
// member must be started with an empty data directory in join mode
// (Replica.Join), knowing the other members' addresses.
func (s *Server) AddMember(ctx context.Context, id uint64, addr string) error {
	if err := s.adminCaller(ctx); err != nil {
		return err
	}
	if id == 0 || id >= 1<<16 {
		return errnof(syscall.EINVAL, "member id %d: ids are 1 to 65535", id)
	}
	if addr == "" {
		return errnof(syscall.EINVAL, "member %d needs an address", id)
	}
	n, err := s.node()
	if err != nil {
		return err
	}
	ms, err := n.Members(ctx)
	if err != nil {
		return fmt.Errorf("meta: add member: %w", err)
	}
	learner := false
	for _, m := range ms {
		if m.ID == id && !m.Learner {
			return errnof(syscall.EEXIST, "member %d is already a voter", id)
		}
		learner = learner || m.ID == id
	}
	if !learner {
		if _, err := s.changeMembers(ctx, &pb.ConfChangeSingle{Type: pb.ConfChangeType_ConfChangeAddLearnerNode.Enum(), NodeId: &id}, addr); err != nil {
			return err
		}
		s.log.Info("meta: member added as a learner", "id", id, "addr", addr)
	}
	target := n.Status().Commit
	for {
		ms, err := n.Members(ctx)
		if err != nil {
			return fmt.Errorf("meta: add member: %w", err)
		}
		caught := false
		for _, m := range ms {
			caught = caught || (m.ID == id && m.Match >= target)
		}
		if caught {
			break
		}
		if st := n.Status(); !st.IsLeader {
			return fmt.Errorf("meta: add member %d: %w", id, &raftlog.NotLeaderError{Leader: st.Leader})
		}
		select {
		case <-ctx.Done():
			return errnof(syscall.ETIMEDOUT, "member %d is a learner and has not caught up yet (at index %d); add it again to promote it", id, target)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if _, err := s.changeMembers(ctx, &pb.ConfChangeSingle{Type: pb.ConfChangeType_ConfChangeAddNode.Enum(), NodeId: &id}, addr); err != nil {
		return err
	}
	s.log.Info("meta: member promoted to voter", "id", id, "addr", addr)
	return nil
}

// RemoveMember implements metarpc.MemberAdmin. Removing the last voter is
// refused; removing the leader is allowed (it steps down once the change
// is applied, and the others elect a new one).
func (s *Server) RemoveMember(ctx context.Context, id uint64) error {
	if err := s.adminCaller(ctx); err != nil {
		return err
	}
	n, err := s.node()
	if err != nil {
		return err
	}
	ms, err := n.Members(ctx)
	if err != nil {
		return fmt.Errorf("meta: remove member: %w", err)
	}
	found, voters := false, 0
	for _, m := range ms {
		found = found || m.ID == id
		if !m.Learner {
			voters++
		}
	}
	if !found {
		return errnof(syscall.ENOENT, "member %d is not in the group", id)
	}
	if voters == 1 {
		for _, m := range ms {
			if m.ID == id && !m.Learner {
				return errnof(syscall.EINVAL, "member %d is the last voter", id)
			}
		}
	}
	if _, err := s.changeMembers(ctx, &pb.ConfChangeSingle{Type: pb.ConfChangeType_ConfChangeRemoveNode.Enum(), NodeId: &id}, ""); err != nil {
		return err
	}
	s.log.Info("meta: member removed", "id", id)
	return nil
}
