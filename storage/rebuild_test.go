package storage

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/weft-fs/weft/proto"
)

// TestRebuildFenced: a rebuild request carries the fence the metadata
// service set before it; once a later repair fenced the object again (weft
// resync), the request changes nothing (EACCES), whether it copies a whole
// object or rows with versions: a rebuild the service gave up on, which
// its storage server still runs or receives late, cannot empty or
// overwrite the repaired copy. A later rebuild, fenced later, passes.
func TestRebuildFenced(t *testing.T) {
	src := proto.ObjectID{Ino: 5, Gen: 3, Stripe: 0}
	dst := proto.ObjectID{Ino: 5, Gen: 3, Stripe: 1}
	sign := capSigner(t)
	capAt := func(issued time.Time) []byte { return sign(dst, issued) }
	t0 := time.Unix(1_800_000_000, 0)
	s, tg1 := serveMem(t, nil, 1)
	_, tg2 := serveMem(t, s, 2)
	targets := map[proto.TargetID]*Target{1: tg1, 2: tg2}
	for _, unit := range []uint64{0, testUnit} {
		src.Ino++
		dst.Ino = src.Ino
		old := pattern(1, 3*testUnit/2)
		if _, err := targets[1].Write(ctx, src, 0, old); err != nil {
			t.Fatal(err)
		}
		size := uint64(len(old))
		rebuild := func(fence time.Time) error {
			r := proto.RebuildRequest{Target: 2, Obj: dst, Len: 2 * testUnit, Size: size, Unit: unit,
				Flags: proto.RebuildStart | proto.RebuildFinish, Fence: fence.UnixNano(),
				Sources: []proto.RebuildSource{{Target: 1, Slot: 0}}}
			_, err := s.RebuildObject(ctx, r)
			return err
		}
		// The service fences the stale copy, then rebuilds it.
		first := t0.Add(time.Duration(unit) + time.Second)
		if err := targets[2].Fence(proto.WithCapability(ctx, capAt(first)), dst); err != nil {
			t.Fatal(err)
		}
		if err := rebuild(first); err != nil {
			t.Fatalf("unit %d: rebuild: %v", unit, err)
		}
		checkObject(t, targets[2], dst, model(old))
		// A resync repairs it again after writes the source got: fenced
		// later, with the new bytes.
		repaired := pattern(2, len(old))
		if _, err := targets[1].Write(ctx, src, 0, repaired); err != nil {
			t.Fatal(err)
		}
		resync := proto.WithCapability(ctx, capAt(first.Add(time.Second)))
		if err := targets[2].Fence(resync, dst); err != nil {
			t.Fatal(err)
		}
		if _, err := targets[2].Write(resync, dst, 0, repaired); err != nil {
			t.Fatal(err)
		}
		// The first rebuild's request once more (delivered late), now
		// from a source changed since: refused before it empties the copy.
		if _, err := targets[1].Write(ctx, src, 0, pattern(3, len(old))); err != nil {
			t.Fatal(err)
		}
		if err := rebuild(first); !errors.Is(err, ErrFenced) || !errors.Is(err, syscall.EACCES) {
			t.Fatalf("unit %d: late rebuild: %v, want ErrFenced/EACCES", unit, err)
		}
		checkObject(t, targets[2], dst, model(repaired))
		// Unfenced parts of the request (no start: a later range) are
		// refused too.
		r := proto.RebuildRequest{Target: 2, Obj: dst, Off: 0, Len: testUnit, Size: size, Unit: unit,
			Fence: first.UnixNano(), Sources: []proto.RebuildSource{{Target: 1, Slot: 0}}}
		if _, err := s.RebuildObject(ctx, r); !errors.Is(err, ErrFenced) {
			t.Fatalf("unit %d: late rebuild range: %v, want ErrFenced", unit, err)
		}
		checkObject(t, targets[2], dst, model(repaired))
		// A rebuild fenced after the resync passes.
		if err := rebuild(first.Add(2 * time.Second)); err != nil {
			t.Fatalf("unit %d: later rebuild: %v", unit, err)
		}
		checkObject(t, targets[2], dst, model(pattern(3, len(old))))
	}
}

// TestRebuildSourceFailsChangesNothing: a rebuild whose sources cannot be
// read leaves the object as it was, also with RebuildStart (which empties
// the object only once the range is read): a repair that fails at once
// (its server cannot reach the source) never spoils a copy that a resync
// has just written.
func TestRebuildSourceFailsChangesNothing(t *testing.T) {
	s, tg := serveMem(t, nil, 1)
	s.SetPeers(failingPeers{})
	dst := proto.ObjectID{Ino: 4, Gen: 2, Stripe: 1}
	old := pattern(5, 3*testUnit/2)
	if _, err := tg.Write(ctx, dst, 0, old); err != nil {
		t.Fatal(err)
	}
	for _, unit := range []uint64{0, testUnit} {
		r := proto.RebuildRequest{Target: 1, Obj: dst, Len: 2 * testUnit, Size: 2 * testUnit, Unit: unit,
			Flags: proto.RebuildStart | proto.RebuildFinish, Sources: []proto.RebuildSource{{Target: 7, Slot: 0}}}
		if _, err := s.RebuildObject(ctx, r); err == nil {
			t.Fatalf("unit %d: rebuild from an unreadable source succeeded", unit)
		}
		checkObject(t, tg, dst, model(old))
	}
}
