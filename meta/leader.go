package meta

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/weft-fs/weft/meta/metarpc"
	"github.com/weft-fs/weft/meta/raftlog"
)

// NotLeaderError is the error of a request to a member of a replicated
// group that is not its ready leader: nothing was done, and the client
// should send the request to the leader (Addr, if known) or, with no
// leader known (an election), try again shortly. It unwraps to
// raftlog's *NotLeaderError or ErrNotReady, and so to EAGAIN, which is
// what travels on the wire; clients learn the leader's address with
// Members (metarpc.OpMembers).
type NotLeaderError struct {
	Leader uint64 // 0: none known
	Addr   string // the leader's address, if known
	err    error
}

func (e *NotLeaderError) Error() string {
	switch {
	case errors.Is(e.err, raftlog.ErrNotReady):
		return "meta: this member was just elected leader and is not ready yet; retry"
	case e.Leader == 0:
		return "meta: not the leader, and no leader is known (an election is under way); retry"
	case e.Addr == "":
		return fmt.Sprintf("meta: not the leader; the leader is member %d", e.Leader)
	}
	return fmt.Sprintf("meta: not the leader; the leader is member %d at %s", e.Leader, e.Addr)
}

func (e *NotLeaderError) Unwrap() error { return e.err }

// leading returns nil if this replicated member is the leader and takes
// requests, else a *NotLeaderError. It costs one atomic load: every
// request passes it.
func (s *Server) leading() error {
	st := s.replica.status()
	if st.Ready {
		return nil
	}
	if st.IsLeader {
		return &NotLeaderError{Leader: st.ID, Addr: s.memberAddr(st.ID), err: raftlog.ErrNotReady}
	}
	return &NotLeaderError{Leader: st.Leader, Addr: s.memberAddr(st.Leader), err: &raftlog.NotLeaderError{Leader: st.Leader}}
}

// notLeader turns raftlog's not-leader error of a proposal or read into a
// *NotLeaderError naming the leader's address.
func (s *Server) notLeader(err error) error {
	var nl *raftlog.NotLeaderError
	if errors.As(err, &nl) {
		return &NotLeaderError{Leader: nl.Leader, Addr: s.memberAddr(nl.Leader), err: nl}
	}
	return err
}

func (s *Server) memberAddr(id uint64) string {
	if id == 0 || s.opts.Replica == nil {
		return ""
	}
	return s.opts.Replica.Addrs[id]
}

// Members implements metarpc.GroupService: what this server knows of its
// group, answered by any member (a follower too, which is how clients find
// the leader). A single server answers with no members.
func (s *Server) Group(ctx context.Context) (metarpc.Membership, error) {
	if _, err := s.authorize(ctx); err != nil {
		return metarpc.Membership{}, err
	}
	m := metarpc.Membership{FSID: s.sm.fsidNow()}
	if s.replica == nil {
		return m, nil
	}
	st := s.replica.status()
	m.ID, m.Leader, m.Term = st.ID, st.Leader, st.Term
	m.LeaderAddr = s.memberAddr(st.Leader)
	for _, id := range s.opts.Replica.Peers {
		m.Members = append(m.Members, metarpc.GroupMember{ID: id, Addr: s.opts.Replica.Addrs[id]})
	}
	return m, nil
}

// becameLeader runs when this member, as new leader, has applied every
// earlier entry (raftlog's OnLeader, on the node goroutine; it must not
// block). What a leader keeps only in memory starts over, as after a
// restart: the sessions and open counts it may hold from an earlier term
// are stale (other leaders served in between), so they are forgotten and
// the grace period begins, in which clients re-register their sessions and
// handles with this leader (their renewals get ESTALE) and nothing is
// reclaimed; at its end the orphans nobody re-registered are reclaimed
// (orphanSweep). The target registry is reloaded from the store, which
// followers update only through applied commands, and every registered
// target counts as up for one heartbeat timeout.
func (s *Server) becameLeader(term uint64) {
	fresh := s.sm.nextIno == 0 // not formatted yet: no handle can exist, no grace needed
	if !fresh {
		s.graceUntil.Store(time.Now().Add(s.opts.OrphanGrace).UnixNano())
	}
	s.leases.reset() // the last leader's leases are its own: every client drops its cache
	s.mu.Lock()
	clear(s.sessions)
	clear(s.sessOpens)
	clear(s.writers)
	clear(s.opens)
	s.pending = nil
	s.mu.Unlock()
	if err := s.reg.reload(s.st, s.electionTimeout/2); err != nil {
		s.log.Error("meta: reload the target registry as new leader", "err", err)
	}
	s.applyParams("rebuild.rate") // the rebuild runs here now, at the group's persisted pace
	if fresh {
		return
	}
	s.bg.Add(2)
	go func() {
		defer s.bg.Done()
		// A group formatted before quotas counts its usage once.
		if err := s.recountIfNeeded(s.ctx); err != nil {
			s.log.Warn("meta: count quota usage as new leader", "err", err)
		}
	}()
	go func() {
		defer s.bg.Done()
		t := time.NewTimer(s.opts.OrphanGrace)
		defer t.Stop()
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		if st := s.replica.status(); !st.Ready || st.Term != term {
			return // leadership moved on; its new leader sweeps
		}
		s.orphanSweep()
	}()
}

// isLeader reports whether this server does the background work that
// changes the file system (session expiry, reclaim, object GC): a single
// server always, a replicated member only while it is the ready leader.
// That work moves with leadership.
func (s *Server) isLeader() bool {
	return s.replica == nil || s.replica.status().Ready
}
