package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/weft-fs/weft/internal/units"
	"github.com/weft-fs/weft/layout"
)

// stripeRequest is what the user asked setstripe for; zero fields keep the
// value the path already has (inherited from its directory).
type stripeRequest struct {
	Count   int32
	Size    units.Size
	Targets []uint32
	// Protection: at most one of Mirror (copies), EC ("K+M") and RAID0
	// (none); none set keeps what the path has.
	Mirror int
	EC     string
	RAID0  bool

	ecK, ecM int // parsed from EC by validate
}

func newSetstripeCmd() *cobra.Command {
	var (
		req       stripeRequest
		targets   []uint
		toDefault bool
	)
	cmd := &cobra.Command{
		Use:   "setstripe [-c COUNT] [-S SIZE] [--mirror N | --ec K+M | --raid0] [-o ID,ID,...] PATH | setstripe -d DIR",
		Short: "Set the layout of a new file or the default layout of a directory",
		Long: `Set how files are striped over storage targets.

  PATH is a directory:       set its default; files created in it afterwards
                             (and new subdirectories) inherit it.
  PATH does not exist:       create an empty file with this layout.
  PATH is an empty file:     set its layout (only if it was never written).

A file that holds data keeps its layout; copy it into a directory with the
layout you want instead. COUNT -1 means every storage target. SIZE accepts
units (1M, 4MiB) and must be a multiple of 64KiB.

Protection (see docs/data-protection.md):
  --mirror N   keep N copies (2..5) of every stripe, on N distinct storage
               servers (failure domains); reads survive the loss of N-1.
  --ec K+M     Reed-Solomon with K data shards (1..16) and M parity shards
               (1..4) per stripe, on K+M distinct servers.
  --raid0      no protection (the default).
Asking for more copies or shards than there are storage servers up fails
and changes nothing. With -o, give COUNT x N targets, stripe after stripe.

-d DIR gives DIR the file system's default layout again (the root
directory's; on the root itself, weft's built-in default).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			given := stripeFlagsGiven(cmd)
			if toDefault {
				if given {
					return errors.New("-d resets a directory to the file system's default: it takes no -c, -S, -o, --mirror, --ec or --raid0")
				}
				return setstripeDefault(args[0])
			}
			if !given {
				return errors.New("nothing to set: give -c COUNT, -S SIZE, -o IDS, --mirror N, --ec K+M or --raid0 (or -d DIR to go back to the file system's default); weft getstripe shows the current layout")
			}
			if err := req.parse(cmd, targets, " (-d DIR goes back to the file system's default)"); err != nil {
				return err
			}
			return setstripe(args[0], &req)
		},
	}
	addStripeFlags(cmd, &req, &targets, "inherited")
	cmd.Flags().BoolVarP(&toDefault, "delete", "d", false, "give DIR the file system's default layout (the root directory's)")
	return cmd
}

// addStripeFlags declares the layout flags setstripe and migrate share;
// keep says what a flag not given means.
func addStripeFlags(cmd *cobra.Command, req *stripeRequest, targets *[]uint, keep string) {
	fs := cmd.Flags()
	fs.Int32VarP(&req.Count, "stripe-count", "c", 0, "number of targets to stripe over (-1: all; default: "+keep+")")
	fs.VarP(&req.Size, "stripe-size", "S", "bytes per stripe unit, e.g. 1M, 4MiB (default: "+keep+")")
	fs.UintSliceVarP(targets, "targets", "o", nil, "the target ids to use, in stripe order (default: the servers choose)")
	fs.IntVar(&req.Mirror, "mirror", 0, "keep N copies (2..5) of every stripe on distinct servers")
	fs.StringVar(&req.EC, "ec", "", "erasure-code every stripe: K+M, K data (1..16) and M parity (1..4) shards")
	fs.BoolVar(&req.RAID0, "raid0", false, "no protection: one object per stripe")
}

// stripeFlagsGiven reports whether any of addStripeFlags' flags was given.
func stripeFlagsGiven(cmd *cobra.Command) bool {
	fl := cmd.Flags()
	return fl.Changed("stripe-count") || fl.Changed("stripe-size") || fl.Changed("targets") || fl.Changed("target") ||
		fl.Changed("mirror") || fl.Changed("ec") || fl.Changed("raid0")
}

// parse completes the request from the flags (targets from -o) and
// validates it; hint is appended to the errors of -c 0 and -S 0.
func (r *stripeRequest) parse(cmd *cobra.Command, targets []uint, hint string) error {
	fl := cmd.Flags()
	if fl.Changed("stripe-count") && r.Count == 0 {
		return fmt.Errorf("-c 0: want -1 (all targets) or 1..%d%s", layout.MaxStripeCount, hint)
	}
	if fl.Changed("stripe-size") && r.Size == 0 {
		return fmt.Errorf("-S 0: want a stripe size, e.g. 1M%s", hint)
	}
	for _, t := range targets {
		r.Targets = append(r.Targets, uint32(t))
	}
	return r.validate()
}

func (r *stripeRequest) validate() error {
	kinds := 0
	if r.Mirror != 0 {
		kinds++
		if r.Mirror < layout.MinMirror || r.Mirror > layout.MaxMirror {
			return fmt.Errorf("--mirror %d: want %d..%d copies", r.Mirror, layout.MinMirror, layout.MaxMirror)
		}
	}
	if r.EC != "" {
		kinds++
		k, m, ok := strings.Cut(r.EC, "+")
		var err1, err2 error
		r.ecK, err1 = strconv.Atoi(k)
		r.ecM, err2 = strconv.Atoi(m)
		if !ok || err1 != nil || err2 != nil || r.ecK < 1 || r.ecK > layout.MaxECData || r.ecM < 1 || r.ecM > layout.MaxECParity {
			return fmt.Errorf("--ec %s: want K+M with K 1..%d data shards and M 1..%d parity shards (e.g. 8+2)", r.EC, layout.MaxECData, layout.MaxECParity)
		}
	}
	if r.RAID0 {
		kinds++
	}
	if kinds > 1 {
		return fmt.Errorf("--mirror, --ec and --raid0 exclude each other")
	}
	if r.Count < layout.AllTargets || r.Count > layout.MaxStripeCount {
		return fmt.Errorf("-c %d: want -1 (all targets) or 1..%d", r.Count, layout.MaxStripeCount)
	}
	if r.Size != 0 {
		if r.Size < layout.MinStripeSize || r.Size > layout.MaxStripeSize || r.Size%(64<<10) != 0 {
			return fmt.Errorf("-S %s: want a multiple of 64KiB between %s and %s",
				units.FormatSize(uint64(r.Size)), units.FormatSize(layout.MinStripeSize), units.FormatSize(layout.MaxStripeSize))
		}
	}
	if len(r.Targets) > 0 && r.width() > 1 {
		if len(r.Targets)%r.width() != 0 || r.Count == layout.AllTargets || (r.Count != 0 && int(r.Count)*r.width() != len(r.Targets)) {
			return fmt.Errorf("-o: %d targets do not make whole stripes of %d (-c %d)", len(r.Targets), r.width(), r.Count)
		}
	} else if len(r.Targets) > 0 {
		if r.Count == layout.AllTargets || (r.Count != 0 && int(r.Count) != len(r.Targets)) {
			return fmt.Errorf("-c %d does not match the %d targets given with -o", r.Count, len(r.Targets))
		}
		seen := make(map[uint32]bool)
		for _, t := range r.Targets {
			if seen[t] {
				return fmt.Errorf("-o: target %d given twice", t)
			}
			seen[t] = true
		}
	}
	return nil
}

// width is the objects per stripe the request asks for (1 if it does not
// ask for protection).
func (r *stripeRequest) width() int {
	switch {
	case r.Mirror != 0:
		return r.Mirror
	case r.EC != "":
		return r.ecK + r.ecM
	}
	return 1
}

// apply returns cur with the requested fields replaced. The targets of cur
// are dropped unless -o gave new ones: the servers choose targets to match
// the new count.
func (r *stripeRequest) apply(cur layoutJSON) layoutJSON {
	out := layoutJSON{Kind: cur.Kind, Mirror: cur.Mirror, ECData: cur.ECData, ECParity: cur.ECParity,
		StripeSize: cur.StripeSize, StripeCount: cur.StripeCount}
	switch {
	case r.Mirror != 0:
		out.Kind, out.Mirror, out.ECData, out.ECParity = "mirror", r.Mirror, 0, 0
	case r.EC != "":
		out.Kind, out.Mirror, out.ECData, out.ECParity = "ec", 0, r.ecK, r.ecM
	case r.RAID0:
		out.Kind, out.Mirror, out.ECData, out.ECParity = "raid0", 0, 0, 0
	}
	if r.Size != 0 {
		out.StripeSize = uint64(r.Size)
	}
	if r.Count != 0 {
		out.StripeCount = r.Count
	}
	if len(r.Targets) > 0 {
		out.Targets = r.Targets
		out.StripeCount = int32(len(r.Targets) / out.width())
	}
	if out.StripeSize == 0 {
		out.StripeSize = layout.DefaultStripeSize
	}
	if out.StripeCount == 0 {
		out.StripeCount = layout.DefaultStripeCount
	}
	return out
}

// checkDomains refuses, before anything is changed, protection that needs
// more storage servers (failure domains) than are up: the metadata server
// refuses it too, but here the error can say what is missing.
func checkDomains(path string, l layoutJSON) error {
	w := l.width()
	if w == 1 {
		return nil
	}
	ts, err := getDF(path)
	if err != nil {
		return err
	}
	up := map[string]bool{}
	all := map[string]bool{}
	for _, t := range ts {
		all[t.Domain] = true
		if t.Up {
			up[t.Domain] = true
		}
	}
	if len(up) < w {
		return fmt.Errorf("%s: %s needs %d storage servers (failure domains) up, and %d of %d are (see weft df); nothing changed",
			path, l.kindString(), w, len(up), len(all))
	}
	return nil
}

func setstripe(path string, req *stripeRequest) error {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return setstripeNewFile(path, req)
	case err != nil:
		return err
	case fi.IsDir():
		cur, err := getLayout(path)
		if err != nil {
			return err
		}
		l := req.apply(cur)
		if err := checkDomains(path, l); err != nil {
			return err
		}
		return setLayout(path, l)
	case fi.Mode().IsRegular():
		if fi.Size() > 0 {
			return fmt.Errorf("%s holds %d bytes: a file's layout is fixed once written (copy it into a directory with the layout you want: weft setstripe -c N -S SIZE DIR)", path, fi.Size())
		}
		cur, err := getLayout(path)
		if err != nil {
			return err
		}
		l := req.apply(cur)
		if err := checkDomains(path, l); err != nil {
			return err
		}
		return setLayout(path, l)
	}
	return fmt.Errorf("%s is neither a directory nor a regular file", path)
}

// setstripeDefault gives directory dir the layout of the root of its weft
// mount, without pinned targets (on the root itself: the built-in default).
func setstripeDefault(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("-d %s: not a directory (only directories have a default layout)", dir)
	}
	root, err := mountRootOf(dir)
	if err != nil {
		return err
	}
	def := layoutJSON{StripeSize: layout.DefaultStripeSize, StripeCount: layout.DefaultStripeCount}
	if same, err := sameFile(root, dir); err != nil {
		return err
	} else if !same {
		if def, err = getLayout(root); err != nil {
			return err
		}
		def.Targets, def.Stale = nil, nil
	}
	return setLayout(dir, def)
}

// mountRootOf returns the root of the file system that holds path: the
// last directory on the way up that is on the same device.
func mountRootOf(path string) (string, error) {
	p, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		return "", err
	}
	for p != "/" {
		var up unix.Stat_t
		if err := unix.Stat(filepath.Dir(p), &up); err != nil {
			return "", err
		}
		if up.Dev != st.Dev {
			break
		}
		p = filepath.Dir(p)
	}
	return p, nil
}

func sameFile(a, b string) (bool, error) {
	fa, err := os.Stat(a)
	if err != nil {
		return false, err
	}
	fb, err := os.Stat(b)
	if err != nil {
		return false, err
	}
	return os.SameFile(fa, fb), nil
}

// setstripeNewFile creates path with the requested layout, or leaves
// nothing behind.
func setstripeNewFile(path string, req *stripeRequest) error {
	// Check the directory first: on another file system we must not create
	// a file at all.
	dirLayout, err := getLayout(filepath.Dir(path))
	if err != nil {
		return err
	}
	if err := checkDomains(filepath.Dir(path), req.apply(dirLayout)); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o666)
	if err != nil {
		return err
	}
	err = func() error {
		cur, err := getLayout(path)
		if err != nil {
			return err
		}
		return setLayout(path, req.apply(cur))
	}()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		if rerr := os.Remove(path); rerr != nil {
			return fmt.Errorf("%w (and removing the new file failed: %v)", err, rerr)
		}
		return err
	}
	return nil
}

func setLayout(path string, l layoutJSON) error {
	v, err := json.Marshal(l)
	if err != nil {
		return err
	}
	err = setxattr(path, xattrLayout, v)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EINVAL):
		return fmt.Errorf("%s: layout %s refused as invalid (is a target id unknown? see weft df)", path, v)
	case errors.Is(err, unix.EBUSY):
		return fmt.Errorf("%s: the file has been written, so its layout is fixed (copy it into a directory with the layout you want)", path)
	case errors.Is(err, unix.ENOSPC) && l.width() > 1:
		return fmt.Errorf("%s: %s needs %d storage servers (failure domains) with free space up (see weft df); nothing changed", path, l.kindString(), l.width())
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EIO):
		return fmt.Errorf("%s: set layout %s: %w (are the storage targets up? see weft df)", path, v, err)
	case errors.Is(err, unix.ENOTSUP):
		return fmt.Errorf("%s: %w", path, errNotWeft)
	}
	return fmt.Errorf("%s: set layout %s: %w", path, v, err)
}
