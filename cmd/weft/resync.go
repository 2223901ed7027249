package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

func newResyncCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "resync PATH...",
		Short: "Repair the stale copies of mirrored and erasure-coded files",
		Long: `Repair the copies of mirrored files that missed writes while their storage
server was down (getstripe marks them "stale"): each is copied again from a
fresh copy, and then counts as a full copy again. A directory is walked and
every file in it repaired. The repair is done by the weft mount the paths
are on; it needs read and write permission on each file.

Erasure-coded files are also checked row by row: a row whose shards hold
different versions (a writer died between its shard writes) gets its parity
computed from its data again, so that it can be reconstructed.

A file that is open for writing, or is written during its repair, is not
repaired (its copies stay stale and safe): run resync again later.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var failed int
			for _, root := range args {
				err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
					if err != nil {
						return err
					}
					if !d.Type().IsRegular() {
						return nil
					}
					if err := resyncFile(cmd.OutOrStdout(), path); err != nil {
						fmt.Fprintf(cmd.ErrOrStderr(), "%v\n", err)
						failed++
					}
					return nil
				})
				if err != nil {
					return err
				}
			}
			if failed > 0 {
				return fmt.Errorf("%d files not repaired", failed)
			}
			return nil
		},
	}
}

// resyncFile repairs path if its layout has stale copies, and says so.
func resyncFile(w io.Writer, path string) error {
	l, err := getLayout(path)
	if err != nil {
		return err
	}
	if len(l.Stale) == 0 && l.Kind != "ec" {
		return nil // EC files are checked for rows a crash left half-updated too
	}
	err = setxattr(path, xattrResync, []byte("1"))
	switch {
	case err == nil:
		if len(l.Stale) > 0 {
			fmt.Fprintf(w, "%s: repaired %d stale copies\n", path, len(l.Stale))
		}
		return nil
	case errors.Is(err, unix.EBUSY):
		return fmt.Errorf("%s: open for writing, written during the repair, or being repaired by the metadata service's rebuild (or a repair of it by the rebuild failed meanwhile): its copies stay stale for now; run resync again (when it is closed)", path)
	case errors.Is(err, unix.EHOSTUNREACH), errors.Is(err, unix.ETIMEDOUT), errors.Is(err, unix.ECONNREFUSED), errors.Is(err, unix.EIO):
		return fmt.Errorf("%s: a stale copy's storage server is not reachable yet (%w); see weft df", path, err)
	}
	return fmt.Errorf("%s: resync: %w", path, err)
}
