package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"

	"github.com/spf13/cobra"
)

func newGetstripeCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "getstripe [--json] PATH",
		Short: "Show the layout of a file or the default layout of a directory",
		Long: `Show how a file is striped (stripe count, stripe size and the storage
target of each stripe, like lfs getstripe), or the default layout that a
directory gives to new files. For a mirrored or erasure-coded file it shows
the protection and, per stripe, the target of each copy or shard, marking
copies that missed writes (stale) until they are repaired. It reads the
user.weft.layout attribute.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := getLayout(args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printLayoutJSON(cmd.OutOrStdout(), l)
			}
			printLayout(cmd.OutOrStdout(), args[0], l)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"kind":K,"mirror":N,"ec_k":K,"ec_m":M,"stripe_count":N,"stripe_size":N,"targets":[...],"stripes":[{"targets":[...],"stale":[...]}]}`)
	return cmd
}

// printLayout prints l in the format of lfs getstripe: lmm_* lines and the
// obdidx (target id) of each stripe, in stripe order; for a protected file,
// one line per stripe with the target of each copy or shard.
func printLayout(w io.Writer, path string, l layoutJSON) {
	fmt.Fprintln(w, path)
	fmt.Fprintf(w, "lmm_stripe_count:  %d\n", l.StripeCount)
	fmt.Fprintf(w, "lmm_stripe_size:   %d\n", l.StripeSize)
	fmt.Fprintf(w, "lmm_pattern:       %s\n", l.kindString())
	if len(l.Targets) == 0 {
		return
	}
	fmt.Fprintf(w, "lmm_stripe_offset: %d\n", l.Targets[0])
	if l.width() == 1 {
		fmt.Fprintf(w, "\tobdidx\n")
		for _, t := range l.Targets {
			fmt.Fprintf(w, "\t%6d\n", t)
		}
		return
	}
	what := "copies"
	if l.Kind == "ec" {
		what = "shards (data, then parity)"
	}
	fmt.Fprintf(w, "\tstripe  %s\n", what)
	for i, s := range stripesOf(l) {
		fmt.Fprintf(w, "\t%6d ", i)
		for j, t := range s.Targets {
			mark := ""
			if slices.Contains(s.Stale, t) {
				mark = "(stale)"
			}
			if j > 0 {
				fmt.Fprint(w, " ")
			}
			fmt.Fprintf(w, "%6d%s", t, mark)
		}
		fmt.Fprintln(w)
	}
}

// stripeJSON is one stripe of getstripe --json: the targets of its copies
// or shards, and those of them that are stale.
type stripeJSON struct {
	Targets []uint32 `json:"targets"`
	Stale   []uint32 `json:"stale"`
}

func stripesOf(l layoutJSON) []stripeJSON {
	w := l.width()
	out := []stripeJSON{}
	for s := 0; (s+1)*w <= len(l.Targets); s++ {
		st := stripeJSON{Targets: l.Targets[s*w : (s+1)*w], Stale: []uint32{}}
		for _, slot := range l.Stale {
			if int(slot)/w == s {
				st.Stale = append(st.Stale, l.Targets[slot])
			}
		}
		out = append(out, st)
	}
	return out
}

// getstripeJSON is what getstripe --json prints.
type getstripeJSON struct {
	Kind        string       `json:"kind"`
	Mirror      int          `json:"mirror"`
	ECData      int          `json:"ec_k"`
	ECParity    int          `json:"ec_m"`
	StripeSize  uint64       `json:"stripe_size"`
	StripeCount int32        `json:"stripe_count"`
	Targets     []uint32     `json:"targets"`
	Stripes     []stripeJSON `json:"stripes"`
}

func printLayoutJSON(w io.Writer, l layoutJSON) error {
	out := getstripeJSON{Kind: l.Kind, Mirror: l.Mirror, ECData: l.ECData, ECParity: l.ECParity,
		StripeSize: l.StripeSize, StripeCount: l.StripeCount, Targets: l.Targets, Stripes: stripesOf(l)}
	if out.Kind == "" {
		out.Kind = "raid0"
	}
	if out.Targets == nil {
		out.Targets = []uint32{}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}
