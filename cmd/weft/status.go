package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/weft-fs/weft/auth"
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
			problems := statusProblems(st)
			if o.JSON {
				err = printStatusJSON(cmd.OutOrStdout(), o.Meta, st, problems)
			} else {
				err = printStatus(cmd.OutOrStdout(), o.Meta, st, problems)
			}
			if err == nil && len(problems) > 0 {
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
	keys, err := auth.Load(o.Keys)
	if err != nil {
		return proto.ClusterStatus{}, fmt.Errorf("--keys %s: %w", o.Keys, err)
	}
	tr := transport.NewTCPWith(transport.TCPOptions{Security: keys.Security(false)})
	pool := transport.NewPool(tr, transport.PoolOptions{})
	defer pool.Close()
	st, err := metarpc.NewClient(pool, o.Meta).Status(ctx)
	if err != nil {
		return proto.ClusterStatus{}, fmt.Errorf("status of %s: %w", o.Meta, err)
	}
	return st, nil
}

// storageServer is the targets of one storage server (one address).
type storageServer struct {
	Addr    string   `json:"addr"`
	Up      bool     `json:"up"`
	Targets []uint32 `json:"targets"`
}

func storageServers(ts []proto.TargetInfo) []storageServer {
	var out []storageServer
	for _, t := range ts {
		i := slices.IndexFunc(out, func(s storageServer) bool { return s.Addr == t.Addr })
		if i < 0 {
			out = append(out, storageServer{Addr: t.Addr})
			i = len(out) - 1
		}
		out[i].Targets = append(out[i].Targets, uint32(t.ID))
		out[i].Up = out[i].Up || t.Up
	}
	slices.SortFunc(out, func(a, b storageServer) int { return strings.Compare(a.Addr, b.Addr) })
	return out
}

// statusProblems lists what is wrong, one line each.
func statusProblems(st proto.ClusterStatus) []string {
	var p []string
	if len(st.Targets) == 0 {
		p = append(p, "no storage target is registered")
	}
	for _, s := range storageServers(st.Targets) {
		if !s.Up {
			p = append(p, fmt.Sprintf("storage server %s is down (targets %v)", s.Addr, s.Targets))
		}
	}
	for _, t := range st.Targets {
		if !t.Up {
			p = append(p, fmt.Sprintf("target-%d on %s is down", t.ID, t.Addr))
		}
	}
	if r := st.Replica; r != nil && r.Leader == 0 {
		p = append(p, "the metadata group has no leader")
	}
	return p
}

func printStatus(w io.Writer, addr string, st proto.ClusterStatus, problems []string) error {
	var b strings.Builder
	health := "HEALTHY"
	if len(problems) > 0 {
		health = "PROBLEMS"
	}
	fmt.Fprintf(&b, "file system %s: %s\n", st.FSID, health)
	for _, p := range problems {
		fmt.Fprintf(&b, "  ! %s\n", p)
	}
	fmt.Fprintf(&b, "\nmetadata service (asked %s)\n", addr)
	fmt.Fprintf(&b, "  version %s, up %s, %d inodes\n", st.Version, st.Uptime.Round(time.Second), st.Files)
	if r := st.Replica; r != nil {
		fmt.Fprintf(&b, "  replicated: member %d, leader %d, term %d, commit %d, applied %d, log to %d, snapshot at %d\n",
			r.ID, r.Leader, r.Term, r.Commit, r.Applied, r.LastIndex, r.Snapshot)
	} else {
		b.WriteString("  single server (not replicated)\n")
	}
	fmt.Fprintf(&b, "\nstorage servers (%d)\n", len(storageServers(st.Targets)))
	for _, s := range storageServers(st.Targets) {
		fmt.Fprintf(&b, "  %-24s %-4s targets %v\n", s.Addr, upDown(s.Up), s.Targets)
	}
	fmt.Fprintf(&b, "\ntargets (%d)\n", len(st.Targets))
	for _, t := range st.Targets {
		fmt.Fprintf(&b, "  target-%-4d %-24s %-4s size %8s used %8s avail %8s %5s\n", t.ID, t.Addr, upDown(t.Up),
			units.FormatSize(t.Total), units.FormatSize(t.Used), units.FormatSize(t.Free), usePercent(t.Used, t.Free))
	}
	fmt.Fprintf(&b, "\nclients (%d)\n", len(st.Clients))
	for _, c := range st.Clients {
		v := c.Version
		if v == "" {
			v = "version unknown"
		}
		fmt.Fprintf(&b, "  %-20s session %x from %-22s up %-10s %d open, lease %s left, %s\n", c.Name, c.Session[:4], c.Addr,
			c.Age.Round(time.Second), c.Handles, c.LeaseLeft.Round(100*time.Millisecond), v)
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

// statusJSON is `weft status --json`: sizes in bytes, durations in seconds.
type statusJSON struct {
	FSID     string               `json:"fsid"`
	Healthy  bool                 `json:"healthy"`
	Problems []string             `json:"problems"`
	Meta     statusMetaJSON       `json:"meta"`
	Servers  []storageServer      `json:"storage_servers"`
	Targets  []targetJSON         `json:"targets"`
	Clients  []statusClientJSON   `json:"clients"`
	Replica  *proto.ReplicaStatus `json:"replica,omitempty"`
}

type statusMetaJSON struct {
	Addr    string  `json:"addr"`
	Version string  `json:"version"`
	Uptime  float64 `json:"uptime_seconds"`
	Files   uint64  `json:"inodes"`
}

type statusClientJSON struct {
	Name      string  `json:"name"`
	Session   string  `json:"session"`
	Addr      string  `json:"addr"`
	Version   string  `json:"version"`
	Age       float64 `json:"age_seconds"`
	LeaseLeft float64 `json:"lease_left_seconds"`
	Handles   uint64  `json:"open_handles"`
}

func printStatusJSON(w io.Writer, addr string, st proto.ClusterStatus, problems []string) error {
	out := statusJSON{
		FSID: st.FSID, Healthy: len(problems) == 0, Problems: append([]string{}, problems...),
		Meta:    statusMetaJSON{Addr: addr, Version: st.Version, Uptime: st.Uptime.Seconds(), Files: st.Files},
		Servers: append([]storageServer{}, storageServers(st.Targets)...),
		Targets: []targetJSON{}, Clients: []statusClientJSON{}, Replica: st.Replica,
	}
	for _, t := range st.Targets {
		out.Targets = append(out.Targets, targetJSON{ID: uint32(t.ID), Addr: t.Addr, Total: t.Total, Used: t.Used, Free: t.Free, Up: t.Up})
	}
	for _, c := range st.Clients {
		out.Clients = append(out.Clients, statusClientJSON{Name: c.Name, Session: fmt.Sprintf("%x", c.Session), Addr: c.Addr,
			Version: c.Version, Age: c.Age.Seconds(), LeaseLeft: c.LeaseLeft.Seconds(), Handles: c.Handles})
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}
