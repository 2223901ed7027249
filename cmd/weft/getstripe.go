package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

func newGetstripeCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "getstripe [--json] PATH",
		Short: "Show the layout of a file or the default layout of a directory",
		Long: `Show how a file is striped (stripe count, stripe size and the storage
target of each stripe, like lfs getstripe), or the default layout that a
directory gives to new files. It reads the user.weft.layout attribute.`,
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
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"stripe_count":N,"stripe_size":N,"targets":[...]}`)
	return cmd
}

// printLayout prints l in the format of lfs getstripe: lmm_* lines and the
// obdidx (target id) of each stripe, in stripe order.
func printLayout(w io.Writer, path string, l layoutJSON) {
	fmt.Fprintln(w, path)
	fmt.Fprintf(w, "lmm_stripe_count:  %d\n", l.StripeCount)
	fmt.Fprintf(w, "lmm_stripe_size:   %d\n", l.StripeSize)
	fmt.Fprintf(w, "lmm_pattern:       raid0\n")
	if len(l.Targets) == 0 {
		return
	}
	fmt.Fprintf(w, "lmm_stripe_offset: %d\n", l.Targets[0])
	fmt.Fprintf(w, "\tobdidx\n")
	for _, t := range l.Targets {
		fmt.Fprintf(w, "\t%6d\n", t)
	}
}

func printLayoutJSON(w io.Writer, l layoutJSON) error {
	if l.Targets == nil {
		l.Targets = []uint32{}
	}
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}
