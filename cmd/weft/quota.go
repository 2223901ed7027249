package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/user"
	"strconv"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/weft-fs/weft/internal/units"
	"github.com/weft-fs/weft/meta/metarpc"
	"github.com/weft-fs/weft/proto"
)

// quotaConn is how the quota and project commands reach the metadata
// service of the mount that holds a path.
type quotaConn struct {
	Meta, Keys string
	Timeout    time.Duration
}

func (q *quotaConn) flags(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&q.Meta, "meta", "", "the metadata server's host:port (default: what the mount says)")
	fs.StringVar(&q.Keys, "keys", defaultKeys, "directory of a key bundle of this cluster (weft keygen)")
	fs.DurationVar(&q.Timeout, "timeout", 10*time.Minute, "give up after this long")
}

// client connects to the metadata service of path's mount; it returns the
// client, path's inode number and a function that closes the connection.
func (q *quotaConn) client(path string) (*metarpc.Client, proto.Ino, func(), error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return nil, 0, nil, fmt.Errorf("%s: %w", path, err)
	}
	addr := q.Meta
	if addr == "" {
		v, err := weftAttr(path, xattrMeta)
		if err != nil {
			return nil, 0, nil, err
		}
		addr = string(v)
	}
	pool, err := adminPool(q.Keys)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("%w (quota commands need a key bundle of the cluster: run them as root)", err)
	}
	return metarpc.NewClient(pool, addr), proto.Ino(st.Ino), func() { pool.Close() }, nil
}

// account is the --user, --group or --project an invocation names.
type account struct {
	User, Group, Project string
}

func (a *account) flags(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVarP(&a.User, "user", "u", "", "a user's account (name or uid)")
	fs.StringVarP(&a.Group, "group", "g", "", "a group's account (name or gid)")
	fs.StringVarP(&a.Project, "project", "p", "", "a project's account (project id)")
}

// resolve returns the kind and id named; none named is ok only if
// optional (then kind 0).
func (a *account) resolve(optional bool) (metarpc.QuotaKind, uint32, error) {
	n := 0
	for _, s := range []string{a.User, a.Group, a.Project} {
		if s != "" {
			n++
		}
	}
	switch {
	case n > 1:
		return 0, 0, fmt.Errorf("give one of --user, --group, --project")
	case n == 0 && optional:
		return 0, 0, nil
	case n == 0:
		return 0, 0, fmt.Errorf("give --user, --group or --project")
	case a.User != "":
		id, err := lookupID(a.User, func(s string) (string, error) {
			u, err := user.Lookup(s)
			if err != nil {
				return "", err
			}
			return u.Uid, nil
		})
		return metarpc.QuotaUser, id, err
	case a.Group != "":
		id, err := lookupID(a.Group, func(s string) (string, error) {
			g, err := user.LookupGroup(s)
			if err != nil {
				return "", err
			}
			return g.Gid, nil
		})
		return metarpc.QuotaGroup, id, err
	default:
		id, err := strconv.ParseUint(a.Project, 10, 32)
		if err != nil {
			return 0, 0, fmt.Errorf("--project %q: want a number", a.Project)
		}
		return metarpc.QuotaProject, uint32(id), nil
	}
}

// lookupID takes a number as it is, and a name through lookup.
func lookupID(s string, lookup func(string) (string, error)) (uint32, error) {
	if n, err := strconv.ParseUint(s, 10, 32); err == nil {
		return uint32(n), nil
	}
	v, err := lookup(s)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(v, 10, 32)
	return uint32(n), err
}

func newQuotaCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "quota",
		Short: "Set, show and check user, group and project quotas",
		Long: `Quotas limit the inodes and bytes a user, a group or a project (a
directory tree tagged with weft project set) may use; 0 is no limit.
Creating an inode over an inode limit, or recording a size over a byte limit,
fails with EDQUOT ("Disk quota exceeded") on every mount. Bytes are file
sizes (holes count); root is exempt. See docs/quotas.md.`,
	}
	cmd.AddCommand(newQuotaSetCmd(), newQuotaShowCmd(), newQuotaCheckCmd())
	return cmd
}

func newQuotaSetCmd() *cobra.Command {
	var a account
	var c quotaConn
	var inodes uint64
	var bytes units.Size
	cmd := &cobra.Command{
		Use:   "set (--user NAME|UID | --group NAME|GID | --project ID) [--inodes N] [--bytes SIZE] PATH",
		Short: "Set an account's limits (root only; 0 = no limit; an option not given keeps its limit)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, id, err := a.resolve(false)
			if err != nil {
				return err
			}
			fs := cmd.Flags()
			if !fs.Changed("inodes") && !fs.Changed("bytes") {
				return fmt.Errorf("give --inodes, --bytes or both")
			}
			mc, _, done, err := c.client(args[0])
			if err != nil {
				return err
			}
			defer done()
			ctx, cancel := context.WithTimeout(cmd.Context(), c.Timeout)
			defer cancel()
			q, err := mc.GetQuota(ctx, kind, id)
			if err != nil {
				return fmt.Errorf("quota set: %w", err)
			}
			lim := q.Limits
			if fs.Changed("inodes") {
				lim.Inodes = inodes
			}
			if fs.Changed("bytes") {
				lim.Bytes = uint64(bytes)
			}
			if err := mc.SetQuota(ctx, kind, id, lim); err != nil {
				return fmt.Errorf("quota set: %w", err)
			}
			return nil
		},
	}
	a.flags(cmd)
	c.flags(cmd)
	cmd.Flags().Uint64Var(&inodes, "inodes", 0, "inode limit (0: none)")
	cmd.Flags().Var(&bytes, "bytes", "byte limit, with units (10GiB; 0: none)")
	return cmd
}

// quotaJSON is one account in `weft quota show --json`.
type quotaJSON struct {
	Kind        string `json:"kind"`
	ID          uint32 `json:"id"`
	Name        string `json:"name,omitempty"`
	Inodes      uint64 `json:"inodes"`
	InodeLimit  uint64 `json:"inode_limit"`
	Bytes       uint64 `json:"bytes"`
	ByteLimit   uint64 `json:"byte_limit"`
	OverInodes  bool   `json:"over_inodes"`
	OverBytes   bool   `json:"over_bytes"`
	MountedPath string `json:"path"`
}

func newQuotaShowCmd() *cobra.Command {
	var a account
	var c quotaConn
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show [--user NAME|UID | --group NAME|GID | --project ID] [--json] PATH",
		Short: "Show usage and limits (default: your user and group)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, id, err := a.resolve(true)
			if err != nil {
				return err
			}
			type acct struct {
				kind metarpc.QuotaKind
				id   uint32
			}
			accts := []acct{{kind, id}}
			if kind == 0 {
				accts = []acct{{metarpc.QuotaUser, uint32(os.Getuid())}, {metarpc.QuotaGroup, uint32(os.Getgid())}}
			}
			mc, _, done, err := c.client(args[0])
			if err != nil {
				return err
			}
			defer done()
			ctx, cancel := context.WithTimeout(cmd.Context(), c.Timeout)
			defer cancel()
			var out []quotaJSON
			for _, ac := range accts {
				q, err := mc.GetQuota(ctx, ac.kind, ac.id)
				if err != nil {
					return fmt.Errorf("quota show: %s %d: %w", ac.kind, ac.id, err)
				}
				out = append(out, quotaJSON{
					Kind: q.Kind.String(), ID: q.ID, Name: accountName(q.Kind, q.ID),
					Inodes: q.Usage.Inodes, InodeLimit: q.Limits.Inodes,
					Bytes: q.Usage.Bytes, ByteLimit: q.Limits.Bytes,
					OverInodes:  q.Limits.Inodes != 0 && q.Usage.Inodes >= q.Limits.Inodes,
					OverBytes:   q.Limits.Bytes != 0 && q.Usage.Bytes >= q.Limits.Bytes,
					MountedPath: args[0],
				})
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(out)
			}
			return printQuotas(cmd.OutOrStdout(), out)
		},
	}
	a.flags(cmd)
	c.flags(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func accountName(kind metarpc.QuotaKind, id uint32) string {
	s := strconv.FormatUint(uint64(id), 10)
	switch kind {
	case metarpc.QuotaUser:
		if u, err := user.LookupId(s); err == nil {
			return u.Username
		}
	case metarpc.QuotaGroup:
		if g, err := user.LookupGroupId(s); err == nil {
			return g.Name
		}
	}
	return ""
}

// printQuotas prints accounts the way lfs quota does: a star marks a
// figure at or over its limit.
func printQuotas(w io.Writer, qs []quotaJSON) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "kind\tid\tname\tbytes\tlimit\tinodes\tlimit\tpath\t")
	lim := func(v uint64, size bool) string {
		switch {
		case v == 0:
			return "-"
		case size:
			return units.FormatSize(v)
		}
		return strconv.FormatUint(v, 10)
	}
	star := func(over bool) string {
		if over {
			return "*"
		}
		return ""
	}
	for _, q := range qs {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s%s\t%s\t%d%s\t%s\t%s\t\n", q.Kind, q.ID, q.Name,
			units.FormatSize(q.Bytes), star(q.OverBytes), lim(q.ByteLimit, true),
			q.Inodes, star(q.OverInodes), lim(q.InodeLimit, false), q.MountedPath)
	}
	return tw.Flush()
}

func newQuotaCheckCmd() *cobra.Command {
	var c quotaConn
	var asJSON, repair bool
	cmd := &cobra.Command{
		Use:   "check [--repair] [--json] PATH",
		Short: "Recount usage from the inodes and compare it with the recorded usage (root only); exits 1 on a difference",
		Long: `Recount every account's usage from the inodes, in one consistent read of
the metadata store, and print it beside the recorded usage; exit 1 if any
differ. With --repair, first set the recorded usage to a recount (one
command, applied like any change; the limits stay).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			mc, _, done, err := c.client(args[0])
			if err != nil {
				return err
			}
			defer done()
			ctx, cancel := context.WithTimeout(cmd.Context(), c.Timeout)
			defer cancel()
			cs, err := mc.CheckQuota(ctx, repair)
			if err != nil {
				return fmt.Errorf("quota check: %w", err)
			}
			bad := 0
			for _, x := range cs {
				if x.Recorded != x.Counted {
					bad++
				}
			}
			w := cmd.OutOrStdout()
			if asJSON {
				type row struct {
					Kind     string               `json:"kind"`
					ID       uint32               `json:"id"`
					Recorded metarpc.QuotaAmounts `json:"recorded"`
					Counted  metarpc.QuotaAmounts `json:"counted"`
				}
				rows := []row{}
				for _, x := range cs {
					rows = append(rows, row{x.Kind.String(), x.ID, x.Recorded, x.Counted})
				}
				if err := json.NewEncoder(w).Encode(rows); err != nil {
					return err
				}
			} else {
				for _, x := range cs {
					mark := "ok"
					if x.Recorded != x.Counted {
						mark = "DIFFERS"
					}
					fmt.Fprintf(w, "%s %d: recorded %d inodes %d bytes, counted %d inodes %d bytes: %s\n",
						x.Kind, x.ID, x.Recorded.Inodes, x.Recorded.Bytes, x.Counted.Inodes, x.Counted.Bytes, mark)
				}
			}
			if bad > 0 {
				return fmt.Errorf("quota check: %d of %d accounts differ from a recount", bad, len(cs))
			}
			return nil
		},
	}
	c.flags(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().BoolVar(&repair, "repair", false, "first set the recorded usage to a recount")
	return cmd
}

func newProjectCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "project",
		Short: "Tag directory trees with project ids (for project quotas)",
	}
	var c quotaConn
	var noRecurse bool
	set := &cobra.Command{
		Use:   "set ID DIR",
		Short: "Tag DIR and everything below it with project ID (root only); new inodes below inherit it",
		Long: `Tag DIR with project ID, and every inode already below it (unless
--no-recursive); files and directories created below DIR afterwards inherit
the id from their parent directory. A file renamed into the tree later keeps
its own id: run this again to re-tag. ID 0 removes the tag.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseUint(args[0], 10, 32)
			if err != nil {
				return fmt.Errorf("project id %q: want a number", args[0])
			}
			mc, ino, done, err := c.client(args[1])
			if err != nil {
				return err
			}
			defer done()
			ctx, cancel := context.WithTimeout(cmd.Context(), c.Timeout)
			defer cancel()
			n, err := mc.SetProject(ctx, ino, uint32(id), !noRecurse)
			if err != nil {
				return fmt.Errorf("project set: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %d inodes tagged with project %d\n", args[1], n, id)
			return nil
		},
	}
	c.flags(set)
	set.Flags().BoolVar(&noRecurse, "no-recursive", false, "tag DIR only, not what is below it now")
	cmd.AddCommand(set)
	return cmd
}
