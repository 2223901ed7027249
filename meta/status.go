package meta

import (
	"context"
	"maps"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/weft-fs/weft/internal/version"
	"github.com/weft-fs/weft/meta/store"
	"github.com/weft-fs/weft/proto"
)

// Status returns what this server knows of the file system for `weft
// status`: itself (and its raft state when replicated), every target, and
// every client session. It names client hosts and addresses, so only
// servers and root on a client (after root squash) may ask: EPERM for
// anyone else.
func (s *Server) Status(ctx context.Context) (proto.ClusterStatus, error) {
	cl, err := s.caller(ctx)
	if err != nil {
		return proto.ClusterStatus{}, err
	}
	if !cl.isRoot() {
		return proto.ClusterStatus{}, errnof(syscall.EPERM, "status: only root may ask for the cluster's status")
	}
	out := proto.ClusterStatus{
		FSID: s.FSID(), Version: version.String(), Uptime: time.Since(s.started), Requests: s.requests.Load(),
		Targets: s.reg.list(),
	}
	if out.Files, err = getCounter(s.st, store.CounterInodes); err != nil {
		return proto.ClusterStatus{}, errnof(syscall.EIO, "%v", err)
	}
	if s.replica != nil {
		r, err := s.replicaStatus(ctx)
		if err != nil {
			return proto.ClusterStatus{}, err
		}
		out.Replica = &r
	}
	now := time.Now()
	s.mu.Lock()
	for sess, st := range s.sessions {
		var handles uint64
		for _, o := range s.sessOpens[sess] {
			handles += uint64(o.n)
		}
		out.Clients = append(out.Clients, proto.ClientStatus{
			Name: sess.name, Session: sess.id, Addr: st.addr, Version: st.version,
			Age: now.Sub(st.opened), LeaseLeft: max(0, st.expires.Sub(s.leaseNow())), Handles: handles,
		})
	}
	s.mu.Unlock()
	slices.SortFunc(out.Clients, func(a, b proto.ClientStatus) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return slices.Compare(a.Session[:], b.Session[:])
	})
	return out, nil
}

// MemberStatus returns this member's own raft state, with the group as it
// applied it (and, on the leader, each member's progress): `weft status`
// asks every member, so any member answers, a follower too. Root only, as
// Status (it names the members' addresses); ENOTSUP on a single server.
func (s *Server) MemberStatus(ctx context.Context) (proto.ReplicaStatus, error) {
	cl, err := s.authorize(ctx)
	if err != nil {
		return proto.ReplicaStatus{}, err
	}
	if !cl.isRoot() {
		return proto.ReplicaStatus{}, errnof(syscall.EPERM, "member status: only root may ask")
	}
	if s.replica == nil {
		return proto.ReplicaStatus{}, errnof(syscall.ENOTSUP, "member status: a single metadata server has no group")
	}
	return s.replicaStatus(ctx)
}

func (s *Server) replicaStatus(ctx context.Context) (proto.ReplicaStatus, error) {
	rs := s.replica.status()
	out := proto.ReplicaStatus{ID: rs.ID, Leader: rs.Leader, Term: rs.Term,
		Commit: rs.Commit, Applied: rs.Applied, LastIndex: rs.LastIndex, Snapshot: rs.Snapshot}
	var err error
	out.Members, err = s.groupStatus(ctx, rs.Leader)
	return out, err
}

// groupStatus lists the group's members as this member applied the
// configuration, with their addresses and, on the leader, each one's
// progress (how far its log is known to reach, whether it was heard from).
func (s *Server) groupStatus(ctx context.Context, leader uint64) ([]proto.ReplicaMember, error) {
	ms, err := s.replica.node.Members(ctx)
	if err != nil {
		return nil, errnof(syscall.EIO, "status: members: %v", err)
	}
	s.members.mu.Lock()
	addrs := maps.Clone(s.members.addrs)
	s.members.mu.Unlock()
	out := make([]proto.ReplicaMember, 0, len(ms))
	for _, m := range ms {
		addr := addrs[m.ID]
		if addr == "" {
			addr = s.memberAddr(m.ID)
		}
		out = append(out, proto.ReplicaMember{ID: m.ID, Addr: addr, Learner: m.Learner, Leader: m.ID == leader,
			Match: m.Match, Active: m.Active, Snapshot: m.Snapshot})
	}
	return out, nil
}
