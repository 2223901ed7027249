package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
)

func newGetstripeCmd() *cobra.Command {
	var asJSON, recursive, dirOnly bool
	cmd := &cobra.Command{
		Use:   "getstripe [--json] [-r | -d] PATH...",
		Short: "Show the layout of files and the default layout of directories",
		Long: `Show how a file is striped (stripe count, stripe size and the storage
target of each stripe, like lfs getstripe), or the default layout that a
directory gives to new files. On a directory it shows the directory's
default and then every file and subdirectory in it; -d shows only the
directory, -r everything below it. It reads the user.weft.layout attribute.
With --json it prints one JSON object per path, one per line, each with a
"path" key.`,
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
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"path":P,"stripe_count":N,"stripe_size":N,"targets":[...]} per path, one per line`)
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

// printLayoutJSONPath prints l as one JSON line with its path.
func printLayoutJSONPath(w io.Writer, path string, l layoutJSON) error {
	if l.Targets == nil {
		l.Targets = []uint32{}
	}
	b, err := json.Marshal(struct {
		Path string `json:"path"`
		layoutJSON
	}{path, l})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}
