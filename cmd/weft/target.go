package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/weft-fs/weft/internal/units"
	"github.com/weft-fs/weft/meta/metarpc"
	"github.com/weft-fs/weft/proto"
)

// targetOptions are the flags every `weft target` subcommand shares.
type targetOptions struct {
	Meta    string
	Keys    string
	Timeout time.Duration
}

// run runs f with a client of the metadata service (withMetaAdmin).
func (o *targetOptions) run(cmd *cobra.Command, f func(context.Context, *metarpc.Client) error) error {
	return withMetaAdmin(cmd.Context(), o.Meta, o.Keys, o.Timeout, f)
}

func newTargetCmd() *cobra.Command {
	o := &targetOptions{}
	cmd := &cobra.Command{
		Use:   "target list|out|drain|deactivate|activate|remove|rebuild-rate ...",
		Short: "List storage targets with their states, change a target's state, set the rebuild rate",
		Long: `Manage the lifecycle of storage targets (docs/data-protection.md, "Target
lifecycle and rebuild"). A target is in one of these states:

  in        serves and gets new objects (the default)
  out       lost: its objects are rebuilt on other targets, storage to storage
  draining  serves, gets no new objects, its objects are moved to others
  inactive  gets no new objects; its data stays
  removed   retired; it may not register again until its directory is formatted anew

A target down longer than the metadata service's --rebuild-after is marked
out by itself, and in again when it comes back (then only its stale objects
are repaired). Changing states needs a key bundle of the cluster as root
(a server's key on a server, or a client's as root).`,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&o.Meta, "meta", "", "host:port of the metadata server")
	pf.StringVar(&o.Keys, "keys", defaultKeys, "directory of a key bundle of this cluster (weft keygen)")
	pf.DurationVar(&o.Timeout, "timeout", 10*time.Second, "give up asking after this long")

	var asJSON bool
	list := &cobra.Command{
		Use:   "list [--json]",
		Short: "Show every target: server, domain, state, up/down, usage, objects, rebuild progress",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd, func(ctx context.Context, c *metarpc.Client) error {
				ts, rs, err := c.TargetList(ctx)
				if err != nil {
					return fmt.Errorf("target list of %s: %w", o.Meta, err)
				}
				if asJSON {
					return printTargetsJSON(cmd.OutOrStdout(), ts, rs)
				}
				return printTargets(cmd.OutOrStdout(), ts, rs)
			})
		},
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.AddCommand(list)

	for _, s := range []struct{ verb, state, short string }{
		{"out", "out", "Mark a target lost: its objects are rebuilt on other targets now"},
		{"drain", "draining", "Move every object off a target while it serves; it gets no new objects"},
		{"deactivate", "inactive", "Give a target no new objects; its data stays where it is"},
		{"activate", "in", "Put a target back in service (from out, draining or inactive)"},
		{"remove", "removed", "Retire a target; refused while it holds the only copy of any object"},
	} {
		cmd.AddCommand(&cobra.Command{
			Use:   s.verb + " ID",
			Short: s.short,
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				id, err := parseTargetID(args[0])
				if err != nil {
					return err
				}
				return o.run(cmd, func(ctx context.Context, c *metarpc.Client) error {
					if err := c.SetTargetState(ctx, id, s.state); err != nil {
						return fmt.Errorf("target %d: %s: %w; nothing changed", id, s.verb, err)
					}
					fmt.Fprintf(cmd.OutOrStdout(), "target-%d: %s\n", id, s.state)
					return nil
				})
			},
		})
	}

	cmd.AddCommand(&cobra.Command{
		Use:   "rebuild-rate [BYTES]",
		Short: "Show, or set while it runs, the rebuild's limit in bytes per second (e.g. 512MiB; 0: none)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var set *uint64
			if len(args) == 1 {
				n, err := units.ParseSize(args[0])
				if err != nil {
					return fmt.Errorf("rebuild rate %q: %w", args[0], err)
				}
				set = &n
			}
			return o.run(cmd, func(ctx context.Context, c *metarpc.Client) error {
				rate, err := c.RebuildRate(ctx, set)
				if err != nil {
					return fmt.Errorf("rebuild rate: %w", err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "rebuild rate: %s\n", rateString(rate))
				return nil
			})
		},
	})
	return cmd
}

func parseTargetID(s string) (proto.TargetID, error) {
	s = strings.TrimPrefix(s, "target-")
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("target id %q: want a number such as 3 (see weft target list)", s)
	}
	return proto.TargetID(n), nil
}

func rateString(r uint64) string {
	if r == 0 {
		return "unlimited"
	}
	return units.FormatSize(r) + "/s"
}

// rebuildLine says in one line what the rebuild is doing.
func rebuildLine(rs proto.RebuildStatus) string {
	var b strings.Builder
	if rs.Active {
		fmt.Fprintf(&b, "rebuilding: %d of %d objects, %s of %s, %s (limit %s)",
			rs.Done, rs.Objects, units.FormatSize(rs.BytesDone), units.FormatSize(rs.Bytes),
			rateString(rs.Measured), rateString(rs.Rate))
		if rs.ETA > 0 {
			fmt.Fprintf(&b, ", ETA %s", rs.ETA.Round(time.Second))
		}
	} else {
		fmt.Fprintf(&b, "rebuild idle (limit %s", rateString(rs.Rate))
		if rs.RebuildAfter > 0 {
			fmt.Fprintf(&b, ", targets down %s are rebuilt", rs.RebuildAfter)
		}
		b.WriteString(")")
		if rs.Objects > 0 {
			fmt.Fprintf(&b, "; last pass: %d of %d objects", rs.Done, rs.Objects)
		}
	}
	if rs.Deferred > 0 || rs.Failed > 0 {
		fmt.Fprintf(&b, "; %d deferred (files in use), %d failed (retried)", rs.Deferred, rs.Failed)
	}
	if rs.Lost > 0 {
		fmt.Fprintf(&b, "; %d objects LOST (no readable copy)", rs.Lost)
	}
	return b.String()
}

func printTargets(w io.Writer, ts []proto.TargetStatus, rs proto.RebuildStatus) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%-10s  %-22s  %-12s  %-9s  %-4s  %9s  %9s  %9s  %s\n",
		"TARGET", "SERVER", "DOMAIN", "STATE", "UP", "SIZE", "USED", "OBJECTS", "TO REBUILD")
	for _, t := range ts {
		state := t.State
		if t.Auto {
			state += "*"
		}
		dom := t.Domain
		if dom == "" {
			dom = "-"
		}
		fmt.Fprintf(&b, "%-10s  %-22s  %-12s  %-9s  %-4s  %9s  %9s  %9d  %d\n",
			fmt.Sprintf("target-%d", t.ID), t.Addr, dom, state, upDown(t.Up),
			units.FormatSize(t.Total), units.FormatSize(t.Used), t.Objects, t.Pending)
	}
	b.WriteString(rebuildLine(rs) + "\n")
	if hasAuto(ts) {
		b.WriteString("(* out because it was down longer than rebuild_after; in again when it returns)\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func hasAuto(ts []proto.TargetStatus) bool {
	for _, t := range ts {
		if t.Auto {
			return true
		}
	}
	return false
}

type targetStatusJSON struct {
	ID      uint32 `json:"id"`
	Addr    string `json:"addr"`
	Domain  string `json:"domain"`
	State   string `json:"state"`
	Auto    bool   `json:"auto"`
	Up      bool   `json:"up"`
	Total   uint64 `json:"total"`
	Used    uint64 `json:"used"`
	Free    uint64 `json:"free"`
	Objects uint64 `json:"objects"`
	Pending uint64 `json:"pending"`
}

type rebuildJSON struct {
	Active       bool    `json:"active"`
	Passes       uint64  `json:"passes"`
	Objects      uint64  `json:"objects"`
	Done         uint64  `json:"done"`
	Bytes        uint64  `json:"bytes"`
	BytesDone    uint64  `json:"bytes_done"`
	Deferred     uint64  `json:"deferred"`
	Failed       uint64  `json:"failed"`
	Lost         uint64  `json:"lost"`
	Rate         uint64  `json:"rate"`
	Measured     uint64  `json:"measured"`
	ETASeconds   float64 `json:"eta_s"`
	RebuildAfter float64 `json:"rebuild_after_s"`
}

func toRebuildJSON(rs proto.RebuildStatus) rebuildJSON {
	return rebuildJSON{Active: rs.Active, Passes: rs.Passes, Objects: rs.Objects, Done: rs.Done, Bytes: rs.Bytes,
		BytesDone: rs.BytesDone, Deferred: rs.Deferred, Failed: rs.Failed, Lost: rs.Lost, Rate: rs.Rate,
		Measured: rs.Measured, ETASeconds: rs.ETA.Seconds(), RebuildAfter: rs.RebuildAfter.Seconds()}
}

func printTargetsJSON(w io.Writer, ts []proto.TargetStatus, rs proto.RebuildStatus) error {
	out := struct {
		Targets []targetStatusJSON `json:"targets"`
		Rebuild rebuildJSON        `json:"rebuild"`
	}{Targets: []targetStatusJSON{}, Rebuild: toRebuildJSON(rs)}
	for _, t := range ts {
		out.Targets = append(out.Targets, targetStatusJSON{ID: uint32(t.ID), Addr: t.Addr, Domain: t.Domain, State: t.State,
			Auto: t.Auto, Up: t.Up, Total: t.Total, Used: t.Used, Free: t.Free, Objects: t.Objects, Pending: t.Pending})
	}
	b, err := json.Marshal(out)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}
