package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/weft-fs/weft/health"
	"github.com/weft-fs/weft/internal/units"
	"github.com/weft-fs/weft/meta/metarpc"
)

// targetStates asks the metadata service for every target's state.
func targetStates(ctx context.Context, o *targetOptions) (map[uint32]string, error) {
	var m map[uint32]string
	err := withMetaAdmin(ctx, o.Meta, o.Keys, o.Timeout, func(ctx context.Context, c *metarpc.Client) error {
		ts, _, err := c.TargetList(ctx)
		if err != nil {
			return fmt.Errorf("target states of %s: %w", o.Meta, err)
		}
		m = make(map[uint32]string, len(ts))
		for _, t := range ts {
			m[uint32(t.ID)] = t.State
		}
		return nil
	})
	return m, err
}

func newDfCmd() *cobra.Command {
	var asJSON, inodes bool
	to := &targetOptions{}
	cmd := &cobra.Command{
		Use:   "df [-i] [--json] [PATH]",
		Short: "Show the size, usage and state of every storage target",
		Long: `Show every storage target of the file system that holds PATH (default:
the first weft mount in /proc/mounts): size, used, available, use% and
whether its server is up, then a filesystem summary over the targets that
are up (like lfs df). Targets that share one file system (several targets
on one disk) count its size once in the summary. With -i, inodes instead:
the metadata service's inodes (used and free), then each target's objects
and the inodes left on its file system. It reads the user.weft.df
attribute.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := ""
			if len(args) == 1 {
				path = args[0]
			} else {
				p, err := defaultWeftMount()
				if err != nil {
					return err
				}
				path = p
			}
			ts, err := getDF(path)
			if err != nil {
				return err
			}
			if asJSON {
				return printDFJSON(cmd.OutOrStdout(), path, ts)
			}
			if inodes {
				var st unix.Statfs_t
				if err := retryEINTR(func() error { return unix.Statfs(path, &st) }); err != nil {
					return fmt.Errorf("statfs %s: %w", path, err)
				}
				return printDFInodes(cmd.OutOrStdout(), path, st.Files-st.Ffree, st.Ffree, ts)
			}
			var states map[uint32]string
			if to.Meta != "" {
				if states, err = targetStates(cmd.Context(), to); err != nil {
					return err
				}
			}
			return printDFStates(cmd.OutOrStdout(), path, ts, states)
		},
	}
	cmd.Flags().StringVar(&to.Meta, "meta", "", "also show each target's state (out, draining, inactive, removed), asked of this metadata server (host:port; needs --keys as root)")
	cmd.Flags().StringVar(&to.Keys, "keys", defaultKeys, "with --meta: directory of a key bundle of this cluster")
	to.Timeout = 10 * time.Second
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON: the targets and the summary, sizes in bytes")
	cmd.Flags().BoolVarP(&inodes, "inodes", "i", false, "show inodes: the metadata service's, and each target's objects and free inodes")
	return cmd
}

// dfSummary sums the targets that are up; a down target's last report is
// stale and its space cannot be used.
type dfSummary struct {
	Total   uint64 `json:"total"`
	Used    uint64 `json:"used"`
	Free    uint64 `json:"free"`
	Targets int    `json:"targets"`
	Up      int    `json:"up"`
	// Objects on the targets that are up, and inodes left on their file
	// systems (each counted once).
	Objects   uint64 `json:"objects"`
	FilesFree uint64 `json:"files_free"`
}

// summarize sums the targets that are up. Targets on one file system (the
// same device) count its size and free space once, so four targets on
// one disk do not show four disks; Used is what the targets hold.
func summarize(ts []targetJSON) dfSummary {
	h := health.Sum(ts)
	return dfSummary{Total: h.Total, Used: h.Used, Free: h.Free, Targets: len(ts), Up: h.Up, Objects: h.Objects, FilesFree: h.FilesFree}
}

// usePercent is df(1)'s Use%: used over what users can have (used + free),
// rounded up, so that a nearly full target never shows as less than it is.
func usePercent(used, free uint64) string {
	if used+free == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", math.Ceil(float64(used)*100/(float64(used)+float64(free))))
}

// printDF prints one line per target and a summary line, like lfs df:
// names left-aligned, numbers right-aligned.
func printDF(w io.Writer, path string, ts []targetJSON) error {
	return printDFStates(w, path, ts, nil)
}

// printDFStates is printDF with each target's lifecycle state (from
// --meta) after its status when it is not in.
func printDFStates(w io.Writer, path string, ts []targetJSON, states map[uint32]string) error {
	rows := [][]string{{"TARGET", "ADDRESS", "SIZE", "USED", "AVAIL", "USE%", "STATUS"}}
	for _, t := range ts {
		status := "UP"
		if !t.Up {
			status = "DOWN"
		}
		if st, ok := states[t.ID]; ok && st != "in" {
			status += " " + st
		}
		rows = append(rows, []string{fmt.Sprintf("target-%d", t.ID), t.Addr,
			units.FormatSize(t.Total), units.FormatSize(t.Used), units.FormatSize(t.Free), usePercent(t.Used, t.Free), status})
	}
	s := summarize(ts)
	rows = append(rows, []string{"filesystem_summary:", "",
		units.FormatSize(s.Total), units.FormatSize(s.Used), units.FormatSize(s.Free), usePercent(s.Used, s.Free),
		fmt.Sprintf("%d/%d targets up", s.Up, s.Targets)})
	rightAligned := []bool{false, false, true, true, true, true, false}
	width := make([]int, len(rightAligned))
	for _, r := range rows[:len(rows)-1] {
		for i, c := range r {
			width[i] = max(width[i], len(c))
		}
	}
	// The summary's label spans the target and address columns, as in lfs df.
	last := len(rows) - 1
	width[1] = max(width[1], len(rows[last][0])-width[0]-2)
	rows[last] = append([]string{fmt.Sprintf("%-*s", width[0]+2+width[1], rows[last][0])}, rows[last][2:]...)
	var b strings.Builder
	for ri, r := range rows {
		var line strings.Builder
		for i, c := range r {
			col := i
			if ri == last && i > 0 {
				col = i + 1
			}
			if i > 0 {
				line.WriteString("  ")
			}
			if rightAligned[col] {
				fmt.Fprintf(&line, "%*s", width[col], c)
			} else {
				fmt.Fprintf(&line, "%-*s", width[col], c)
			}
		}
		b.WriteString(strings.TrimRight(line.String(), " "))
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "(file system of %s)\n", path)
	_, err := io.WriteString(w, b.String())
	return err
}

// printDFInodes prints the inode view (like lfs df -i): the metadata
// service's inodes, then one line per target (objects it holds, inodes its
// file system has left), then the summary.
func printDFInodes(w io.Writer, path string, metaUsed, metaFree uint64, ts []targetJSON) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%-10s  %-22s  %12s  %12s  %s\n", "TARGET", "ADDRESS", "IUSED", "IFREE", "STATUS")
	fmt.Fprintf(&b, "%-10s  %-22s  %12d  %12d  %s\n", "metadata", "", metaUsed, metaFree, "UP")
	for _, t := range ts {
		status := "UP"
		if !t.Up {
			status = "DOWN"
		}
		fmt.Fprintf(&b, "%-10s  %-22s  %12d  %12d  %s\n", fmt.Sprintf("target-%d", t.ID), t.Addr, t.Objects, t.FilesFree, status)
	}
	s := summarize(ts)
	fmt.Fprintf(&b, "%-34s  %12d  %12d  %d/%d targets up\n", "filesystem_summary:", metaUsed, metaFree, s.Up, s.Targets)
	fmt.Fprintf(&b, "(file system of %s; IUSED of a target: its objects; IFREE: inodes left on its file system)\n", path)
	_, err := io.WriteString(w, b.String())
	return err
}

func printDFJSON(w io.Writer, path string, ts []targetJSON) error {
	if ts == nil {
		ts = []targetJSON{}
	}
	b, err := json.Marshal(struct {
		Path    string       `json:"path"`
		Targets []targetJSON `json:"targets"`
		Summary dfSummary    `json:"summary"`
	}{path, ts, summarize(ts)})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}
