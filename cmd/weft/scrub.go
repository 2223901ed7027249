package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/weft-fs/weft/internal/units"
	"github.com/weft-fs/weft/meta/metarpc"
	"github.com/weft-fs/weft/proto"
)

type scrubOptions struct {
	Meta    string
	Keys    string
	Timeout time.Duration
	Now     bool
	Wait    bool
	JSON    bool
}

func newScrubCmd() *cobra.Command {
	o := &scrubOptions{}
	cmd := &cobra.Command{
		Use:   "scrub --meta ADDR [--now [--wait]] [--json]",
		Short: "Show the background scrub of every target, or start a pass now",
		Long: `Every storage server reads every block of its targets' objects at a throttled
rate (the run-time parameter scrub.rate, 50 MiB/s by default) and checks it
against its CRC32C, one pass per target every scrub.interval (a week by
default). A corrupt object, found by the scrub or by a client's read, is
reported to the metadata service: the copy or shard of a mirrored or
erasure-coded file is rewritten in place from the file's other copies or
shards (the rebuild); one of a RAID-0 file is counted lost, and reads of its
bad blocks fail with EIO (docs/data-protection.md, "Scrub").

Without --now, show per target: the last (or current) pass's start and end,
the bytes and objects it checked, and the corrupt objects reported,
repaired and lost. With --now, start a pass on every target that is up
(root: a server's key bundle, or a client's as root); with --wait too,
wait until those passes ended and show the state then (--timeout bounds
the whole wait: give it hours for full disks).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withMetaAdmin(cmd.Context(), o.Meta, o.Keys, o.Timeout, func(ctx context.Context, c *metarpc.Client) error {
				w := cmd.OutOrStdout()
				if o.Wait && !o.Now {
					return fmt.Errorf("--wait waits for the passes --now starts: give both")
				}
				if o.Now {
					before, err := c.ScrubStatus(ctx)
					if err != nil {
						return fmt.Errorf("scrub status of %s: %w", o.Meta, err)
					}
					ts, err := c.StartScrub(ctx)
					if err != nil {
						return fmt.Errorf("scrub --now on %s: %w", o.Meta, err)
					}
					if o.Wait {
						st, err := waitScrubPasses(ctx, c, before, ts)
						if err != nil {
							return err
						}
						if o.JSON {
							return printJSON(w, toScrubJSON(st))
						}
						return printScrub(w, st, time.Now())
					}
					if o.JSON {
						return printJSON(w, struct {
							Started []proto.TargetID `json:"started"`
						}{append([]proto.TargetID{}, ts...)})
					}
					names := make([]string, len(ts))
					for i, t := range ts {
						names[i] = fmt.Sprintf("target-%d", t)
					}
					_, err = fmt.Fprintf(w, "scrub started on %d targets: %s\n", len(ts), strings.Join(names, " "))
					return err
				}
				st, err := c.ScrubStatus(ctx)
				if err != nil {
					return fmt.Errorf("scrub status of %s: %w", o.Meta, err)
				}
				if o.JSON {
					return printJSON(w, toScrubJSON(st))
				}
				return printScrub(w, st, time.Now())
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Meta, "meta", "", "host:port of the metadata server")
	f.StringVar(&o.Keys, "keys", defaultKeys, "directory of a key bundle of this cluster (weft keygen)")
	f.DurationVar(&o.Timeout, "timeout", 30*time.Second, "give up asking after this long")
	f.BoolVar(&o.Now, "now", false, "start a pass on every target that is up now")
	f.BoolVar(&o.Wait, "wait", false, "with --now: wait until the passes ended, then show the state")
	f.BoolVar(&o.JSON, "json", false, "print JSON")
	return cmd
}

// scrubPoll is how often --wait asks for the scrub's state.
const scrubPoll = time.Second

// waitScrubPasses waits until every target of started completed a pass
// more than in before and runs none (a pass under way when --now came is
// followed by the one it asked for), and returns the state then.
func waitScrubPasses(ctx context.Context, c *metarpc.Client, before proto.ScrubStatus, started []proto.TargetID) (proto.ScrubStatus, error) {
	passes := map[proto.TargetID]uint64{}
	for _, t := range before.Targets {
		passes[t.Target] = t.Passes
	}
	for {
		st, err := c.ScrubStatus(ctx)
		if err != nil {
			return st, fmt.Errorf("scrub --wait: %w", err)
		}
		done := 0
		for _, t := range st.Targets {
			if slices.Contains(started, t.Target) && !t.Running && t.Passes > passes[t.Target] {
				done++
			}
		}
		if done == len(started) {
			return st, nil
		}
		select {
		case <-ctx.Done():
			return st, fmt.Errorf("scrub --wait: %d of %d targets done when --timeout ran out: %w", done, len(started), ctx.Err())
		case <-time.After(scrubPoll):
		}
	}
}

func printJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

type scrubTargetJSON struct {
	ID       uint32 `json:"id"`
	Running  bool   `json:"running"`
	Start    int64  `json:"start"` // Unix ns; 0: never
	End      int64  `json:"end"`
	Bytes    uint64 `json:"bytes"`
	Objects  uint64 `json:"objects"`
	Passes   uint64 `json:"passes"`
	Corrupt  uint64 `json:"corrupt"`
	Total    uint64 `json:"total_bytes"`
	Reported uint64 `json:"reported"`
	Repaired uint64 `json:"repaired"`
	Lost     uint64 `json:"lost"`
	Heard    int64  `json:"heard"`
}

type lostJSON struct {
	Target uint32 `json:"target"`
	Ino    uint64 `json:"ino"`
	Gen    uint64 `json:"gen"`
	Slot   uint32 `json:"slot"`
}

type scrubJSON struct {
	Targets []scrubTargetJSON `json:"targets"`
	Lost    []lostJSON        `json:"lost"`
}

func toScrubJSON(st proto.ScrubStatus) scrubJSON {
	out := scrubJSON{Targets: []scrubTargetJSON{}, Lost: []lostJSON{}}
	for _, t := range st.Targets {
		out.Targets = append(out.Targets, scrubTargetJSON{ID: uint32(t.Target), Running: t.Running, Start: t.Start, End: t.End,
			Bytes: t.Bytes, Objects: t.Objects, Passes: t.Passes, Corrupt: t.Corrupt, Total: t.Total,
			Reported: t.Reported, Repaired: t.Repaired, Lost: t.Lost, Heard: t.Heard})
	}
	for _, l := range st.Lost {
		out.Lost = append(out.Lost, lostJSON{Target: uint32(l.Target), Ino: uint64(l.Obj.Ino), Gen: l.Obj.Gen, Slot: l.Obj.Stripe})
	}
	return out
}

// scrubTime renders a Unix ns time for the table.
func scrubTime(ns int64) string {
	if ns == 0 {
		return "-"
	}
	return time.Unix(0, ns).UTC().Format("2006-01-02 15:04:05")
}

func printScrub(w io.Writer, st proto.ScrubStatus, now time.Time) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%-10s %-8s %-19s %-19s %10s %8s %8s %8s %8s\n", "TARGET", "PASS", "STARTED", "ENDED", "CHECKED", "OBJECTS", "REPORTED", "REPAIRED", "LOST")
	for _, t := range st.Targets {
		pass := "idle"
		switch {
		case t.Heard == 0:
			pass = "unknown" // its server has not reported to this metadata server
		case t.Running:
			pass = "running"
		}
		fmt.Fprintf(&b, "%-10s %-8s %-19s %-19s %10s %8d %8d %8d %8d\n", fmt.Sprintf("target-%d", t.Target), pass,
			scrubTime(t.Start), scrubTime(t.End), units.FormatSize(t.Bytes), t.Objects, t.Reported, t.Repaired, t.Lost)
	}
	for _, l := range st.Lost {
		fmt.Fprintf(&b, "LOST: target-%d inode %d slot %d (generation %#x): no copy or parity to repair it from; reads of its bad blocks fail with EIO\n",
			l.Target, l.Obj.Ino, l.Obj.Stripe, l.Obj.Gen)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// scrubLine is `weft status`'s summary of the scrub.
func scrubLine(st proto.ScrubStatus) string {
	var running, reported, repaired, lost uint64
	var last int64
	for _, t := range st.Targets {
		if t.Running {
			running++
		}
		reported += t.Reported
		repaired += t.Repaired
		lost += t.Lost
		last = max(last, t.End)
	}
	s := fmt.Sprintf("scrub: %d of %d targets scrubbing, last pass ended %s; corrupt objects: %d reported, %d repaired, %d lost",
		running, len(st.Targets), scrubTime(last), reported, repaired, lost)
	return s
}
