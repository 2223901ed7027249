package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/weft-fs/weft/meta/metarpc"
	"github.com/weft-fs/weft/transport"
)

// adminOptions are what every `weft admin` command needs to reach the
// metadata servers: their addresses and a metadata server's key bundle
// (membership is served to metadata servers only).
type adminOptions struct {
	meta    []string
	keys    string
	encrypt bool
	timeout time.Duration
}

func newAdminCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "admin",
		Short: "Administer a running file system (metadata group membership)",
	}
	cmd.AddCommand(newAdminMetaCmd())
	return cmd
}

func newAdminMetaCmd() *cobra.Command {
	var o adminOptions
	cmd := &cobra.Command{
		Use:   "meta",
		Short: "List, add and remove the members of the replicated metadata service",
		Long: `List, add and remove the members of a replicated metadata service (raft
membership changes, one at a time, made by the leader). Run it on a
metadata host: it authenticates with that host's key bundle (role meta),
as only metadata servers may see or change the group.

Replacing a member whose disk died, without downtime:
  1. start a new server with an empty data directory in join mode, knowing
     the others' addresses;
  2. weft admin meta add NEWID NEWADDR   (joins as a learner, receives a
     snapshot, is promoted to voter once caught up);
  3. weft admin meta remove DEADID.`,
	}
	pf := cmd.PersistentFlags()
	pf.StringSliceVar(&o.meta, "meta", []string{"127.0.0.1:7400"}, "addresses of the metadata servers (any members: the change goes to the leader)")
	pf.StringVar(&o.keys, "keys", defaultKeys, "directory of a metadata server's key bundle (role meta)")
	pf.BoolVar(&o.encrypt, "encrypt", false, "encrypt traffic on the wire (needed if the servers require it)")
	pf.DurationVar(&o.timeout, "timeout", 5*time.Minute, "how long to wait (an added member must catch up before it is promoted)")

	var asJSON bool
	list := &cobra.Command{
		Use:   "list [--json]",
		Short: "Show every member: id, address, voter or learner, leader, replication progress",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd, func(ctx context.Context, cs []*metarpc.Client) error {
				ms, err := listMembers(ctx, cs)
				if err != nil {
					return err
				}
				if asJSON {
					enc := json.NewEncoder(cmd.OutOrStdout())
					enc.SetIndent("", "  ")
					return enc.Encode(ms)
				}
				return printMembers(cmd.OutOrStdout(), ms)
			})
		},
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	add := &cobra.Command{
		Use:   "add ID ADDR",
		Short: "Add a new, empty member (learner until it caught up, then voter)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseMemberID(args[0])
			if err != nil {
				return err
			}
			if err := checkAddr("ADDR", args[1], false); err != nil {
				return err
			}
			return o.run(cmd, func(ctx context.Context, cs []*metarpc.Client) error {
				if err := onLeader(ctx, cs, func(c *metarpc.Client) error { return c.AddMember(ctx, id, args[1]) }); err != nil {
					return fmt.Errorf("add member %d: %w", id, err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "member %d (%s) added and caught up: it votes\n", id, args[1])
				return nil
			})
		},
	}
	remove := &cobra.Command{
		Use:   "remove ID",
		Short: "Remove a member from the group",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseMemberID(args[0])
			if err != nil {
				return err
			}
			return o.run(cmd, func(ctx context.Context, cs []*metarpc.Client) error {
				if err := onLeader(ctx, cs, func(c *metarpc.Client) error { return c.RemoveMember(ctx, id) }); err != nil {
					return fmt.Errorf("remove member %d: %w", id, err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "member %d removed\n", id)
				return nil
			})
		},
	}
	cmd.AddCommand(list, add, remove)
	return cmd
}

func parseMemberID(s string) (uint64, error) {
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil || id == 0 || id >= 1<<16 {
		return 0, fmt.Errorf("member id %q: ids are 1 to 65535", s)
	}
	return id, nil
}

// run connects to every --meta address with the keys and runs f.
func (o *adminOptions) run(cmd *cobra.Command, f func(ctx context.Context, cs []*metarpc.Client) error) error {
	if len(o.meta) == 0 {
		return errors.New("--meta: no metadata server address")
	}
	for _, a := range o.meta {
		if err := checkAddr("meta", a, false); err != nil {
			return err
		}
	}
	keys, err := loadKeys("weft admin meta", o.keys, transport.RoleMeta)
	if err != nil {
		return err
	}
	tr := transport.NewTCPWith(transport.TCPOptions{Security: keys.Security(o.encrypt)})
	pool := transport.NewPool(tr, transport.PoolOptions{})
	defer pool.Close()
	var cs []*metarpc.Client
	for _, a := range o.meta {
		cs = append(cs, metarpc.NewClient(pool, a))
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), o.timeout)
	defer cancel()
	return f(ctx, cs)
}

// onLeader runs f against each server in turn until one is the leader
// (EAGAIN: not the leader, or a new leader not ready yet; tried again
// while ctx lasts).
func onLeader(ctx context.Context, cs []*metarpc.Client, f func(*metarpc.Client) error) error {
	var last error
	for {
		for _, c := range cs {
			err := f(c)
			if err == nil || !errors.Is(err, syscall.EAGAIN) && !isUnreachable(err) {
				return err
			}
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no leader took the change: %w", last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func isUnreachable(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ETIMEDOUT) || errors.Is(err, syscall.ECONNRESET)
}

// listMembers asks every server and prefers the leader's answer, which
// alone has the replication progress.
func listMembers(ctx context.Context, cs []*metarpc.Client) ([]metarpc.Member, error) {
	var first []metarpc.Member
	var errs []error
	for _, c := range cs {
		ms, err := c.Members(ctx)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, m := range ms {
			if m.Leader && m.Match > 0 {
				return ms, nil
			}
		}
		if first == nil {
			first = ms
		}
	}
	if first == nil {
		return nil, fmt.Errorf("no metadata server answered: %w", errors.Join(errs...))
	}
	return first, nil
}

func printMembers(w io.Writer, ms []metarpc.Member) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tADDRESS\tROLE\tMATCH\tSTATE")
	for _, m := range ms {
		role := "voter"
		if m.Learner {
			role = "learner"
		}
		if m.Leader {
			role += ",leader"
		}
		addr := m.Addr
		if addr == "" {
			addr = "-"
		}
		var state []string
		switch {
		case m.Snapshot:
			state = append(state, "receiving snapshot")
		case m.Active:
			state = append(state, "active")
		case m.Match > 0 || m.Leader:
			state = append(state, "not heard from")
		default:
			state = append(state, "-")
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\n", m.ID, addr, role, m.Match, strings.Join(state, ","))
	}
	return tw.Flush()
}
