package fuse

import (
	"context"
	"encoding/json"
	"strings"
	"syscall"

	"github.com/weft-fs/weft/health"
	"github.com/weft-fs/weft/layout"
	"github.com/weft-fs/weft/proto"
)

// Virtual extended attributes, computed here and never listed.
const (
	xattrLayout = "user.weft.layout"
	xattrDF     = "user.weft.df"
	xattrMeta   = "user.weft.meta" // the metadata server's address, for admin tools
	// xattrLeases: JSON {"on","hits","misses","opens","pinned","ahead","listed"}: whether
	// this mount caches under metadata leases, how many lookups and stats
	// that cache answered or not (client.Client.Leases), and how many
	// opens it made from the cache and pinned later
	// (client.Client.CachedOpens), how many small files' copies it
	// brought ahead (client.Client.AheadCopies), and how many entries it
	// cached from directories listed ahead (client.Client.ListedAhead).
	xattrLeases = "user.weft.leases"
	// xattrResync, set (any value) on a mirrored file, repairs its stale
	// copies (client.Resync); `weft resync` sets it.
	xattrResync = "user.weft.resync"
	// xattrMigrate, set to a layout (layoutJSON, targets optional) on a
	// regular file, restripes it online (client.Migrate); `weft migrate`
	// sets it.
	xattrMigrate = "user.weft.migrate"
	weftPrefix   = "user.weft."
)

// layoutJSON is the value of user.weft.layout. Kind is "raid0" (or
// absent: raid0), "mirror" (Mirror copies) or "ec" (ECData+ECParity);
// Targets lists a file's objects slot by slot (layout.Layout), Stale the
// slots that missed writes.
type layoutJSON struct {
	Kind        string           `json:"kind,omitempty"`
	Mirror      uint8            `json:"mirror,omitempty"`
	ECData      uint8            `json:"ec_k,omitempty"`
	ECParity    uint8            `json:"ec_m,omitempty"`
	StripeSize  uint64           `json:"stripe_size"`
	StripeCount int32            `json:"stripe_count"`
	Targets     []proto.TargetID `json:"targets"`
	Stale       []uint32         `json:"stale,omitempty"`
}

func toLayoutJSON(l layout.Layout) layoutJSON {
	return layoutJSON{
		Kind: l.Kind.String(), Mirror: l.Mirror, ECData: l.ECData, ECParity: l.ECParity,
		StripeSize: l.StripeSize, StripeCount: l.StripeCount,
		Targets: append([]proto.TargetID{}, l.Targets...), Stale: l.Stale,
	}
}

// fromLayoutJSON reads a layout request; unknown kinds are ErrInvalid.
func fromLayoutJSON(j layoutJSON) (layout.Layout, error) {
	l := layout.Layout{Mirror: j.Mirror, ECData: j.ECData, ECParity: j.ECParity,
		StripeSize: j.StripeSize, StripeCount: j.StripeCount, Targets: j.Targets}
	switch j.Kind {
	case "", "raid0":
		l.Kind = layout.RAID0
	case "mirror":
		l.Kind = layout.Mirror
	case "ec":
		l.Kind = layout.EC
	default:
		return layout.Layout{}, layout.ErrInvalid
	}
	if l.StripeSize == 0 {
		l.StripeSize = layout.DefaultStripeSize
	}
	if l.StripeCount == 0 {
		l.StripeCount = layout.DefaultStripeCount
		if w := l.Width(); len(l.Targets) > 0 && w > 0 {
			l.StripeCount = int32(len(l.Targets) / w)
		}
	}
	return l, l.ValidatePolicy()
}

// xattrNamespace classifies a name: "user", "security", or "other" (trusted,
// system and names without a namespace, which weft does not support).
func xattrNamespace(name string) string {
	switch {
	case strings.HasPrefix(name, "user."):
		return "user"
	case strings.HasPrefix(name, "security."):
		return "security"
	}
	return "other"
}

// replyXattr follows getxattr(2): size 0 asks for the length.
func replyXattr(v, dest []byte) (uint32, syscall.Errno) {
	if len(dest) == 0 {
		return uint32(len(v)), 0
	}
	if len(dest) < len(v) {
		return uint32(len(v)), syscall.ERANGE
	}
	return uint32(copy(dest, v)), 0
}

// Getxattr implements fs.NodeGetxattrer. security.* is answered here without
// a round trip: the kernel asks for security.capability before every write.
func (n *node) Getxattr(ctx context.Context, name string, dest []byte) (uint32, syscall.Errno) {
	switch xattrNamespace(name) {
	case "security":
		return 0, syscall.ENODATA
	case "other":
		return 0, syscall.EOPNOTSUPP
	}
	ctx = n.fsys.creds.with(ctx) // only calls to the server need them
	var v []byte
	switch name {
	case xattrLayout:
		l, err := n.effectiveLayout(ctx)
		if err != nil {
			return 0, n.fsys.errno("getxattr", err)
		}
		v, _ = json.Marshal(toLayoutJSON(l))
	case xattrMeta:
		v = []byte(n.fsys.meta)
	case xattrLeases:
		on, hits, misses := n.fsys.c.Leases()
		opens, pinned := n.fsys.c.CachedOpens()
		v, _ = json.Marshal(struct {
			On     bool   `json:"on"`
			Hits   uint64 `json:"hits"`
			Misses uint64 `json:"misses"`
			Opens  uint64 `json:"opens"`
			Pinned uint64 `json:"pinned"`
			Ahead  uint64 `json:"ahead"`
			Listed uint64 `json:"listed"`
		}{on, hits, misses, opens, pinned, n.fsys.c.AheadCopies(), n.fsys.c.ListedAhead()})
	case xattrDF:
		ts, err := n.fsys.c.Targets(ctx)
		if err != nil {
			return 0, n.fsys.errno("getxattr", err)
		}
		out := make([]health.Target, 0, len(ts))
		for _, t := range ts {
			out = append(out, health.TargetOf(t))
		}
		v, _ = json.Marshal(out)
	default:
		var err error
		if v, err = n.fsys.c.GetXattr(ctx, n.ino(), name); err != nil {
			return 0, n.fsys.errno("getxattr", err)
		}
	}
	return replyXattr(v, dest)
}

// effectiveLayout is the node's layout; for a directory that inherits, the
// nearest ancestor's default that the kernel tree knows, else the
// filesystem default.
func (n *node) effectiveLayout(ctx context.Context) (layout.Layout, error) {
	a, err := n.fsys.c.GetAttr(ctx, n.ino())
	if err != nil {
		return layout.Layout{}, err
	}
	if a.Layout.StripeSize != 0 || !a.IsDir() {
		return a.Layout, nil
	}
	for _, p := n.Parent(); p != nil; _, p = p.Parent() {
		pa, err := n.fsys.c.GetAttr(ctx, proto.Ino(p.StableAttr().Ino))
		if err != nil {
			return layout.Layout{}, err
		}
		if pa.Layout.StripeSize != 0 {
			return pa.Layout, nil
		}
	}
	return layout.Default(), nil
}

// Setxattr implements fs.NodeSetxattrer. Setting user.weft.layout changes a
// directory's default or an empty file's layout; other user.weft.* names are
// reserved.
func (n *node) Setxattr(ctx context.Context, name string, data []byte, flags uint32) syscall.Errno {
	ctx = n.fsys.creds.with(ctx)
	n.stale() // ctime changes
	switch xattrNamespace(name) {
	case "security", "other":
		return syscall.EOPNOTSUPP
	}
	if name == xattrResync {
		_, err := n.fsys.c.Resync(ctx, n.ino())
		return n.fsys.errno("resync", err)
	}
	if name == xattrMigrate {
		l, ok := parseLayoutXattr(data)
		if !ok {
			return syscall.EINVAL
		}
		_, err := n.fsys.c.Migrate(ctx, n.ino(), l)
		if err != nil {
			n.fsys.log.Warn("fuse: migrate failed; the file keeps its layout", "ino", n.ino(), "err", err)
		}
		return n.fsys.errno("migrate", err)
	}
	if name == xattrLayout {
		l, ok := parseLayoutXattr(data)
		if !ok {
			return syscall.EINVAL
		}
		_, err := n.fsys.c.SetLayout(ctx, n.ino(), l)
		return n.fsys.errno("setxattr", err)
	}
	if strings.HasPrefix(name, weftPrefix) {
		return syscall.EPERM
	}
	return n.fsys.errno("setxattr", n.fsys.c.SetXattr(ctx, n.ino(), name, data, flags))
}

// parseLayoutXattr decodes the JSON layout a setxattr of user.weft.layout
// or user.weft.migrate carries; false when it is not a valid one (EINVAL).
func parseLayoutXattr(data []byte) (layout.Layout, bool) {
	var j layoutJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return layout.Layout{}, false
	}
	l, err := fromLayoutJSON(j)
	return l, err == nil
}

// Listxattr implements fs.NodeListxattrer; the virtual names are hidden.
func (n *node) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	ctx = n.fsys.creds.with(ctx)
	names, err := n.fsys.c.ListXattr(ctx, n.ino())
	if err != nil {
		return 0, n.fsys.errno("listxattr", err)
	}
	var v []byte
	for _, name := range names {
		if strings.HasPrefix(name, weftPrefix) {
			continue
		}
		v = append(append(v, name...), 0)
	}
	return replyXattr(v, dest)
}

// Removexattr implements fs.NodeRemovexattrer.
func (n *node) Removexattr(ctx context.Context, name string) syscall.Errno {
	ctx = n.fsys.creds.with(ctx)
	n.stale() // ctime changes
	switch xattrNamespace(name) {
	case "security":
		return syscall.ENODATA
	case "other":
		return syscall.EOPNOTSUPP
	}
	if strings.HasPrefix(name, weftPrefix) {
		return syscall.EPERM
	}
	return n.fsys.errno("removexattr", n.fsys.c.RemoveXattr(ctx, n.ino(), name))
}
