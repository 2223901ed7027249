package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/weft-fs/weft/health"
	"github.com/weft-fs/weft/internal/units"
	"github.com/weft-fs/weft/meta/metarpc"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/transport"
)

type statusOptions struct {
	Meta    string
	Keys    string
	Timeout time.Duration
	JSON    bool
}

// errUnhealthy is returned (exit status 1) after the report when something
// is wrong, so `weft status` can feed monitoring.
var errUnhealthy = errors.New("the file system is not healthy (see above)")

func newStatusCmd() *cobra.Command {
	o := &statusOptions{}
	cmd := &cobra.Command{
		Use:   "status --meta ADDR[,ADDR...] [--keys DIR] [--json]",
		Short: "Show the health of the metadata service, storage servers, targets and clients",
		Long: `Ask the metadata service for the state of the whole file system and show it
on one screen: the metadata service (its version, uptime, inodes, and its
raft state when replicated), every storage server and target (up or down,
usage), and every connected client (host, address, session age, version,
open handles).

With a replicated metadata service it shows every member of the group:
its id and address, whether it leads, its term, commit and applied index
(as the member itself reports them: each member is asked), and the
leader's view of it (the last log index known to be on it, how far that
lags the leader's log, whether the leader heard from it lately). --meta
may list several members: the first that answers is asked first.

It needs a key bundle of the cluster (any role: a client's on a client
host, as root; a server's on a server) and the metadata server's address.
It exits 0 when everything is up, 1 when something is wrong (a target or
storage server down, no target at all, a replicated metadata service
without a leader, a member that does not answer) or the service cannot be
asked: usable from monitoring.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Meta == "" {
				return errors.New("--meta is required: the metadata server's host:port (e.g. --meta 10.0.0.1:7400)")
			}
			if err := checkAddrList("meta", o.Meta); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), o.Timeout)
			defer cancel()
			addr, st, members, err := fetchStatus(ctx, o)
			if err != nil {
				return err
			}
			r := health.Judge(addr, st)
			for _, m := range members {
				if m.Error != "" {
					r.Problems = append(r.Problems, fmt.Sprintf("metadata member %d (%s) does not answer: %s", m.ID, m.Addr, m.Error))
					r.Healthy = false
				}
			}
			ts, rs, rerr := fetchRebuild(ctx, o)
			sc, serr := fetchScrub(ctx, o)
			if serr == nil {
				var lost uint64
				for _, t := range sc.Targets {
					lost += t.Lost
				}
				if lost > 0 {
					r.Problems = append(r.Problems, fmt.Sprintf("%d corrupt objects found by the scrub or reads have no copy or parity to repair them from (weft scrub lists them)", lost))
					r.Healthy = false
				}
			}
			if o.JSON {
				rep := statusReport{Report: r, Members: members}
				if serr == nil {
					sj := toScrubJSON(sc)
					rep.Scrub = &sj
				}
				err = printStatusJSON(cmd.OutOrStdout(), rep, ts, rs, rerr)
			} else {
				err = printStatus(cmd.OutOrStdout(), r, members)
				if err == nil {
					err = printRebuild(cmd.OutOrStdout(), ts, rs, rerr)
				}
				if err == nil {
					err = printScrubLine(cmd.OutOrStdout(), sc, serr)
				}
			}
			if err == nil && !r.Healthy {
				err = errUnhealthy
			}
			return err
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.Meta, "meta", "", "host:port of the metadata server")
	fs.StringVar(&o.Keys, "keys", defaultKeys, "directory of a key bundle of this cluster (weft keygen)")
	fs.DurationVar(&o.Timeout, "timeout", 10*time.Second, "give up asking after this long")
	fs.BoolVar(&o.JSON, "json", false, "print JSON")
	return cmd
}

// memberStatus is one member of a replicated metadata group as `weft
// status` shows it: the leader's view of it, and what it says of itself.
type memberStatus struct {
	proto.ReplicaMember
	// Lag is how many entries of the leader's log the leader does not
	// know to be on this member yet (its last index minus Match).
	Lag uint64 `json:"lag"`
	// What the member reports of itself (zero when it did not answer).
	Term      uint64 `json:"term"`
	Commit    uint64 `json:"commit"`
	Applied   uint64 `json:"applied"`
	LastIndex uint64 `json:"last_index"`
	Error     string `json:"error,omitempty"` // why it did not answer
	// view: the leader's answer's members (only on the leader's entry).
	view []proto.ReplicaMember
}

// statusReport is the JSON form: the health report, the group, the
// rebuild's progress and the targets' states.
type statusReport struct {
	health.Report
	Members []memberStatus `json:"meta_members,omitempty"`
	Rebuild *rebuildJSON   `json:"rebuild,omitempty"`
	States  []stateJSON    `json:"target_states,omitempty"`
	Scrub   *scrubJSON     `json:"scrub,omitempty"`
}

// stateJSON is a target's state in status --json.
type stateJSON struct {
	ID      uint32 `json:"id"`
	State   string `json:"state"`
	Pending uint64 `json:"pending"`
}

// fetchStatus asks the first member of o.Meta that answers for the
// cluster's status (addr: the one that answered); with a replicated
// service it then asks the leader for its view of the members' progress,
// and every member for its own raft state.
func fetchStatus(ctx context.Context, o *statusOptions) (addr string, st proto.ClusterStatus, members []memberStatus, err error) {
	pool, err := adminPool(o.Keys)
	if err != nil {
		return "", proto.ClusterStatus{}, nil, err
	}
	defer pool.Close()
	var errs []error
	for _, a := range strings.Split(o.Meta, ",") {
		addr = strings.TrimSpace(a)
		st, err = metarpc.NewClient(pool, addr).Status(ctx)
		if err == nil {
			break
		}
		errs = append(errs, fmt.Errorf("status of %s: %w", addr, err))
	}
	if err != nil {
		return "", proto.ClusterStatus{}, nil, errors.Join(errs...)
	}
	if st.Replica == nil {
		return addr, st, nil, nil
	}
	return addr, st, groupStatus(ctx, pool, addr, st.Replica), nil
}

// groupStatus asks every member of the group rs (as the member at addr
// knows it) for its own raft state, concurrently, and takes the members'
// progress from the leader's answer.
func groupStatus(ctx context.Context, pool *transport.Pool, addr string, rs *proto.ReplicaStatus) []memberStatus {
	out := make([]memberStatus, len(rs.Members))
	var wg sync.WaitGroup
	for i, m := range rs.Members {
		out[i].ReplicaMember = m
		if m.ID == rs.ID {
			out[i].Addr = cmp.Or(out[i].Addr, addr)
		}
		if out[i].Addr == "" {
			out[i].Error = "address unknown to the member asked"
			continue
		}
		wg.Go(func() {
			mctx, cancel := context.WithTimeout(ctx, memberStatusTimeout)
			defer cancel()
			r, err := metarpc.NewClient(pool, out[i].Addr).MemberStatus(mctx)
			switch {
			case err != nil:
				out[i].Error = err.Error()
			default:
				out[i].Term, out[i].Commit, out[i].Applied, out[i].LastIndex = r.Term, r.Commit, r.Applied, r.LastIndex
				if r.ID != m.ID {
					out[i].Error = fmt.Sprintf("answers as member %d", r.ID)
				}
				if r.ID == r.Leader && r.ID == m.ID {
					// The leader's answer has every member's progress.
					out[i].view = r.Members
					out[i].LastIndex = r.LastIndex
				}
			}
		})
	}
	wg.Wait()
	// The leader's view of each member, if the leader answered.
	for _, l := range out {
		if l.Error != "" || !l.Leader || len(l.view) == 0 {
			continue
		}
		for i := range out {
			for _, pm := range l.view {
				if pm.ID == out[i].ID {
					out[i].Match, out[i].Active, out[i].Snapshot = pm.Match, pm.Active, pm.Snapshot
					out[i].Lag = l.LastIndex - min(l.LastIndex, pm.Match)
				}
			}
		}
	}
	return out
}

// memberStatusTimeout bounds the wait for one member's answer: a member
// that is down must not hold up the report of the others.
const memberStatusTimeout = 3 * time.Second

func printStatus(w io.Writer, r health.Report, members []memberStatus) error {
	var b strings.Builder
	state := "HEALTHY"
	if !r.Healthy {
		state = "PROBLEMS"
	}
	fmt.Fprintf(&b, "file system %s: %s\n", r.FSID, state)
	for _, p := range r.Problems {
		fmt.Fprintf(&b, "  ! %s\n", p)
	}
	m := r.Meta
	fmt.Fprintf(&b, "\nmetadata service (asked %s)\n", m.Addr)
	fmt.Fprintf(&b, "  version %s, up %s, %d inodes, %d requests served\n", m.Version,
		(time.Duration(m.Uptime) * time.Second).String(), m.Files, m.Requests)
	if rs := r.Replica; rs != nil {
		fmt.Fprintf(&b, "  replicated: member %d, leader %d, term %d, commit %d, applied %d, log to %d, snapshot at %d\n",
			rs.ID, rs.Leader, rs.Term, rs.Commit, rs.Applied, rs.LastIndex, rs.Snapshot)
		if len(members) > 0 {
			fmt.Fprintf(&b, "  %-6s %-22s %-8s %6s %10s %10s %10s %8s %s\n", "member", "address", "role", "term", "commit", "applied", "match", "lag", "leader's view")
		}
		for _, m := range members {
			role := "follower"
			switch {
			case m.Leader:
				role = "leader"
			case m.Learner:
				role = "learner"
			}
			view := "-"
			if m.Match > 0 || m.Active {
				view = "active"
				if !m.Active {
					view = "not heard from"
				}
				if m.Snapshot {
					view += ", sending snapshot"
				}
			}
			if m.Error != "" {
				fmt.Fprintf(&b, "  %-6d %-22s %-8s %6s %10s %10s %10d %8d %s; does not answer: %s\n", m.ID, m.Addr, role, "?", "?", "?", m.Match, m.Lag, view, m.Error)
				continue
			}
			fmt.Fprintf(&b, "  %-6d %-22s %-8s %6d %10d %10d %10d %8d %s\n", m.ID, m.Addr, role, m.Term, m.Commit, m.Applied, m.Match, m.Lag, view)
		}
	} else {
		b.WriteString("  single server (not replicated)\n")
	}
	fmt.Fprintf(&b, "\nstorage servers (%d)\n", len(r.Servers))
	for _, s := range r.Servers {
		fmt.Fprintf(&b, "  %-24s %-4s targets %v\n", s.Addr, upDown(s.Up), s.Targets)
	}
	fmt.Fprintf(&b, "\ntargets (%d)\n", len(r.Targets))
	for _, t := range r.Targets {
		fmt.Fprintf(&b, "  target-%-4d %-24s %-4s size %8s used %8s avail %8s %5s  %d objects\n", t.ID, t.Addr, upDown(t.Up),
			units.FormatSize(t.Total), units.FormatSize(t.Used), units.FormatSize(t.Free), usePercent(t.Used, t.Free), t.Objects)
	}
	fmt.Fprintf(&b, "\nclients (%d)\n", len(r.Clients))
	for _, c := range r.Clients {
		v := c.Version
		if v == "" {
			v = "version unknown"
		}
		fmt.Fprintf(&b, "  %-20s session %.8s from %-22s up %-8s %d open, lease %.1fs left, %s\n", c.Name, c.Session, c.Addr,
			(time.Duration(c.Age) * time.Second).String(), c.Handles, c.LeaseLeft, v)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func upDown(up bool) string {
	if up {
		return "UP"
	}
	return "DOWN"
}

// fetchRebuild asks for the targets' states and the rebuild's progress
// (metarpc OpTargetList); a metadata server that does not know the op
// answers ENOSYS, and status shows the rest.
func fetchRebuild(ctx context.Context, o *statusOptions) ([]proto.TargetStatus, proto.RebuildStatus, error) {
	pool, err := adminPool(o.Keys)
	if err != nil {
		return nil, proto.RebuildStatus{}, err
	}
	defer pool.Close()
	return metarpc.NewClient(pool, o.Meta).TargetList(ctx)
}

func fetchScrub(ctx context.Context, o *statusOptions) (proto.ScrubStatus, error) {
	pool, err := adminPool(o.Keys)
	if err != nil {
		return proto.ScrubStatus{}, err
	}
	defer pool.Close()
	return metarpc.NewClient(pool, o.Meta).ScrubStatus(ctx)
}

// printScrubLine shows the scrub's summary (weft scrub has the details).
func printScrubLine(w io.Writer, st proto.ScrubStatus, err error) error {
	line := scrubLine(st)
	if err != nil {
		line = fmt.Sprintf("scrub: (not known: %v)", err)
	}
	_, err = fmt.Fprintf(w, "  %s\n", line)
	return err
}

// printRebuild shows the rebuild's progress and the targets not in
// service.
func printRebuild(w io.Writer, ts []proto.TargetStatus, rs proto.RebuildStatus, err error) error {
	var b strings.Builder
	b.WriteString("\nrebuild\n")
	if err != nil {
		fmt.Fprintf(&b, "  (not known: %v)\n", err)
	} else {
		fmt.Fprintf(&b, "  %s\n", rebuildLine(rs))
		for _, t := range ts {
			if t.State != "in" {
				fmt.Fprintf(&b, "  target-%d is %s, %d objects still to move off it\n", t.ID, t.State, t.Pending)
			}
		}
	}
	_, err = io.WriteString(w, b.String())
	return err
}

func printStatusJSON(w io.Writer, out statusReport, ts []proto.TargetStatus, rs proto.RebuildStatus, rerr error) error {
	if rerr == nil {
		rj := toRebuildJSON(rs)
		out.Rebuild = &rj
		for _, t := range ts {
			out.States = append(out.States, stateJSON{uint32(t.ID), t.State, t.Pending})
		}
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}
