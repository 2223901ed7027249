package client

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weft-fs/weft/internal/testutil"
	"github.com/weft-fs/weft/layout"
	"github.com/weft-fs/weft/proto"
)

var ec21 = layout.Layout{Kind: layout.EC, ECData: 2, ECParity: 1, StripeSize: 64 << 10, StripeCount: 1}

// TestECRandomWritesDegradedReads: random partial writes and truncates of
// an ec 2+1 file (rows of 128 KiB) read back like an in-memory model, with
// all shards up and with each one of them down (its data reconstructed
// from the other two), so the parity matches the data after every kind of
// update.
func TestECRandomWritesDegradedReads(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { ecRandom(t, seed) })
	}
}

func ecRandom(t *testing.T, seed uint64) {
	e := newMirrorEnv(t)
	log, logs := testutil.NewLogger()
	c := NewWithServices(e.meta, e.storage, Config{MirrorGrace: 200 * time.Millisecond, Logger: log})
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	f, a := createWith(t, c, "ec", ec21)
	if len(a.Layout.Targets) != 3 {
		t.Fatalf("layout %v", a.Layout)
	}
	rng := rand.New(rand.NewPCG(seed, 4))
	var model []byte
	for i := range 80 {
		if i%5 == 4 {
			if err := f.Fsync(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if i%7 == 6 {
			size := uint64(rng.IntN(500 << 10))
			if _, err := f.Truncate(ctx, size); err != nil {
				t.Fatal(err)
			}
			if size < uint64(len(model)) {
				model = model[:size]
			} else {
				model = append(model, make([]byte, size-uint64(len(model)))...)
			}
			continue
		}
		off := rng.IntN(450 << 10)
		n := 1 + rng.IntN(100<<10)
		p := make([]byte, n)
		for j := range p {
			p[j] = byte(rng.Uint32())
		}
		if _, err := f.Write(ctx, p, uint64(off)); err != nil {
			t.Fatal(err)
		}
		if off+n > len(model) {
			model = append(model, make([]byte, off+n-len(model))...)
		}
		copy(model[off:], p)
	}
	if err := f.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// With every target up, nothing was ever reconstructed or found short.
	if strings.Contains(logs.String(), "level=WARN") || strings.Contains(logs.String(), "level=ERROR") {
		t.Fatalf("warnings with every target up:\n%s", logs)
	}
	if got := readAll(t, e.client(t), a.Ino, len(model)); !bytes.Equal(got, model) {
		t.Fatalf("all shards up: %d bytes, want %d, differ", len(got), len(model))
	}
	for _, tg := range a.Layout.Targets {
		e.storage.set(tg, "down")
		if got := readAll(t, e.client(t), a.Ino, len(model)); !bytes.Equal(got, model) {
			for i := range got {
				if got[i] != model[i] {
					t.Fatalf("target %d down: differ at %d (of %d), got %x want %x", tg, i, len(model), got[i:i+8], model[i:i+8])
				}
			}
		}
		e.storage.set(tg, "")
	}
}

// TestECDegradedWriteAndResync: with one shard's target down, writes
// succeed and mark that shard stale; reads reconstruct; after resync the
// rebuilt shard serves reads with another target down.
func TestECDegradedWriteAndResync(t *testing.T) {
	e := newMirrorEnv(t)
	c := e.client(t)
	ctx := context.Background()
	f, a := createWith(t, c, "ec", ec21)
	want := make([]byte, 333<<10)
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range want {
		want[i] = byte(rng.Uint32())
	}
	e.storage.set(a.Layout.Targets[0], "down")
	writeClose(t, f, want, 0)
	got, _ := e.meta.GetAttr(ctx, a.Ino)
	if !got.Layout.IsStale(0) || len(got.Layout.Stale) != 1 {
		t.Fatalf("stale after a write with shard 0 down: %v", got.Layout)
	}
	if b := readAll(t, e.client(t), a.Ino, len(want)); !bytes.Equal(b, want) {
		t.Fatal("degraded read differs")
	}
	e.storage.set(a.Layout.Targets[0], "")
	resyncEventually(t, e.client(t), a.Ino, 1)
	e.storage.set(a.Layout.Targets[2], "down") // the parity: data from both data shards
	if b := readAll(t, e.client(t), a.Ino, len(want)); !bytes.Equal(b, want) {
		t.Fatal("read after resync, parity down, differs")
	}
	e.storage.set(a.Layout.Targets[2], "")
	e.storage.set(a.Layout.Targets[1], "down") // shard 1 from the rebuilt shard 0 and parity
	if b := readAll(t, e.client(t), a.Ino, len(want)); !bytes.Equal(b, want) {
		t.Fatal("read after resync, shard 1 down, differs")
	}
	// Two shards down of a 2+1 file: the write cannot be protected and
	// fails; nothing is marked that would leave the stripe unreadable.
	e.storage.set(a.Layout.Targets[2], "down")
	f2, _, err := c.Open(ctx, a.Ino, proto.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	f2.Write(ctx, []byte("x"), 0)
	if err := f2.Fsync(ctx); err == nil {
		t.Fatal("a write with 2 of 3 shards down succeeded")
	}
	f2.Release(ctx)
	got, _ = e.meta.GetAttr(ctx, a.Ino)
	if got.Layout.ValidateFile() != nil {
		t.Fatalf("layout left invalid: %v", got.Layout)
	}
	_ = syscall.EIO
}

// A truncate by path (no handle open on this client) of an EC file cuts
// the shards and recomputes the tail row's parity like one through a
// handle.
func TestECTruncateByPath(t *testing.T) {
	e := newMirrorEnv(t)
	c := e.client(t)
	ctx := context.Background()
	f, a := createWith(t, c, "ec", ec21)
	want := make([]byte, 300<<10)
	for i := range want {
		want[i] = byte(i*13 + 1)
	}
	writeClose(t, f, want, 0)
	if _, err := e.client(t).SetAttr(ctx, a.Ino, proto.SetAttrIn{Valid: proto.SetSize, Size: 100_000}); err != nil {
		t.Fatal(err)
	}
	want = want[:100_000]
	for _, tg := range a.Layout.Targets {
		e.storage.set(tg, "down")
		if got := readAll(t, e.client(t), a.Ino, len(want)); !bytes.Equal(got, want) {
			t.Fatalf("after a truncate by path, target %d down: %d bytes, differ", tg, len(got))
		}
		e.storage.set(tg, "")
	}
}

// A sequential writer of an EC file sends whole rows, encoded without
// reading anything back.
func TestECFullRowsReadNothing(t *testing.T) {
	e := newMirrorEnv(t)
	c := e.client(t)
	ctx := context.Background()
	l := ec21
	l.StripeSize = 1 << 20 // rows of 2 MiB
	f, a := createWith(t, c, "ec", l)
	want := make([]byte, 8<<20)
	for i := range want {
		want[i] = byte(i*31 + i>>12)
	}
	// One row per write: a write-behind flush that a slow machine lets
	// the timer start between two writes then still sends whole rows.
	for off := 0; off < len(want); off += 2 << 20 {
		if _, err := f.Write(ctx, want[off:off+2<<20], uint64(off)); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := e.storage.reads.Load(); n != 0 {
		t.Fatalf("%d storage reads while writing whole rows", n)
	}
	e.storage.set(a.Layout.Targets[0], "down")
	if got := readAll(t, e.client(t), a.Ino, len(want)); !bytes.Equal(got, want) {
		t.Fatal("degraded read of the rows differs")
	}
}

// TestECDegradedReadReadsEachRowOnce: with a data shard's server down, a
// read of whole rows reads each row's ECData remaining shards once and
// decodes the lost one (ecReadDegradedRow), rather than reconstructing
// the lost extents from every other shard beside reading the healthy
// ones; reads of parts of rows decode the same bytes.
func TestECDegradedReadReadsEachRowOnce(t *testing.T) {
	e := newMirrorEnv(t)
	c := e.client(t)
	ctx := context.Background()
	f, a := createWith(t, c, "ec", ec21)
	rb := int(ec21.RowBytes())
	want := make([]byte, 16*rb)
	for i := range want {
		want[i] = byte(i*29 + i>>11)
	}
	writeClose(t, f, want, 0)
	e.storage.set(a.Layout.Targets[0], "down") // data shard 0
	r := e.client(t)
	rf, _, err := r.Open(ctx, a.Ino, proto.AccessRead)
	if err != nil {
		t.Fatal(err)
	}
	defer rf.Release(ctx)
	read := func(off, n int) []byte {
		t.Helper()
		buf := make([]byte, n)
		got, err := rf.Read(ctx, buf, uint64(off))
		if err != nil || got != n {
			t.Fatalf("read [%d,+%d): %d, %v", off, n, got, err)
		}
		return buf
	}
	// The first read finds the server down (and reconstructs as before);
	// from then on its target is suspect.
	if got := read(0, 100); !bytes.Equal(got, want[:100]) {
		t.Fatal("first degraded read differs")
	}
	e.storage.readBytes.Store(0)
	if got := read(rb, len(want)-rb); !bytes.Equal(got, want[rb:]) {
		t.Fatal("degraded read of whole rows differs")
	}
	if n := e.storage.readBytes.Load(); n != int64(len(want)-rb) {
		t.Errorf("degraded read of %d bytes of whole rows read %d bytes from storage, want as many", len(want)-rb, n)
	}
	for _, span := range [][2]int{{rb + 100, 1000}, {3*rb - 7, rb + 20}, {5*rb + rb/2, rb / 2}, {7 * rb, rb / 2}} {
		if got := read(span[0], span[1]); !bytes.Equal(got, want[span[0]:span[0]+span[1]]) {
			t.Errorf("degraded read [%d,+%d) differs", span[0], span[1])
		}
	}
}
