package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/weft-fs/weft/internal/units"
	"github.com/weft-fs/weft/meta/metarpc"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/transport"
)

type findOptions struct {
	Name, Type, Size, Mtime string
	Uid, Gid                int64
	StripeCount             string
	Target                  int64
	MaxDepth                int32
	Meta, Keys              string
	Timeout                 time.Duration
}

func newFindCmd() *cobra.Command {
	o := &findOptions{}
	cmd := &cobra.Command{
		Use:   "find PATH... [--name GLOB] [--type f|d|l] [--size [+-]N] [--mtime +-DAYS] [--uid N] [--gid N] [--stripe-count [+-]N] [--target ID] [--maxdepth N]",
		Short: "Find files by name, type, size, age, owner or layout, asking the metadata service directly",
		Long: `Print the paths below each PATH (on a weft mount) that match every
condition given, like lfs find: the metadata service walks the tree itself,
so nothing crawls through the mount and no file is opened.

  --name GLOB          base name matches the shell pattern (quote it)
  --type f|d|l         regular file, directory, symbolic link
  --size [+-]N         size over (+), under (-) or exactly N (units: k, M, G, T)
  --mtime +D | -D      modified more (+) or less (-) than D days ago
  --uid N, --gid N     owned by this user or group id
  --stripe-count [+-]N striped over more (+), fewer (-) or exactly N targets
  --target ID          has a stripe on this target (files to move off it)
  --maxdepth N         at most N levels below PATH

It acts for the user who runs it (directories it may not read or search are
skipped) and needs a key bundle of the cluster (--keys, readable by root
only: run it as root). The metadata server's address comes from the mount.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := o.filter(time.Now())
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), o.Timeout)
			defer cancel()
			pool, err := adminPool(o.Keys)
			if err != nil {
				return fmt.Errorf("%w (weft find needs a key bundle of the cluster: run it as root)", err)
			}
			defer pool.Close()
			w := bufio.NewWriter(cmd.OutOrStdout())
			defer w.Flush()
			for _, p := range args {
				if err := o.find(ctx, w, pool, p, f); err != nil {
					return err
				}
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.Name, "name", "", "base name matches this shell pattern")
	fs.StringVar(&o.Type, "type", "", "f (regular file), d (directory) or l (symbolic link)")
	fs.StringVar(&o.Size, "size", "", "[+-]N: over, under or exactly N bytes (units k, M, G, T)")
	fs.StringVar(&o.Mtime, "mtime", "", "+D or -D: modified more or less than D days ago")
	fs.Int64Var(&o.Uid, "uid", -1, "owned by this user id")
	fs.Int64Var(&o.Gid, "gid", -1, "owned by this group id")
	fs.StringVar(&o.StripeCount, "stripe-count", "", "[+-]N: striped over more, fewer or exactly N targets")
	fs.Int64Var(&o.Target, "target", -1, "has a stripe on this target id")
	fs.Int32Var(&o.MaxDepth, "maxdepth", -1, "descend at most this many levels below PATH (-1: no limit)")
	fs.StringVar(&o.Meta, "meta", "", "the metadata server's host:port (default: what the mount says)")
	fs.StringVar(&o.Keys, "keys", defaultKeys, "directory of a key bundle of this cluster (weft keygen)")
	fs.DurationVar(&o.Timeout, "timeout", 30*time.Minute, "give up after this long")
	return cmd
}

// filter turns the options into a proto.FindFilter, now being the time
// --mtime counts back from.
func (o *findOptions) filter(now time.Time) (proto.FindFilter, error) {
	f := proto.FindFilter{Name: o.Name, MaxDepth: o.MaxDepth}
	switch o.Type {
	case "":
	case "f", "d", "l":
		f.Type = o.Type[0]
	default:
		return f, fmt.Errorf("--type %q: want f, d or l", o.Type)
	}
	var err error
	if f.Size, err = parseCmp("size", o.Size, func(s string) (int64, error) {
		n, err := units.ParseSize(s)
		return int64(n), err
	}); err != nil {
		return f, err
	}
	if f.StripeCount, err = parseCmp("stripe-count", o.StripeCount, func(s string) (int64, error) {
		return strconv.ParseInt(s, 10, 32)
	}); err != nil {
		return f, err
	}
	if o.Mtime != "" {
		days, err := parseCmp("mtime", o.Mtime, func(s string) (int64, error) { return strconv.ParseInt(s, 10, 32) })
		if err != nil {
			return f, err
		}
		// +D: older than D days (mtime before now-D); -D: newer.
		at := now.Add(-time.Duration(days.Value) * 24 * time.Hour).UnixNano()
		switch days.Op {
		case '>':
			f.Mtime = proto.Cmp{Op: '<', Value: at}
		case '<':
			f.Mtime = proto.Cmp{Op: '>', Value: at}
		default:
			return f, fmt.Errorf("--mtime %s: want +D (more than D days ago) or -D (less)", o.Mtime)
		}
	}
	if o.Uid >= 0 {
		u := uint32(o.Uid)
		f.Uid = &u
	}
	if o.Gid >= 0 {
		g := uint32(o.Gid)
		f.Gid = &g
	}
	if o.Target >= 0 {
		t := proto.TargetID(o.Target)
		f.Target = &t
	}
	return f, nil
}

// parseCmp parses [+-]N: '>' for +, '<' for -, '=' otherwise.
func parseCmp(flag, s string, num func(string) (int64, error)) (proto.Cmp, error) {
	if s == "" {
		return proto.Cmp{}, nil
	}
	c := proto.Cmp{Op: '='}
	switch s[0] {
	case '+':
		c.Op, s = '>', s[1:]
	case '-':
		c.Op, s = '<', s[1:]
	}
	v, err := num(s)
	if err != nil || v < 0 {
		return proto.Cmp{}, fmt.Errorf("--%s %q: want [+-]N", flag, s)
	}
	c.Value = v
	return c, nil
}

// find prints the matches below root, one path per line.
func (o *findOptions) find(ctx context.Context, w io.Writer, pool *transport.Pool, root string, f proto.FindFilter) error {
	var st syscall.Stat_t
	if err := syscall.Stat(root, &st); err != nil {
		return fmt.Errorf("find: %s: %w", root, err)
	}
	addr := o.Meta
	if addr == "" {
		v, err := weftAttr(root, xattrMeta)
		if err != nil {
			return err
		}
		addr = string(v)
	}
	mc := metarpc.NewClient(pool, addr)
	var cursor []byte
	for {
		found, next, err := mc.Find(ctx, proto.Ino(st.Ino), f, cursor, 4096)
		if err != nil {
			if errors.Is(err, syscall.EINVAL) && cursor != nil {
				return fmt.Errorf("find: %s: the metadata server restarted during the walk: %w", root, err)
			}
			return fmt.Errorf("find: %s: %w", root, err)
		}
		for _, x := range found {
			p := root
			if x.Path != "." {
				p = filepath.Join(root, x.Path)
			}
			if _, err := fmt.Fprintln(w, p); err != nil {
				return err
			}
		}
		if next == nil {
			return nil
		}
		cursor = next
	}
}

// findFlagNames are find's options that may be written find(1)'s way,
// with one dash (-name): findArgs turns them into flags.
var findFlagNames = strings.Fields("name type size mtime uid gid stripe-count target maxdepth")

// findArgs rewrites the arguments of `weft find` from find(1)'s style
// (-name X) to flags (--name X); other commands' arguments are returned
// as they are.
func findArgs(args []string) []string {
	if len(args) == 0 || args[0] != "find" {
		return args
	}
	out := append([]string(nil), args...)
	for i, a := range out {
		if strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "--") && slices.Contains(findFlagNames, a[1:]) {
			out[i] = "-" + a
		}
	}
	return out
}
