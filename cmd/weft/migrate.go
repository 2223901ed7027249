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
	"golang.org/x/sys/unix"
)

// xattrMigrate, set to a layout on a file, restripes it online (the mount
// copies it into new objects and swaps the layout; fuse/xattr.go).
const xattrMigrate = "user.weft.migrate"

func newMigrateCmd() *cobra.Command {
	var (
		req       stripeRequest
		targets   []uint
		recursive bool
	)
	cmd := &cobra.Command{
		Use:   "migrate [--mirror N | --ec K+M | --raid0] [-c COUNT] [-S SIZE] [-o ID,ID,...] [-r] FILE|DIR...",
		Short: "Restripe files that hold data to a new layout, online",
		Long: `Give files that already hold data a new layout (protection, stripe count,
stripe size or targets), while they stay in use, like Lustre's lfs migrate.

The flags are setstripe's; what is not given is kept from the file's
current layout (its targets are chosen again unless -o names them). With
-r, every regular file under each DIR is migrated.

The mount the files are on copies each file into new objects and the
metadata service then switches the file to them in one step: readers see
the old bytes or the new ones, never a mix. A file that is open for writing,
or is written while it is copied, is not migrated (it keeps its layout and
every byte written; run migrate again later). The old objects are removed
after the metadata service's --moved-object-grace; a handle opened before
the switch follows the file to its new objects. A copy that takes longer
than the migrate ticket's life (an hour) renews it.

Needs read and write permission on each file. Asking for more copies or
shards than there are storage servers up, an unknown target, a directory
without -r or a special file fails and changes nothing.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !stripeFlagsGiven(cmd) {
				return errors.New("nothing to change: give --mirror N, --ec K+M, --raid0, -c COUNT, -S SIZE or -o IDS (weft getstripe shows the current layout)")
			}
			if err := req.parse(cmd, targets, ""); err != nil {
				return err
			}
			failed := 0
			for _, root := range args {
				fi, err := os.Lstat(root)
				if err != nil {
					return err
				}
				switch {
				case fi.IsDir() && !recursive:
					return fmt.Errorf("%s is a directory: give -r to migrate the files in it (nothing changed)", root)
				case fi.IsDir():
					err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
						if err != nil {
							return err
						}
						if !d.Type().IsRegular() {
							return nil
						}
						if err := migrateFile(cmd.OutOrStdout(), path, &req); err != nil {
							fmt.Fprintln(cmd.ErrOrStderr(), err)
							failed++
						}
						return nil
					})
					if err != nil {
						return err
					}
				case !fi.Mode().IsRegular():
					return fmt.Errorf("%s is not a regular file: only files hold data to migrate (nothing changed)", root)
				default:
					if err := migrateFile(cmd.OutOrStdout(), root, &req); err != nil {
						if len(args) == 1 {
							return err
						}
						fmt.Fprintln(cmd.ErrOrStderr(), err)
						failed++
					}
				}
			}
			if failed > 0 {
				return fmt.Errorf("%d files not migrated", failed)
			}
			return nil
		},
	}
	addStripeFlags(cmd, &req, &targets, "the file's")
	cmd.Flags().UintSliceVar(&targets, "target", nil, "the same as -o (lfs migrate's spelling)")
	cmd.Flags().BoolVarP(&recursive, "recursive", "r", false, "migrate every regular file under each DIR")
	return cmd
}

// migrateFile restripes path to what req asks (the rest kept from its
// current layout) and says what it did.
func migrateFile(w io.Writer, path string, req *stripeRequest) error {
	cur, err := getLayout(path)
	if err != nil {
		return err
	}
	l := req.apply(cur)
	l.Stale = nil
	if err := checkDomains(path, l); err != nil {
		return err
	}
	v, err := json.Marshal(l)
	if err != nil {
		return err
	}
	err = unix.Setxattr(path, xattrMigrate, v, 0)
	switch {
	case err == nil:
		now, err := getLayout(path)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%s: migrated to %s, %d stripes of %d bytes, targets %v\n", path, now.kindString(), now.StripeCount, now.StripeSize, now.Targets)
		return nil
	case errors.Is(err, unix.EBUSY):
		return fmt.Errorf("%s: open for writing or written during the migration: it keeps its layout and data; run migrate again when it is closed", path)
	case errors.Is(err, unix.EINVAL):
		return fmt.Errorf("%s: layout %s refused as invalid (is a target id unknown, or not up? see weft df); nothing changed", path, v)
	case errors.Is(err, unix.ENOSPC) && l.width() > 1:
		return fmt.Errorf("%s: %s needs %d storage servers (failure domains) with free space up (see weft df); nothing changed", path, l.kindString(), l.width())
	case errors.Is(err, unix.ETIMEDOUT):
		return fmt.Errorf("%s: migrate to %s: %w (a storage target did not answer, see weft df, or the copy's ticket ended: the mount's log says which); nothing changed", path, l.kindString(), err)
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EIO), errors.Is(err, unix.EHOSTUNREACH):
		return fmt.Errorf("%s: migrate to %s: %w (are the storage targets up? see weft df); nothing changed", path, l.kindString(), err)
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return fmt.Errorf("%s: migrate needs read and write permission: %w", path, err)
	case errors.Is(err, unix.ENOTSUP):
		return fmt.Errorf("%s: %w", path, errNotWeft)
	}
	return fmt.Errorf("%s: migrate to %s: %w; nothing changed", path, l.kindString(), err)
}
