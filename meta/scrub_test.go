package meta

import (
	"context"
	"errors"
	"slices"
	"sync"
	"syscall"
	"testing"

	"github.com/weft-fs/weft/layout"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/transport"
)

// scrubStorage is rebuildStorage that also starts scrub passes.
type scrubStorage struct {
	*rebuildStorage
	mu      sync.Mutex
	started []proto.TargetID
}

func (s *scrubStorage) StartScrub(_ context.Context, t proto.TargetID) error {
	s.mu.Lock()
	s.started = append(s.started, t)
	s.mu.Unlock()
	return nil
}

// scrubEnv: three servers with a target each, a mirror 2 file of 5 MiB
// and a RAID-0 file over two targets.
func scrubEnv(t *testing.T) (e *env, ss *scrubStorage, mirror, raid0 proto.Attr) {
	ss = &scrubStorage{rebuildStorage: &rebuildStorage{fakeStorage: newFakeStorage()}}
	e = newEnv(t, func(o *Options) { o.Storage = ss; o.NoRebuildRate = true })
	e.addServerTarget("a", "a:1", "")
	e.addServerTarget("b", "b:1", "")
	e.addServerTarget("c", "c:1", "")
	pol := layout.Layout{Kind: layout.Mirror, Mirror: 2, StripeSize: 1 << 20, StripeCount: 1}
	m, err := e.srv.Create(ctx, proto.CreateIn{Parent: proto.RootIno, Name: "m", Mode: 0o644, Layout: &pol})
	e.must(err)
	m, err = e.srv.WriteDone(ctx, m.Ino, 5<<20, testEpoch.UnixNano()+1, proto.NoBlocks)
	e.must(err)
	r0 := layout.Layout{Kind: layout.RAID0, StripeSize: 1 << 20, StripeCount: 2}
	r, err := e.srv.Create(ctx, proto.CreateIn{Parent: proto.RootIno, Name: "r", Mode: 0o644, Layout: &r0})
	e.must(err)
	return e, ss, m, r
}

func (e *env) scrubTarget(id proto.TargetID) proto.ScrubTargetStatus {
	e.t.Helper()
	st, err := e.srv.ScrubStatus(ctx)
	e.must(err)
	for _, t := range st.Targets {
		if t.Target == id {
			return t
		}
	}
	e.t.Fatalf("target %d not in the scrub status %+v", id, st)
	return proto.ScrubTargetStatus{}
}

// TestScrubReportRepairs: a corrupt copy of a mirrored file reported by
// its storage server is marked stale, rewritten in place by the rebuild
// from the other copy (the corrupt object emptied first), and counted
// reported and repaired; objects of no live file are ignored.
func TestScrubReportRepairs(t *testing.T) {
	e, ss, m, _ := scrubEnv(t)
	bad, good := m.Layout.Targets[1], m.Layout.Targets[0]
	obj := proto.ObjectID{Ino: m.Ino, Gen: m.Gen, Stripe: 1}
	rep := proto.ScrubReport{
		ScrubTarget: proto.ScrubTarget{Target: bad, Running: true, Start: 5, Bytes: 1 << 20, Objects: 3, Corrupt: 1},
		Found: []proto.ObjectID{
			obj,
			{Ino: m.Ino + 1000, Stripe: 0},              // no such file
			{Ino: m.Ino, Gen: m.Gen + 1, Stripe: 1},     // another generation
			{Ino: m.Ino, Gen: m.Gen, Stripe: 0},         // slot 0 is not on this target
			{Ino: m.Ino, Gen: m.Gen, Stripe: 7},         // no such slot
			{Ino: proto.RootIno, Gen: m.Gen, Stripe: 0}, // not a file
		},
	}
	e.must(e.srv.ReportScrub(ctx, rep))
	got, err := e.srv.GetAttr(ctx, m.Ino)
	e.must(err)
	// Marked stale, unless the rebuild (woken by the report) already
	// repaired it: the background loop may run before this check.
	ss.mu.Lock()
	rebuilding := len(ss.reqs) > 0 // sent only for a slot marked stale
	ss.mu.Unlock()
	if got.Layout.IsStale(0) || !got.Layout.IsStale(1) && !rebuilding {
		t.Fatalf("after the report: %v", got.Layout)
	}
	// The leader's rebuild repairs it at once (asked for by the report).
	waitFor(t, "the repair", func() bool { return e.scrubTarget(bad).Repaired == 1 })
	st := e.scrubTarget(bad)
	if st.Reported != 1 || st.Lost != 0 || st.Bytes != 1<<20 || st.Objects != 3 || !st.Running || st.Heard == 0 {
		t.Fatalf("scrub status of target %d: %+v", bad, st)
	}
	got, err = e.srv.GetAttr(ctx, m.Ino)
	e.must(err)
	if got.Layout.IsStale(1) || got.Layout.Targets[1] != bad || got.Layout.Targets[0] != good {
		t.Fatalf("after the repair: %v", got.Layout)
	}
	ss.mu.Lock()
	reqs := slices.Clone(ss.reqs)
	ss.mu.Unlock()
	if len(reqs) != 2 || reqs[0].Target != bad || reqs[0].Obj != obj || reqs[0].Flags != proto.RebuildStart ||
		len(reqs[0].Sources) != 1 || reqs[0].Sources[0].Target != good {
		t.Fatalf("rebuild requests %+v: want the corrupt object rewritten in place from the good copy", reqs)
	}
	// The same object reported again later (found by another read) is a
	// new corruption: marked again.
	e.must(e.srv.ReportScrub(ctx, proto.ScrubReport{ScrubTarget: proto.ScrubTarget{Target: bad}, Found: []proto.ObjectID{obj}}))
	if st := e.scrubTarget(bad); st.Reported != 2 {
		t.Fatalf("a second corruption: %+v", st)
	}
}

// TestScrubLost: a corrupt object of a RAID-0 file, and the last good
// copy of a mirrored one, cannot be repaired: counted and listed lost,
// the layouts unchanged.
func TestScrubLost(t *testing.T) {
	e, _, m, r := scrubEnv(t)
	rt := r.Layout.Targets[0]
	robj := proto.ObjectID{Ino: r.Ino, Gen: r.Gen, Stripe: 0}
	e.must(e.srv.ReportScrub(ctx, proto.ScrubReport{ScrubTarget: proto.ScrubTarget{Target: rt}, Found: []proto.ObjectID{robj, robj}}))
	st, err := e.srv.ScrubStatus(ctx)
	e.must(err)
	if len(st.Lost) != 1 || st.Lost[0] != (proto.LostObject{Target: rt, Obj: robj}) {
		t.Fatalf("lost %+v", st.Lost)
	}
	if ts := e.scrubTarget(rt); ts.Lost != 1 || ts.Reported != 1 {
		t.Fatalf("target %d: %+v", rt, ts)
	}
	if got, _ := e.srv.GetAttr(ctx, r.Ino); !slices.Equal(got.Layout.Targets, r.Layout.Targets) || got.Layout.Kind != layout.RAID0 {
		t.Fatalf("RAID-0 layout changed: %v", got.Layout)
	}
	// Both copies of the mirror corrupt: the first is marked stale, the
	// second is lost (marking it too would leave no copy to read). The
	// rebuild is kept from repairing the first meanwhile: its target is
	// no longer up.
	m0, m1 := m.Layout.Targets[0], m.Layout.Targets[1]
	e.clock.Advance(e.opts.HeartbeatTimeout * 2)
	c := &Command{Op: OpCorrupt, Now: e.srv.now(), Ino: m.Ino, Gen: m.Gen, Slots: []uint32{1}, TargetID: m1}
	_, err = e.srv.propose(ctx, c)
	e.must(err)
	e.must(e.srv.ReportScrub(ctx, proto.ScrubReport{ScrubTarget: proto.ScrubTarget{Target: m0}, Found: []proto.ObjectID{{Ino: m.Ino, Gen: m.Gen, Stripe: 0}}}))
	if ts := e.scrubTarget(m0); ts.Lost != 1 {
		t.Fatalf("last copy corrupt: %+v", ts)
	}
	if got, _ := e.srv.GetAttr(ctx, m.Ino); got.Layout.IsStale(0) || !got.Layout.IsStale(1) {
		t.Fatalf("mirror layout %v", got.Layout)
	}
}

// TestScrubLostKept: lost objects are replicated state, not the leader's
// memory: they stay listed (and their targets counted) after the server
// restarts, and go with their file when it is removed. A lost record for
// a slot no longer on the target, or another generation, is refused.
func TestScrubLostKept(t *testing.T) {
	e, _, _, r := scrubEnv(t)
	rt := r.Layout.Targets[0]
	robj := proto.ObjectID{Ino: r.Ino, Gen: r.Gen, Stripe: 0}
	e.must(e.srv.ReportScrub(ctx, proto.ScrubReport{ScrubTarget: proto.ScrubTarget{Target: rt}, Found: []proto.ObjectID{robj}}))
	for _, c := range []Command{
		{Op: OpLost, Ino: r.Ino, Gen: r.Gen, Slots: []uint32{1}, TargetID: rt},         // slot 1 is on another target
		{Op: OpLost, Ino: r.Ino, Gen: r.Gen + 1, Slots: []uint32{0}, TargetID: rt},     // another generation
		{Op: OpLost, Ino: r.Ino, Gen: r.Gen, Slots: []uint32{9}, TargetID: rt},         // no such slot
		{Op: OpLost, Ino: proto.RootIno, Gen: r.Gen, Slots: []uint32{0}, TargetID: rt}, // not a file
	} {
		c.Now = e.srv.now()
		if _, err := e.srv.propose(ctx, &c); err == nil {
			t.Fatalf("%+v: recorded", c)
		}
	}
	e.restart()
	st, err := e.srv.ScrubStatus(ctx)
	e.must(err)
	if len(st.Lost) != 1 || st.Lost[0] != (proto.LostObject{Target: rt, Obj: robj}) {
		t.Fatalf("after a restart, lost %+v", st.Lost)
	}
	if ts := e.scrubTarget(rt); ts.Lost != 1 {
		t.Fatalf("after a restart, target %d: %+v", rt, ts)
	}
	// Reported again (by a read) after the restart: still one.
	e.must(e.srv.ReportScrub(ctx, proto.ScrubReport{ScrubTarget: proto.ScrubTarget{Target: rt}, Found: []proto.ObjectID{robj}}))
	if ts := e.scrubTarget(rt); ts.Lost != 1 || ts.Reported != 0 {
		t.Fatalf("reported again: %+v", ts)
	}
	e.must(e.srv.Unlink(ctx, proto.RootIno, "r"))
	// Reclaimed now rather than after the orphan grace.
	_, err = e.srv.propose(ctx, &Command{Op: OpReclaim, Now: e.srv.now(), Inos: []proto.Ino{r.Ino}})
	e.must(err)
	st, err = e.srv.ScrubStatus(ctx)
	e.must(err)
	if len(st.Lost) != 0 || e.scrubTarget(rt).Lost != 0 {
		t.Fatalf("after the file was removed: %+v", st)
	}
}

// TestCorruptCommand: OpCorrupt changes nothing for a slot no longer on
// the target, another generation, a RAID-0 file.
func TestCorruptCommand(t *testing.T) {
	e, _, m, r := scrubEnv(t)
	for name, tc := range map[string]struct {
		c    Command
		want syscall.Errno
	}{
		"moved":      {Command{Ino: m.Ino, Gen: m.Gen, Slots: []uint32{1}, TargetID: m.Layout.Targets[0]}, syscall.EBUSY},
		"generation": {Command{Ino: m.Ino, Gen: m.Gen + 1, Slots: []uint32{1}, TargetID: m.Layout.Targets[1]}, syscall.ESTALE},
		"raid0":      {Command{Ino: r.Ino, Gen: r.Gen, Slots: []uint32{0}, TargetID: r.Layout.Targets[0]}, syscall.EINVAL},
		"slots":      {Command{Ino: m.Ino, Gen: m.Gen, Slots: []uint32{0, 1}, TargetID: m.Layout.Targets[1]}, syscall.EINVAL},
		"no slot":    {Command{Ino: m.Ino, Gen: m.Gen, Slots: []uint32{9}, TargetID: m.Layout.Targets[1]}, syscall.EINVAL},
	} {
		c := tc.c
		c.Op, c.Now = OpCorrupt, e.srv.now()
		if _, err := e.srv.propose(ctx, &c); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
	if got, _ := e.srv.GetAttr(ctx, m.Ino); got.Layout.IsStale(0) || got.Layout.IsStale(1) {
		t.Fatalf("a refused command changed the layout: %v", got.Layout)
	}
	if OpCorrupt.String() != "corrupt" {
		t.Fatalf("OpCorrupt is %q", OpCorrupt)
	}
	// It survives the log's encoding.
	c := Command{Op: OpCorrupt, Now: 1, Ino: m.Ino, Gen: m.Gen, Slots: []uint32{1}, TargetID: 3}
	got, err := DecodeCommand(c.Encode())
	if err != nil || got.Op != OpCorrupt || got.Ino != c.Ino || got.Gen != c.Gen || !slices.Equal(got.Slots, c.Slots) || got.TargetID != 3 {
		t.Fatalf("decoded %+v, %v", got, err)
	}
}

// TestScrubAuthorization: only the storage server that registered a
// target may report on it; only root may start a scrub, which asks every
// target that is up.
func TestScrubAuthorization(t *testing.T) {
	e, ss, m, _ := scrubEnv(t)
	tg := m.Layout.Targets[1]
	rep := proto.ScrubReport{ScrubTarget: proto.ScrubTarget{Target: tg}, Found: []proto.ObjectID{{Ino: m.Ino, Gen: m.Gen, Stripe: 1}}}
	for _, p := range []transport.Peer{
		{Role: transport.RoleClient, Name: "c", Addr: "c:9"},
		{Role: transport.RoleMeta, Name: "m", Addr: "m:9"},
		{Role: transport.RoleStorage, Name: "someone-else", Addr: "s:9"},
	} {
		pctx := proto.WithRequest(transport.WithPeer(ctx, p), proto.Cred{}, proto.SessionID{}, 0, "")
		if err := e.srv.ReportScrub(pctx, rep); !errors.Is(err, syscall.EACCES) {
			t.Errorf("report from %+v: %v, want EACCES", p, err)
		}
	}
	if got, _ := e.srv.GetAttr(ctx, m.Ino); got.Layout.IsStale(1) {
		t.Fatalf("a refused report marked the object: %v", got.Layout)
	}
	cctx := proto.WithRequest(ctx, proto.Cred{Uid: 1000, Gid: 1000}, proto.SessionID{}, 0, "")
	if _, err := e.srv.StartScrub(cctx); !errors.Is(err, syscall.EPERM) {
		t.Fatalf("start by uid 1000: %v", err)
	}
	started, err := e.srv.StartScrub(ctx)
	e.must(err)
	ss.mu.Lock()
	asked := slices.Clone(ss.started)
	ss.mu.Unlock()
	slices.Sort(asked)
	if len(started) != 3 || !slices.Equal(asked, started) {
		t.Fatalf("started %v, asked %v", started, asked)
	}
}

// TestScrubParamsChecked: the scrub's run-time parameters take sizes and
// durations, and refuse anything else.
func TestScrubParamsChecked(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"scrub.rate", "100MiB", "100MiB"},
		{"scrub.rate", "0", "0B"},
		{"scrub.interval", "72h", "72h0m0s"},
		{"scrub.interval", "0", "0s"},
	} {
		got, err := CheckParam(tc.name, tc.in)
		if err != nil || got != tc.want {
			t.Errorf("%s=%s: %q, %v; want %q", tc.name, tc.in, got, err, tc.want)
		}
	}
	for _, tc := range [][2]string{{"scrub.rate", "fast"}, {"scrub.interval", "-1s"}, {"scrub.interval", "weekly"}} {
		if v, err := CheckParam(tc[0], tc[1]); err == nil {
			t.Errorf("%s=%s accepted as %q", tc[0], tc[1], v)
		}
	}
}
