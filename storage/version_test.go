package storage

import (
	"bytes"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weft-fs/weft/capability"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/storage/vfs"
)

const testUnit = 64 << 10

func readRow(t *testing.T, tg *Target, obj proto.ObjectID, off uint64, n int) ([]byte, proto.RowVersion) {
	t.Helper()
	p := make([]byte, n)
	got, v, err := tg.ReadRow(ctx, obj, off, testUnit, p)
	if err != nil {
		t.Fatalf("read row at %d: %v", off, err)
	}
	return p[:got], v
}

func TestRowVersionConditionalWrite(t *testing.T) {
	tg := openMem(t, newMemFS(t), TargetOptions{})
	obj := proto.ObjectID{Ino: 7, Gen: 1}
	a := pattern(1, 5000)
	if _, err := tg.WriteRow(ctx, obj, proto.RowWrite{Off: 100, Unit: testUnit, Data: a, Cond: true, Tag: 11}); err != nil {
		t.Fatal(err)
	}
	got, v := readRow(t, tg, obj, 100, len(a))
	if !bytes.Equal(got, a) || v != (proto.RowVersion{Tag: 11}) {
		t.Fatalf("read %d bytes version %+v, want the data and tag 11", len(got), v)
	}
	// A writer that read version 0 before the first write conflicts and
	// changes nothing.
	_, err := tg.WriteRow(ctx, obj, proto.RowWrite{Off: 100, Unit: testUnit, Data: pattern(2, 10), Cond: true, Tag: 12})
	if !errors.Is(err, ErrConflict) || !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("stale conditional write: %v, want ErrConflict/EAGAIN", err)
	}
	if got, v := readRow(t, tg, obj, 100, len(a)); !bytes.Equal(got, a) || v.Tag != 11 {
		t.Fatalf("a refused write changed the unit: version %+v", v)
	}
	// Only the version: a bump.
	if _, err := tg.WriteRow(ctx, obj, proto.RowWrite{Off: 0, Unit: testUnit, Cond: true, Expect: proto.RowVersion{Tag: 11}, Tag: 13}); err != nil {
		t.Fatal(err)
	}
	if _, v := readRow(t, tg, obj, 0, 1); v != (proto.RowVersion{Tag: 13}) {
		t.Fatalf("after a bump: %+v", v)
	}
	// Another unit is independent.
	if _, v := readRow(t, tg, obj, testUnit, 1); v != (proto.RowVersion{}) {
		t.Fatalf("unit 1: %+v, want 0", v)
	}
	// A plain write changes the tags of the units it touches, so no
	// conditional writer can match what it read before.
	if _, err := tg.Write(ctx, obj, testUnit-1, []byte{1, 2}); err != nil {
		t.Fatal(err)
	}
	_, v0 := readRow(t, tg, obj, 0, 1)
	_, v1 := readRow(t, tg, obj, testUnit, 1)
	if v0.Tag == 13 || v0.Tag == 0 || v1.Tag == 0 || v0.Dirty || v1.Dirty {
		t.Fatalf("after a plain write: unit 0 %+v, unit 1 %+v: want fresh clean tags", v0, v1)
	}
	// Bad requests: another unit size, a range over two units.
	for _, w := range []proto.RowWrite{
		{Off: 0, Unit: 2 * testUnit, Data: []byte{1}, Tag: 5},
		{Off: testUnit - 1, Unit: testUnit, Data: []byte{1, 2}, Tag: 5},
	} {
		if _, err := tg.WriteRow(ctx, obj, w); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("write %+v: %v, want EINVAL", w, err)
		}
	}
}

// TestRowVersionCrash kills a versioned write after its version entry and
// before its data: the unit reads dirty (no reader may take its bytes for
// the tag's), a writer expecting the old version is refused, and one that
// read the dirty version may repair it.
func TestRowVersionCrash(t *testing.T) {
	mem := newMemFS(t)
	fs := vfs.NewFaulty(mem)
	tg := openMem(t, fs, TargetOptions{})
	obj := proto.ObjectID{Ino: 9, Gen: 2}
	old := pattern(1, testUnit)
	if _, err := tg.WriteRow(ctx, obj, proto.RowWrite{Unit: testUnit, Data: old, Tag: 21}); err != nil {
		t.Fatal(err)
	}
	// The data file's write fails, and everything after it (a kill).
	notMeta := func(p string) bool { return !strings.HasSuffix(p, ".crc") && !strings.HasSuffix(p, ".ver") }
	fs.Inject(vfs.Rule{Ops: vfs.OpWrite, Match: notMeta, Err: syscall.EIO, Times: 1})
	fs.Inject(vfs.Rule{Ops: vfs.OpWrite | vfs.OpTruncate, Err: syscall.EIO, After: 2}) // the version and CRC entries pass
	if _, err := tg.WriteRow(ctx, obj, proto.RowWrite{Off: 10, Unit: testUnit, Data: pattern(2, 3*BlockSize), Cond: true, Expect: proto.RowVersion{Tag: 21}, Tag: 22}); err == nil {
		t.Fatal("write succeeded through a crash")
	}
	tg.Close()
	fs.Reset()
	tg2 := openMem(t, mem, TargetOptions{})
	got, v := readRow(t, tg2, obj, 0, testUnit)
	if !bytes.Equal(got, old) {
		t.Fatal("old data unreadable after the crash")
	}
	if v != (proto.RowVersion{Tag: 22, Dirty: true}) {
		t.Fatalf("version after the crash %+v, want tag 22 dirty", v)
	}
	if _, err := tg2.WriteRow(ctx, obj, proto.RowWrite{Unit: testUnit, Data: []byte{1}, Cond: true, Expect: proto.RowVersion{Tag: 21}, Tag: 23}); !errors.Is(err, ErrConflict) {
		t.Fatalf("write expecting the version before the crash: %v, want a conflict", err)
	}
	if _, err := tg2.WriteRow(ctx, obj, proto.RowWrite{Unit: testUnit, Data: old, Cond: true, Expect: v, Tag: 24}); err != nil {
		t.Fatalf("repair expecting the dirty version: %v", err)
	}
	if _, v := readRow(t, tg2, obj, 0, 1); v != (proto.RowVersion{Tag: 24}) {
		t.Fatalf("after the repair: %+v", v)
	}
}

func TestRowVersionTruncate(t *testing.T) {
	tg := openMem(t, newMemFS(t), TargetOptions{})
	obj := proto.ObjectID{Ino: 3, Gen: 1}
	for u := uint64(0); u < 3; u++ {
		if _, err := tg.WriteRow(ctx, obj, proto.RowWrite{Off: u * testUnit, Unit: testUnit, Data: pattern(int(u), testUnit), Tag: 30 + u}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tg.Truncate(ctx, obj, testUnit+100); err != nil {
		t.Fatal(err)
	}
	if _, v := readRow(t, tg, obj, 0, 1); v != (proto.RowVersion{Tag: 30}) {
		t.Fatalf("unit 0 (untouched): %+v", v)
	}
	if _, v := readRow(t, tg, obj, testUnit, 1); v.Tag == 31 || v.Tag == 0 || v.Dirty {
		t.Fatalf("unit 1 (cut): %+v, want a fresh clean tag", v)
	}
	if _, v := readRow(t, tg, obj, 2*testUnit, 1); v != (proto.RowVersion{}) {
		t.Fatalf("unit 2 (gone): %+v, want 0", v)
	}
}

// capSigner returns a function that signs a read-write capability for an
// object's file issued at a given time, with a test key.
func capSigner(t *testing.T) func(obj proto.ObjectID, issued time.Time) []byte {
	key, err := capability.NewKey(0, bytes.Repeat([]byte{7}, capability.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	return func(obj proto.ObjectID, issued time.Time) []byte {
		b, err := key.Sign(capability.Capability{Ino: obj.Ino, Gen: obj.Gen, Rights: proto.AccessReadWrite, Issued: issued, Expiry: issued.Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
}

func TestFence(t *testing.T) {
	obj := proto.ObjectID{Ino: 5, Gen: 3}
	sign := capSigner(t)
	capAt := func(issued time.Time) []byte { return sign(obj, issued) }
	t0 := time.Unix(1_800_000_000, 0)
	before, repair, after := capAt(t0), capAt(t0.Add(time.Second)), capAt(t0.Add(2*time.Second))
	mem := newMemFS(t)
	tg := openMem(t, mem, TargetOptions{})
	if _, err := tg.Write(proto.WithCapability(ctx, before), obj, 0, pattern(1, 100)); err != nil {
		t.Fatal(err)
	}
	if err := tg.Fence(ctx, obj); err != nil {
		t.Fatalf("fence without a capability: %v, want nothing done", err)
	}
	if _, err := tg.Write(proto.WithCapability(ctx, before), obj, 0, pattern(1, 100)); err != nil {
		t.Fatalf("a fence without a capability fenced: %v", err)
	}
	if err := tg.Fence(proto.WithCapability(ctx, repair), obj); err != nil {
		t.Fatal(err)
	}
	repaired := pattern(2, 100)
	if _, err := tg.Write(proto.WithCapability(ctx, repair), obj, 0, repaired); err != nil {
		t.Fatal(err)
	}
	// The fence lasts across a restart.
	tg.Close()
	tg = openMem(t, mem, TargetOptions{})
	late := proto.WithCapability(ctx, before)
	if _, err := tg.Write(late, obj, 0, pattern(3, 100)); !errors.Is(err, ErrFenced) || !errors.Is(err, syscall.EACCES) {
		t.Fatalf("late write: %v, want ErrFenced/EACCES", err)
	}
	if err := tg.Truncate(late, obj, 10); !errors.Is(err, ErrFenced) {
		t.Fatalf("late truncate: %v, want ErrFenced", err)
	}
	if _, err := tg.WriteRow(late, obj, proto.RowWrite{Unit: testUnit, Data: []byte{1}, Tag: 9}); !errors.Is(err, ErrFenced) {
		t.Fatalf("late versioned write: %v, want ErrFenced", err)
	}
	checkObject(t, tg, obj, model(repaired))
	// An older fence does not move it back; newer writers and servers
	// (no capability) pass.
	if err := tg.Fence(late, obj); err != nil {
		t.Fatal(err)
	}
	if _, err := tg.Write(late, obj, 0, []byte{1}); !errors.Is(err, ErrFenced) {
		t.Fatalf("late write after an older fence: %v, want ErrFenced", err)
	}
	if _, err := tg.Write(proto.WithCapability(ctx, after), obj, 0, []byte{1}); err != nil {
		t.Fatal(err)
	}
	if _, err := tg.Write(ctx, obj, 1, []byte{2}); err != nil {
		t.Fatal(err)
	}
	// Remove takes the fence with the object.
	if err := tg.Remove(ctx, obj); err != nil {
		t.Fatal(err)
	}
	if _, err := tg.Write(late, obj, 0, []byte{1}); err != nil {
		t.Fatalf("write to a new object of the same name: %v", err)
	}
}

func FuzzDecodeVerHeader(f *testing.F) {
	f.Add(verHeader{Unit: 1 << 20, Fence: 5}.encode())
	f.Add([]byte("WFTV"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeVerHeader(b)
		if err != nil {
			return
		}
		if got, err := decodeVerHeader(h.encode()); err != nil || got != h {
			t.Fatalf("round trip of %+v: %+v, %v", h, got, err)
		}
	})
}
