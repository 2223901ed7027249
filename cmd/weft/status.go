package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/weft-fs/weft/health"
	"github.com/weft-fs/weft/internal/units"
	"github.com/weft-fs/weft/meta/metarpc"
	"github.com/weft-fs/weft/proto"
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
		Use:   "status --meta ADDR [--keys DIR] [--json]",
		Short: "Show the health of the metadata service, storage servers, targets and clients",
		Long: `Ask the metadata service for the state of the whole file system and show it
on one screen: the metadata service (its version, uptime, inodes, and its
raft state when replicated), every storage server and target (up or down,
usage), and every connected client (host, address, session age, version,
open handles).

It needs a key bundle of the cluster (any role: a client's on a client
host, as root; a server's on a server) and the metadata server's address.
It exits 0 when everything is up, 1 when something is wrong (a target or
storage server down, no target at all, a replicated metadata service
without a leader) or the service cannot be asked: usable from monitoring.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Meta == "" {
				return errors.New("--meta is required: the metadata server's host:port (e.g. --meta 10.0.0.1:7400)")
			}
			if err := checkAddr("meta", o.Meta, false); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), o.Timeout)
			defer cancel()
			st, err := fetchStatus(ctx, o)
			if err != nil {
				return err
			}
			r := health.Judge(o.Meta, st)
			ts, rs, rerr := fetchRebuild(ctx, o)
			if o.JSON {
				err = printStatusJSON(cmd.OutOrStdout(), r, ts, rs, rerr)
			} else {
				err = printStatus(cmd.OutOrStdout(), r)
				if err == nil {
					err = printRebuild(cmd.OutOrStdout(), ts, rs, rerr)
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

func fetchStatus(ctx context.Context, o *statusOptions) (proto.ClusterStatus, error) {
	pool, err := adminPool(o.Keys)
	if err != nil {
		return proto.ClusterStatus{}, err
	}
	defer pool.Close()
	st, err := metarpc.NewClient(pool, o.Meta).Status(ctx)
	if err != nil {
		return proto.ClusterStatus{}, fmt.Errorf("status of %s: %w", o.Meta, err)
	}
	return st, nil
}

func printStatus(w io.Writer, r health.Report) error {
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

func printStatusJSON(w io.Writer, r health.Report, ts []proto.TargetStatus, rs proto.RebuildStatus, rerr error) error {
	type stateJSON struct {
		ID      uint32 `json:"id"`
		State   string `json:"state"`
		Pending uint64 `json:"pending"`
	}
	out := struct {
		health.Report
		Rebuild *rebuildJSON `json:"rebuild,omitempty"`
		States  []stateJSON  `json:"target_states,omitempty"`
	}{Report: r}
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
