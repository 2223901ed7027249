package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/spf13/cobra"
)

func newGetstripeCmd() *cobra.Command {
	var asJSON, recursive, dirOnly bool
	cmd := &cobra.Command{
		Use:   "getstripe [--json] [-r | -d] PATH...",
		Short: "Show the layout of files and the default layout of directories",
		Long: `Show how a file is striped (stripe count, stripe size and the storage
target of each stripe, like lfs getstripe), or the default layout that a
directory gives to new files. For a mirrored or erasure-coded file it shows
the protection and, per stripe, the target of each copy or shard, marking
copies that missed writes (stale) until they are repaired. On a directory
it shows the directory's default and then every file and subdirectory in
it; -d shows only the directory, -r everything below it. It reads the
user.weft.layout attribute. With --json it prints one JSON object per
path, one per line, each with a "path" key.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if recursive && dirOnly {
				return errors.New("-r and -d exclude each other (-d: the directory itself, -r: everything below it)")
			}
			w := cmd.OutOrStdout()
			show := func(path string) error {
				l, err := getLayout(path)
				if err != nil {
					return err
				}
				if asJSON {
					return printLayoutJSONPath(w, path, l)
				}
				printLayout(w, path, l)
				return nil
			}
			for _, root := range args {
				if err := walkLayouts(root, recursive, dirOnly, show); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"path":P,"kind":K,"mirror":N,"ec_k":K,"ec_m":M,"stripe_count":N,"stripe_size":N,"targets":[...],"stripes":[{"targets":[...],"stale":[...]}]} per path, one per line`)
	cmd.Flags().BoolVarP(&recursive, "recursive", "r", false, "descend into every subdirectory")
	cmd.Flags().BoolVarP(&dirOnly, "directory", "d", false, "show a directory's own default layout, not its contents")
	return cmd
}

// walkLayouts calls show for root and, when root is a directory and not
// dirOnly, for what is in it (everything below it with recursive), in
// lexical order. Symbolic links are not followed; only regular files and
// directories have layouts.
func walkLayouts(root string, recursive, dirOnly bool, show func(string) error) error {
	fi, err := os.Lstat(root)
	if err != nil {
		return err
	}
	if !fi.IsDir() || dirOnly {
		return show(root)
	}
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && !d.Type().IsRegular() {
			return nil
		}
		if err := show(path); err != nil {
			return err
		}
		if d.IsDir() && path != root && !recursive {
			return filepath.SkipDir
		}
		return nil
	})
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

// getstripeJSON is what getstripe --json prints for each path.
type getstripeJSON struct {
	Path        string       `json:"path"`
	Kind        string       `json:"kind"`
	Mirror      int          `json:"mirror"`
	ECData      int          `json:"ec_k"`
	ECParity    int          `json:"ec_m"`
	StripeSize  uint64       `json:"stripe_size"`
	StripeCount int32        `json:"stripe_count"`
	Targets     []uint32     `json:"targets"`
	Stripes     []stripeJSON `json:"stripes"`
}

// printLayoutJSONPath prints l as one JSON line with its path.
func printLayoutJSONPath(w io.Writer, path string, l layoutJSON) error {
	out := getstripeJSON{Path: path, Kind: l.Kind, Mirror: l.Mirror, ECData: l.ECData, ECParity: l.ECParity,
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
