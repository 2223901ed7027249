package meta

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/weft-fs/weft/capability"
	"github.com/weft-fs/weft/layout"
	"github.com/weft-fs/weft/meta/store"
	"github.com/weft-fs/weft/proto"
)

// rebuildStorage is fakeStorage that also takes rebuild requests: it
// records them and calls hook (if set) with each.
type rebuildStorage struct {
	*fakeStorage
	mu   sync.Mutex
	reqs []proto.RebuildRequest
	hook func(proto.RebuildRequest)
	fail error // returned by every request, if set
}

func (r *rebuildStorage) RebuildObject(_ context.Context, req proto.RebuildRequest) (uint64, error) {
	r.mu.Lock()
	r.reqs = append(r.reqs, req)
	hook, fail := r.hook, r.fail
	r.mu.Unlock()
	if hook != nil {
		hook(req)
	}
	if fail != nil {
		return 0, fail
	}
	return req.Len, nil
}

// rebuildEnv: three servers a, b, c with one target each, and a mirror 2
// file of 5 MiB on two of them. It returns the file's attributes and the
// target it does not use.
func rebuildEnv(t *testing.T) (*env, *rebuildStorage, proto.Attr, proto.TargetID) {
	rs := &rebuildStorage{fakeStorage: newFakeStorage()}
	e := newEnv(t, func(o *Options) { o.Storage = rs; o.NoRebuildRate = true; o.noRebuildLoop, o.noGCLoop = true, true })
	ids := []proto.TargetID{e.addServerTarget("a", "a:1", ""), e.addServerTarget("b", "b:1", ""), e.addServerTarget("c", "c:1", "")}
	pol := layout.Layout{Kind: layout.Mirror, Mirror: 2, StripeSize: 1 << 20, StripeCount: 1}
	a, err := e.srv.Create(ctx, proto.CreateIn{Parent: proto.RootIno, Name: "f", Mode: 0o644, Layout: &pol})
	e.must(err)
	a, err = e.srv.WriteDone(ctx, a.Ino, 5<<20, testEpoch.UnixNano()+1, proto.NoBlocks)
	e.must(err)
	var free proto.TargetID
	for _, id := range ids {
		if !slices.Contains(a.Layout.Targets, id) {
			free = id
		}
	}
	return e, rs, a, free
}

// TestRebuildMovesSlot: with a copy's target out, the scheduler finds the
// object, picks the only target in a failure domain the stripe does not
// use, asks its server to copy from the other copy in 4 MiB ranges
// (start, then finish with the object's length), and moves the slot; the
// old object is queued for removal.
func TestRebuildMovesSlot(t *testing.T) {
	e, rs, a, free := rebuildEnv(t)
	lost, other := a.Layout.Targets[1], a.Layout.Targets[0]
	e.must(e.srv.SetTargetState(ctx, lost, "out"))
	jobs, nlost, err := e.srv.findJobs()
	e.must(err)
	if nlost != 0 || len(jobs) != 1 || jobs[0].Slot != 1 || !jobs[0].Move || jobs[0].Bytes != 5<<20 {
		t.Fatalf("jobs %+v, lost %d", jobs, nlost)
	}
	e.must(e.srv.rb.rebuild(ctx, jobs[0]))
	if len(rs.reqs) != 2 {
		t.Fatalf("requests %+v", rs.reqs)
	}
	first, last := rs.reqs[0], rs.reqs[1]
	if first.Target != free || first.Flags != proto.RebuildStart || first.Off != 0 || first.Len != rebuildChunk ||
		last.Flags != proto.RebuildFinish || last.Off != rebuildChunk || last.Len != 1<<20 || last.Size != 5<<20 {
		t.Fatalf("requests %+v", rs.reqs)
	}
	// The lost target still counts up (no heartbeat timeout yet): the
	// copy on it is tried first, the other copy next.
	if src := first.Sources; len(src) != 2 || src[1].Target != other || src[1].Slot != 0 {
		t.Fatalf("sources %+v", src)
	}
	got, err := e.srv.GetAttr(ctx, a.Ino)
	e.must(err)
	if got.Layout.Targets[1] != free || got.Layout.Targets[0] != other || got.Mtime != a.Mtime {
		t.Fatalf("after the rebuild: %v (mtime %d, was %d)", got.Layout, got.Mtime, a.Mtime)
	}
	if _, err := e.st.Get(store.GCKey(uint32(lost), uint64(a.Ino), 1, a.Gen)); err != nil {
		t.Fatalf("old object not queued for removal: %v", err)
	}
	// Nothing is left to do, and the lost target may now be removed.
	if jobs, _, _ := e.srv.findJobs(); len(jobs) != 0 {
		t.Fatalf("jobs after the rebuild: %+v", jobs)
	}
	e.must(e.srv.SetTargetState(ctx, lost, "removed"))
	old := e.srv.reg.byID[lost]
	if _, err := e.srv.RegisterTarget(ctx, old.uuid, proto.TargetInfo{Addr: old.info.Addr, Total: 2 << 30, Free: 1 << 30}); !errors.Is(err, syscall.EPERM) {
		t.Fatalf("a removed target registered again: %v", err)
	}
}

// TestRebuildRetriesWrittenFile: a file written while its object is being
// copied keeps its layout (the copy may lack the write), and the next
// attempt, with no write, moves it.
func TestRebuildRetriesWrittenFile(t *testing.T) {
	e, rs, a, free := rebuildEnv(t)
	lost := a.Layout.Targets[0]
	e.must(e.srv.SetTargetState(ctx, lost, "out"))
	jobs, _, err := e.srv.findJobs()
	e.must(err)
	rs.hook = func(req proto.RebuildRequest) {
		if req.Flags&proto.RebuildFinish != 0 {
			_, err := e.srv.WriteDone(ctx, a.Ino, 5<<20, a.Mtime+1000, proto.NoBlocks)
			e.must(err)
		}
	}
	if err := e.srv.rb.rebuild(ctx, jobs[0]); !errors.Is(err, errDeferred) {
		t.Fatalf("rebuild of a file written meanwhile: %v, want deferred", err)
	}
	got, _ := e.srv.GetAttr(ctx, a.Ino)
	if got.Layout.Targets[0] != lost {
		t.Fatalf("a file written during its rebuild was moved: %v", got.Layout)
	}
	rs.hook = nil
	e.must(e.srv.rb.rebuild(ctx, jobs[0]))
	got, _ = e.srv.GetAttr(ctx, a.Ino)
	if got.Layout.Targets[0] != free {
		t.Fatalf("second attempt: %v", got.Layout)
	}
}

// TestRebuildDestination: the replacement is never a target the file
// uses, never in a domain its stripe uses, never one with an old object
// of that name still queued for removal; with none left, ENOSPC and no
// copy.
func TestRebuildDestination(t *testing.T) {
	e, rs, a, free := rebuildEnv(t)
	n, err := loadInode(e.st, a.Ino)
	e.must(err)
	dst, err := e.srv.rebuildDest(n, 1)
	e.must(err)
	if dst != free {
		t.Fatalf("destination %d, want %d", dst, free)
	}
	// A fourth target on server a: same domain as copy 0's if that is a.
	d := e.addServerTarget("a2", e.srv.reg.byID[a.Layout.Targets[0]].info.Addr, "")
	for range 20 {
		if dst, err := e.srv.rebuildDest(n, 1); err != nil || dst == d {
			t.Fatalf("destination %d (%v) in copy 0's domain", dst, err)
		}
	}
	// The free target holds an old object of this name, queued for removal.
	b := e.st.NewBatch()
	b.Set(store.GCKey(uint32(free), uint64(a.Ino), 1, a.Gen), nil)
	e.must(b.Commit(true))
	b.Close()
	if _, err := e.srv.rebuildDest(n, 1); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("destination with none left: %v", err)
	}
	e.must(e.srv.SetTargetState(ctx, a.Layout.Targets[1], "out"))
	jobs, _, _ := e.srv.findJobs()
	if err := e.srv.rb.rebuild(ctx, jobs[0]); !errors.Is(err, syscall.ENOSPC) || len(rs.reqs) != 0 {
		t.Fatalf("rebuild with no destination: %v, %d requests", err, len(rs.reqs))
	}
}

// TestTargetStates: states are kept across a restart, placement skips
// targets not in, a RAID-0 file's only copy blocks remove, bad names are
// refused.
func TestTargetStates(t *testing.T) {
	e := newEnv(t)
	x := e.addServerTarget("x", "x:1", "")
	y := e.addServerTarget("y", "y:1", "")
	one := layout.Layout{StripeSize: 1 << 20, StripeCount: 1, Targets: []layout.TargetID{x}}
	f, err := e.srv.Create(ctx, proto.CreateIn{Parent: proto.RootIno, Name: "r", Mode: 0o644, Layout: &one})
	e.must(err)
	if f.Layout.Targets[0] != x {
		t.Fatalf("layout %v", f.Layout)
	}
	if err := e.srv.SetTargetState(ctx, x, "removed"); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("remove of a target with a RAID-0 object: %v", err)
	}
	if err := e.srv.SetTargetState(ctx, x, "gone"); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("unknown state: %v", err)
	}
	if err := e.srv.SetTargetState(ctx, 99, "out"); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("unknown target: %v", err)
	}
	e.must(e.srv.SetTargetState(ctx, x, "inactive"))
	e.restart()
	ts, _, err := e.srv.TargetList(ctx)
	e.must(err)
	if ts[0].ID != x || ts[0].State != "inactive" || ts[1].State != "in" {
		t.Fatalf("after restart: %+v", ts)
	}
	for i := range 10 {
		a, err := e.srv.Create(ctx, proto.CreateIn{Parent: proto.RootIno, Name: string(rune('a' + i)), Mode: 0o644})
		e.must(err)
		if slices.Contains(a.Layout.Targets, x) || !slices.Contains(a.Layout.Targets, y) {
			t.Fatalf("placed on an inactive target: %v", a.Layout)
		}
	}
	e.must(e.srv.SetTargetState(ctx, x, "in"))
}

// TestTargetRecordFormats: a record in state in without auto is written
// as version 2 (stores that never used states keep their bytes); others
// as version 3; both read back.
func TestTargetRecordFormats(t *testing.T) {
	for _, r := range []targetRecord{
		{uuid: "u", addr: "a:1", owner: "o"},
		{uuid: "u", addr: "a:1", owner: "o", state: TargetOut, auto: true},
		{uuid: "u", addr: "a:1", state: TargetRemoved},
	} {
		b := encodeTargetRecord(r)
		if want := byte(3); (r.state == TargetIn) != (b[0] == 2) || (r.state != TargetIn && b[0] != want) {
			t.Fatalf("%+v written as version %d", r, b[0])
		}
		got, err := decodeTargetRecord(b)
		if err != nil || got != r {
			t.Fatalf("%+v read back as %+v, %v", r, got, err)
		}
	}
	bad := encodeTargetRecord(targetRecord{uuid: "u", state: TargetOut})
	bad[len(bad)-2] = byte(targetStateMax)
	if _, err := decodeTargetRecord(bad); err == nil {
		t.Fatal("unknown state decoded")
	}
}

// TestRebuildAutoOut: a target down longer than RebuildAfter is marked out
// by the leader (auto), one down less long is not, and an auto-out target
// that is heard from again is in again; a target an admin marked out
// stays out.
func TestRebuildAutoOut(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.RebuildAfter = time.Minute })
	x := e.addServerTarget("x", "x:1", "")
	y := e.addServerTarget("y", "y:1", "")
	heartbeat := func(uuid, addr string) {
		_, err := e.srv.RegisterTarget(ctx, uuid, proto.TargetInfo{Addr: addr, Total: 2 << 30, Used: 1 << 30, Free: 1 << 30})
		e.must(err)
	}
	state := func(id proto.TargetID) (string, bool) {
		ts, _, err := e.srv.TargetList(ctx)
		e.must(err)
		for _, ts := range ts {
			if ts.ID == id {
				return ts.State, ts.Auto
			}
		}
		t.Fatalf("no target %d", id)
		return "", false
	}
	e.clock.Advance(50 * time.Second) // both down (heartbeat timeout 10 s), not for a minute
	e.srv.rb.autoStates(ctx)
	if st, _ := state(x); st != "in" {
		t.Fatalf("target down 50 s: %s", st)
	}
	e.must(e.srv.SetTargetState(ctx, y, "out"))
	e.clock.Advance(30 * time.Second)
	e.srv.rb.autoStates(ctx)
	if st, auto := state(x); st != "out" || !auto {
		t.Fatalf("target down 80 s: %s (auto %v)", st, auto)
	}
	heartbeat("x", "x:1")
	heartbeat("y", "y:1")
	e.srv.rb.autoStates(ctx)
	if st, auto := state(x); st != "in" || auto {
		t.Fatalf("auto-out target heard again: %s (auto %v)", st, auto)
	}
	if st, _ := state(y); st != "out" {
		t.Fatalf("admin-out target heard again: %s", st)
	}
}

// TestRebuildInPlaceRepairExclusive: an in-place repair of a stale copy
// (a) does nothing once the copy was repaired meanwhile (a resync cleared
// the mark after the scan picked it): it must not empty and rewrite a
// copy readers use; (b) while it runs, a ClearStale of that slot is
// refused with EBUSY, and the mark is cleared by the repair itself.
func TestRebuildInPlaceRepairExclusive(t *testing.T) {
	e, rs, a, _ := rebuildEnv(t)
	_, err := e.srv.MarkStale(ctx, a.Ino, a.Gen, []uint32{1})
	e.must(err)
	jobs, _, err := e.srv.findJobs()
	e.must(err)
	if len(jobs) != 1 || jobs[0].Move || jobs[0].Slot != 1 {
		t.Fatalf("jobs %+v", jobs)
	}
	// (a) Repaired by a resync after the scan.
	_, err = e.srv.ClearStale(ctx, a.Ino, a.Gen, []uint32{1}, a.Mtime)
	e.must(err)
	e.must(e.srv.rb.rebuild(ctx, jobs[0]))
	if len(rs.reqs) != 0 {
		t.Fatalf("an object no longer stale was rewritten: %+v", rs.reqs)
	}
	// (b) A resync ending during the repair is refused.
	_, err = e.srv.MarkStale(ctx, a.Ino, a.Gen, []uint32{1})
	e.must(err)
	var clearErr error
	rs.hook = func(req proto.RebuildRequest) {
		if req.Flags&proto.RebuildStart != 0 {
			_, clearErr = e.srv.ClearStale(ctx, a.Ino, a.Gen, []uint32{1}, a.Mtime)
		}
	}
	e.must(e.srv.rb.rebuild(ctx, jobs[0]))
	if !errors.Is(clearErr, syscall.EBUSY) {
		t.Fatalf("ClearStale during the in-place repair: %v, want EBUSY", clearErr)
	}
	if len(rs.reqs) == 0 {
		t.Fatal("the stale object was not repaired")
	}
	got, err := e.srv.GetAttr(ctx, a.Ino)
	e.must(err)
	if len(got.Layout.Stale) != 0 {
		t.Fatalf("stale after the repair: %v", got.Layout)
	}
	// (c) A repair that fails (its storage server emptied the object and
	// could not read the source) between a resync's copy and its
	// ClearStale: that ClearStale is refused, the resync's next one (after
	// copying again) passes.
	_, err = e.srv.MarkStale(ctx, a.Ino, a.Gen, []uint32{1})
	e.must(err)
	rs.hook, rs.fail = nil, syscall.ENETUNREACH
	if err := e.srv.rb.rebuild(ctx, jobs[0]); !errors.Is(err, syscall.ENETUNREACH) {
		t.Fatalf("failing repair: %v", err)
	}
	if _, err := e.srv.ClearStale(ctx, a.Ino, a.Gen, []uint32{1}, a.Mtime); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("ClearStale after a failed repair: %v, want EBUSY", err)
	}
	_, err = e.srv.ClearStale(ctx, a.Ino, a.Gen, []uint32{1}, a.Mtime)
	e.must(err)
}

// fencingStorage is rebuildStorage that can fence objects: it records the
// issue time of the capability each Fence carries.
type fencingStorage struct {
	*rebuildStorage
	fences []int64
}

func (f *fencingStorage) Fence(ctx context.Context, _ proto.TargetID, _ proto.ObjectID) error {
	cp, err := capability.Parse(proto.CapabilityFrom(ctx))
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.fences = append(f.fences, cp.Issued.UnixNano())
	f.mu.Unlock()
	return nil
}

func (f *fencingStorage) ReadRow(context.Context, proto.TargetID, proto.ObjectID, uint64, uint64, []byte) (int, proto.RowVersion, error) {
	return 0, proto.RowVersion{}, syscall.ENOSYS
}

func (f *fencingStorage) WriteRow(context.Context, proto.TargetID, proto.ObjectID, proto.RowWrite) (uint64, error) {
	return 0, syscall.ENOSYS
}

// TestRebuildRequestsCarryFence: each rebuild attempt fences the object it
// writes, in place or on the target a move goes to, and every request of
// the attempt names that fence (the storage server refuses them once a
// later repair fenced the object again); a later attempt fences later.
func TestRebuildRequestsCarryFence(t *testing.T) {
	fs := &fencingStorage{rebuildStorage: &rebuildStorage{fakeStorage: newFakeStorage()}}
	clock := testEpoch
	e := newEnv(t, func(o *Options) {
		o.Storage = fs
		o.NoRebuildRate = true
		o.noRebuildLoop, o.noGCLoop = true, true
		o.CapabilityKey = bytes.Repeat([]byte{9}, capability.KeySize)
		o.Now = func() time.Time { clock = clock.Add(time.Millisecond); return clock }
	})
	e.addServerTarget("a", "a:1", "")
	e.addServerTarget("b", "b:1", "")
	pol := layout.Layout{Kind: layout.Mirror, Mirror: 2, StripeSize: 1 << 20, StripeCount: 1}
	a, err := e.srv.Create(ctx, proto.CreateIn{Parent: proto.RootIno, Name: "f", Mode: 0o644, Layout: &pol})
	e.must(err)
	a, err = e.srv.WriteDone(ctx, a.Ino, 9<<20, testEpoch.UnixNano()+1, proto.NoBlocks)
	e.must(err)
	var last int64
	for attempt := range 2 {
		_, err = e.srv.MarkStale(ctx, a.Ino, a.Gen, []uint32{1})
		e.must(err)
		jobs, _, err := e.srv.findJobs()
		e.must(err)
		fs.reqs, fs.fences = nil, nil
		e.must(e.srv.rb.rebuild(ctx, jobs[0]))
		if len(fs.fences) != 1 || fs.fences[0] <= last {
			t.Fatalf("attempt %d: fences %v (the last attempt's %d)", attempt, fs.fences, last)
		}
		last = fs.fences[0]
		if len(fs.reqs) < 3 {
			t.Fatalf("attempt %d: %d requests for 9 MiB", attempt, len(fs.reqs))
		}
		for _, r := range fs.reqs {
			if r.Fence != last {
				t.Fatalf("attempt %d: request at %d fenced at %d, the attempt fenced at %d", attempt, r.Off, r.Fence, last)
			}
		}
	}
}
