package meta

import (
	"errors"
	"syscall"
	"testing"

	"github.com/weft-fs/weft/layout"
	"github.com/weft-fs/weft/proto"
)

// addServerTarget registers a target served at addr in domain.
func (e *env) addServerTarget(uuid, addr, domain string) proto.TargetID {
	e.t.Helper()
	id, err := e.srv.RegisterTarget(ctx, uuid, proto.TargetInfo{Addr: addr, Domain: domain, Total: 2 << 30, Used: 1 << 30, Free: 1 << 30})
	e.must(err)
	return id
}

func (e *env) targetDomains() map[proto.TargetID]string {
	out := map[proto.TargetID]string{}
	for _, t := range e.srv.reg.list() {
		out[t.ID] = t.FailureDomain()
	}
	return out
}

// TestMirrorPlacementDistinctServers: the copies of every stripe of a
// mirrored file land on targets of distinct servers, even when one server
// has more targets than the others; with too few servers, setstripe and
// create fail with ENOSPC and change nothing.
func TestMirrorPlacementDistinctServers(t *testing.T) {
	e := newEnv(t)
	// Server a has three targets, b one: a mirror 2 file can have one
	// stripe only.
	e.addServerTarget("a1", "a:1", "")
	e.addServerTarget("a2", "a:1", "")
	e.addServerTarget("a3", "a:1", "")
	e.addServerTarget("b1", "b:1", "")
	dom := e.targetDomains()
	d, err := e.srv.Mkdir(ctx, proto.RootIno, "m", 0o755, 0, 0)
	e.must(err)
	pol := layout.Layout{Kind: layout.Mirror, Mirror: 2, StripeSize: 1 << 20, StripeCount: 4}
	if _, err := e.srv.SetLayout(ctx, d.Ino, pol); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		a, err := e.srv.Create(ctx, proto.CreateIn{Parent: d.Ino, Name: string(rune('a' + i)), Mode: 0o644})
		e.must(err)
		l := a.Layout
		if l.Kind != layout.Mirror || l.Mirror != 2 || l.StripeCount != 1 || len(l.Targets) != 2 {
			t.Fatalf("layout %v", l)
		}
		if dom[l.Targets[0]] == dom[l.Targets[1]] {
			t.Fatalf("both copies in %s: %v", dom[l.Targets[0]], l)
		}
	}
	// Mirror 3 needs three servers: refused on the directory, unchanged.
	pol3 := pol
	pol3.Mirror = 3
	if _, err := e.srv.SetLayout(ctx, d.Ino, pol3); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("setstripe mirror 3 on 2 servers: %v, want ENOSPC", err)
	}
	if a, _ := e.srv.GetAttr(ctx, d.Ino); a.Layout.Mirror != 2 {
		t.Fatalf("refused setstripe changed the directory: %v", a.Layout)
	}
	// A new file asking for it fails too, and is not created.
	if _, err := e.srv.Create(ctx, proto.CreateIn{Parent: d.Ino, Name: "three", Mode: 0o644, Layout: &pol3}); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("create mirror 3 on 2 servers: %v, want ENOSPC", err)
	}
	if _, err := e.srv.Lookup(ctx, d.Ino, "three"); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("refused create left %v", err)
	}
}

// TestPlacementDomains: with domains given, copies go to distinct domains,
// not only distinct servers.
func TestPlacementDomains(t *testing.T) {
	e := newEnv(t)
	e.addServerTarget("a", "a:1", "rack1")
	e.addServerTarget("b", "b:1", "rack1")
	e.addServerTarget("c", "c:1", "rack2")
	e.addServerTarget("d", "d:1", "rack2")
	dom := e.targetDomains()
	pol := layout.Layout{Kind: layout.Mirror, Mirror: 2, StripeSize: 1 << 20, StripeCount: 2}
	for i := range 20 {
		a, err := e.srv.Create(ctx, proto.CreateIn{Parent: proto.RootIno, Name: string(rune('a' + i)), Mode: 0o644, Layout: &pol})
		e.must(err)
		l := a.Layout
		if l.StripeCount != 2 || len(l.Targets) != 4 {
			t.Fatalf("layout %v", l)
		}
		for s := range 2 {
			if dom[l.Targets[l.Slot(s, 0)]] == dom[l.Targets[l.Slot(s, 1)]] {
				t.Fatalf("stripe %d: both copies in one rack: %v", s, l)
			}
		}
	}
	pol3 := pol
	pol3.Mirror = 3
	if _, err := e.srv.Create(ctx, proto.CreateIn{Parent: proto.RootIno, Name: "three", Mode: 0o644, Layout: &pol3}); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("mirror 3 over 2 racks: %v, want ENOSPC", err)
	}
}

func TestPlaceGroups(t *testing.T) {
	cands := []proto.TargetID{1, 2, 3, 4, 5}
	doms := []uint32{0, 0, 1, 1, 2}
	g := placeGroups(cands, doms, 3, 10)
	if len(g) != 1 || g[0][0] != 1 || g[0][1] != 3 || g[0][2] != 5 {
		t.Fatalf("groups %v", g)
	}
	g = placeGroups(cands, doms, 2, 10)
	if len(g) != 2 {
		t.Fatalf("groups %v", g)
	}
	if g := placeGroups(cands, nil, 5, 1); len(g) != 1 || len(g[0]) != 5 {
		t.Fatalf("no domains: %v", g)
	}
}

// A target formatted for another file system is refused, whatever its
// uuid; one of this file system, or not yet formatted, is accepted.
func TestRegisterForeignFSID(t *testing.T) {
	e := newEnv(t)
	info := proto.TargetInfo{Addr: "a:1", Total: 2 << 30, Used: 1 << 30, Free: 1 << 30}
	info.FSID = "another-file-system"
	if _, err := e.srv.RegisterTarget(ctx, "u1", info); !errors.Is(err, syscall.EPERM) {
		t.Fatalf("foreign target: %v, want EPERM", err)
	}
	if len(e.srv.reg.list()) != 0 {
		t.Fatal("the foreign target was registered")
	}
	info.FSID = e.srv.FSID()
	if _, err := e.srv.RegisterTarget(ctx, "u1", info); err != nil {
		t.Fatal(err)
	}
	info.FSID = ""
	if _, err := e.srv.RegisterTarget(ctx, "u2", info); err != nil {
		t.Fatal(err)
	}
}

// Stale marks: a mark is recorded and kept in the layout; marking the last
// fresh copy of a stripe is refused (EIO) and changes nothing; clearing is
// refused (EBUSY) when the file changed since the repair began.
func TestStaleMarks(t *testing.T) {
	e := newEnv(t)
	e.addServerTarget("a", "a:1", "")
	e.addServerTarget("b", "b:1", "")
	e.addServerTarget("c", "c:1", "")
	pol := layout.Layout{Kind: layout.Mirror, Mirror: 2, StripeSize: 1 << 20, StripeCount: 1}
	a, err := e.srv.Create(ctx, proto.CreateIn{Parent: proto.RootIno, Name: "f", Mode: 0o644, Layout: &pol})
	e.must(err)
	if _, err := e.srv.MarkStale(ctx, a.Ino, a.Gen+1, []uint32{1}); !errors.Is(err, syscall.ESTALE) {
		t.Fatalf("mark of another generation: %v, want ESTALE", err)
	}
	got, err := e.srv.MarkStale(ctx, a.Ino, a.Gen, []uint32{1})
	if err != nil || !got.Layout.IsStale(1) {
		t.Fatalf("mark: %v %v", got.Layout, err)
	}
	if _, err := e.srv.MarkStale(ctx, a.Ino, a.Gen, []uint32{0}); !errors.Is(err, syscall.EIO) {
		t.Fatalf("marking the last fresh copy: %v, want EIO", err)
	}
	if got, _ := e.srv.GetAttr(ctx, a.Ino); got.Layout.IsStale(0) || !got.Layout.IsStale(1) {
		t.Fatalf("refused mark changed the layout: %v", got.Layout)
	}
	if _, err := e.srv.ClearStale(ctx, a.Ino, a.Gen, []uint32{1}, a.Mtime-1); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("clear after the file changed: %v, want EBUSY", err)
	}
	cur, _ := e.srv.GetAttr(ctx, a.Ino)
	if got, err := e.srv.ClearStale(ctx, a.Ino, a.Gen, []uint32{1}, cur.Mtime); err != nil || len(got.Layout.Stale) != 0 {
		t.Fatalf("clear: %v %v", got.Layout, err)
	}
	// EC 2+1: one shard may be stale, not two.
	ec := layout.Layout{Kind: layout.EC, ECData: 2, ECParity: 1, StripeSize: 1 << 20, StripeCount: 1}
	b, err := e.srv.Create(ctx, proto.CreateIn{Parent: proto.RootIno, Name: "ec", Mode: 0o644, Layout: &ec})
	e.must(err)
	if len(b.Layout.Targets) != 3 {
		t.Fatalf("ec layout %v", b.Layout)
	}
	if _, err := e.srv.MarkStale(ctx, b.Ino, b.Gen, []uint32{2}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.srv.MarkStale(ctx, b.Ino, b.Gen, []uint32{0}); !errors.Is(err, syscall.EIO) {
		t.Fatalf("a second stale shard of ec 2+1: %v, want EIO", err)
	}
	// EC 3+1 needs 4 servers.
	ec.ECData = 3
	if _, err := e.srv.Create(ctx, proto.CreateIn{Parent: proto.RootIno, Name: "ec4", Mode: 0o644, Layout: &ec}); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("ec 3+1 on 3 servers: %v, want ENOSPC", err)
	}
}

// Only a caller who may write the file marks or clears its stale copies.
func TestStaleMarksNeedWrite(t *testing.T) {
	e := newEnv(t)
	e.addServerTarget("a", "a:1", "")
	e.addServerTarget("b", "b:1", "")
	pol := layout.Layout{Kind: layout.Mirror, Mirror: 2, StripeSize: 1 << 20, StripeCount: 1}
	d, err := e.srv.Mkdir(ctx, proto.RootIno, "d", 0o777, 0, 0)
	e.must(err)
	a, err := e.srv.Create(asU, proto.CreateIn{Parent: d.Ino, Name: "f", Mode: 0o644, Layout: &pol})
	e.must(err)
	if _, err := e.srv.MarkStale(asV, a.Ino, a.Gen, []uint32{1}); !errors.Is(err, syscall.EACCES) {
		t.Fatalf("mark by another user: %v, want EACCES", err)
	}
	if _, err := e.srv.MarkStale(asU, a.Ino, a.Gen, []uint32{1}); err != nil {
		t.Fatalf("mark by the owner: %v", err)
	}
	cur, _ := e.srv.GetAttr(ctx, a.Ino)
	if _, err := e.srv.ClearStale(asV, a.Ino, a.Gen, []uint32{1}, cur.Mtime); !errors.Is(err, syscall.EACCES) {
		t.Fatalf("clear by another user: %v, want EACCES", err)
	}
}
