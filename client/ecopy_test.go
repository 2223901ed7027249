package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/weft-fs/weft/internal/testutil"
	"syscall"
	"testing"

	"github.com/weft-fs/weft/proto"
)

// TestECCopyRange copies between two EC 2+1 files (rows of 128 KiB):
// whole rows go shard by shard on the storage server (no data through the
// client), partial rows at the ends through the client, a source row whose
// shards disagree in version through the client; ranges whose rows do not
// line up, or files of another geometry, are EOPNOTSUPP. The destination
// then reads like a model with every target up and with each one down:
// every copied row decodes, its shards agree in version.
func TestECCopyRange(t *testing.T) {
	e := newMirrorEnv(t)
	c := patientClient(t, e, nil)
	ctx := context.Background()
	const rb = 128 << 10
	src, sa := createWith(t, c, "src", ec21)
	dst, da := createWith(t, c, "dst", ec21)
	srcData := make([]byte, 8*rb+1000)
	for i := range srcData {
		srcData[i] = byte(i*7 + i>>11)
	}
	model := make([]byte, 300<<10)
	for i := range model {
		model[i] = byte(i*5 + 3)
	}
	for _, w := range []struct {
		f *File
		p []byte
	}{{src, srcData}, {dst, model}} {
		if _, err := w.f.Write(ctx, w.p, 0); err != nil {
			t.Fatal(err)
		}
		if err := w.f.Fsync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	apply := func(srcOff, dstOff, n uint64) {
		n = min(n, uint64(len(srcData))-srcOff)
		if end := int(dstOff + n); end > len(model) {
			model = append(model, make([]byte, end-len(model))...)
		}
		copy(model[dstOff:], srcData[srcOff:srcOff+n])
	}
	type counts struct{ read, written, copies int64 }
	now := func() counts {
		return counts{e.storage.readBytes.Load(), e.storage.writeBytes.Load(), e.storage.copyRows.Load()}
	}
	copyRange := func(srcOff, dstOff, n, want uint64) counts {
		t.Helper()
		before := now()
		got, err := c.CopyRange(ctx, src, srcOff, dst, dstOff, n)
		if err != nil || got != want {
			t.Fatalf("copy %d+%d to %d: %d, %v; want %d", srcOff, n, dstOff, got, err, want)
		}
		apply(srcOff, dstOff, got)
		after := now()
		return counts{after.read - before.read, after.written - before.written, after.copies - before.copies}
	}

	// Whole rows, into a destination that grows: on the server only.
	if d := copyRange(2*rb, 2*rb+rb, 3*rb, 3*rb); d.read != 0 || d.written != 0 || d.copies != 3*3 {
		t.Errorf("3 whole rows: %+v, want 9 shard copies and no data through the client", d)
	}
	// Rows that line up, with a partial row at either end.
	if d := copyRange(rb+5000, 5000, 3*rb, 3*rb); d.copies != 2*3 || d.written == 0 {
		t.Errorf("head, 2 rows, tail: %+v, want 6 shard copies and the ends through the client", d)
	}
	// Into the source's end (a partial last row), past the destination's.
	if d := copyRange(6*rb, 10*rb, 1<<30, 2*rb+1000); d.copies != 2*3 {
		t.Errorf("to the source's end: %+v, want 6 shard copies", d)
	}
	// Rows that do not line up, no whole row, another geometry: the kernel's.
	for _, bad := range [][3]uint64{{1, 2, 4 * rb}, {0, 0, rb - 1}, {rb + 1, 1, rb}} {
		if _, err := c.CopyRange(ctx, src, bad[0], dst, bad[1], bad[2]); !errors.Is(err, syscall.EOPNOTSUPP) {
			t.Errorf("copy %d+%d to %d: %v, want EOPNOTSUPP", bad[0], bad[2], bad[1], err)
		}
	}
	wide := ec21
	wide.StripeSize = 2 * ec21.StripeSize
	other, _ := createWith(t, c, "other", wide)
	if _, err := c.CopyRange(ctx, src, 0, other, 0, 4*rb); !errors.Is(err, syscall.EOPNOTSUPP) {
		t.Errorf("copy to another geometry: %v, want EOPNOTSUPP", err)
	}
	other.Release(ctx)

	// A source row whose parity holds another version than its data (a
	// write that died between its shards): copied through the client,
	// which reads the data and encodes the parity anew.
	rv := e.storage.StorageService.(proto.RowVersioner)
	par := sa.Layout.Slot(0, 2)
	if _, err := rv.WriteRow(ctx, sa.Layout.Targets[par], proto.ObjectID{Ino: sa.Ino, Stripe: uint32(par), Gen: sa.Gen},
		proto.RowWrite{Off: 0, Unit: ec21.StripeSize, Tag: 12345}); err != nil {
		t.Fatal(err)
	}
	if d := copyRange(0, 0, rb, rb); d.copies != 0 || d.written < rb {
		t.Errorf("a row of mixed versions: %+v, want it copied through the client", d)
	}

	if err := dst.Fsync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, e.client(t), da.Ino, len(model)); !bytes.Equal(got, model) {
		t.Fatalf("destination: %d bytes, want %d: %s", len(got), len(model), diffAt(got, model))
	}
	for _, tg := range da.Layout.Targets {
		e.storage.set(tg, "down")
		if got := readAll(t, e.client(t), da.Ino, len(model)); !bytes.Equal(got, model) {
			t.Fatalf("destination with target %d down: %s", tg, diffAt(got, model))
		}
		e.storage.set(tg, "")
	}
	src.Release(ctx)
	dst.Release(ctx)
}

// TestECCopyRowShardFails: a destination shard whose copy fails on its
// server is marked stale, as a failed write's is, and the copy succeeds;
// the row reads right from the other two shards, and after resync the
// rebuilt shard joins the row (it decodes with another shard down).
func TestECCopyRowShardFails(t *testing.T) {
	e := newMirrorEnv(t)
	c := patientClient(t, e, nil)
	ctx := context.Background()
	const rb = 128 << 10
	src, _ := createWith(t, c, "src", ec21)
	dst, da := createWith(t, c, "dst", ec21)
	data := make([]byte, 4*rb)
	for i := range data {
		data[i] = byte(i*11 + i>>9)
	}
	if _, err := src.Write(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	if err := src.Fsync(ctx); err != nil {
		t.Fatal(err)
	}
	bad := da.Layout.Targets[1] // data shard 1
	e.storage.set(bad, "copyfail")
	if n, err := c.CopyRange(ctx, src, 0, dst, 0, 4*rb); err != nil || n != 4*rb {
		t.Fatalf("copy with a shard failing: %d, %v", n, err)
	}
	e.storage.set(bad, "")
	if err := dst.Release(ctx); err != nil {
		t.Fatal(err)
	}
	src.Release(ctx)
	if a, _ := e.meta.GetAttr(ctx, da.Ino); !a.Layout.IsStale(1) || len(a.Layout.Stale) != 1 {
		t.Fatalf("after a failed shard copy: layout %v, want slot 1 stale", a.Layout)
	}
	if got := readAll(t, e.client(t), da.Ino, len(data)); !bytes.Equal(got, data) {
		t.Fatalf("with shard 1 stale: %s", diffAt(got, data))
	}
	resyncEventually(t, e.client(t), da.Ino, 1)
	e.storage.set(da.Layout.Targets[0], "down") // shard 0 from the rebuilt shard 1 and parity
	if got := readAll(t, e.client(t), da.Ino, len(data)); !bytes.Equal(got, data) {
		t.Fatalf("after resync, shard 0 down: %s", diffAt(got, data))
	}
	e.storage.set(da.Layout.Targets[0], "")
}

// TestECCopyRandom mixes random writes and random copies whose rows line
// up (whole rows on the server, partial ends through the client) between
// and within two EC 2+1 files, against an in-memory model; both files then
// read like the model with every target up and with each one down.
func TestECCopyRandom(t *testing.T) {
	for seed := range uint64(3) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { ecCopyRandom(t, seed) })
	}
}

func ecCopyRandom(t *testing.T, seed uint64) {
	e := newMirrorEnv(t)
	log, logs := testutil.NewLogger()
	c := patientClient(t, e, log)
	ctx := context.Background()
	const rb = 128 << 10
	var files [2]*File
	var attrs [2]proto.Attr
	models := [2][]byte{}
	for i := range files {
		files[i], attrs[i] = createWith(t, c, fmt.Sprint("f", i), ec21)
	}
	rng := rand.New(rand.NewPCG(seed, 77))
	for step := range 60 {
		i := rng.IntN(2)
		if step%3 == 0 {
			off, n := rng.IntN(6*rb), 1+rng.IntN(2*rb)
			p := make([]byte, n)
			for j := range p {
				p[j] = byte(rng.Uint32())
			}
			if _, err := files[i].Write(ctx, p, uint64(off)); err != nil {
				t.Fatal(err)
			}
			if end := off + n; end > len(models[i]) {
				models[i] = append(models[i], make([]byte, end-len(models[i]))...)
			}
			copy(models[i][off:], p)
			continue
		}
		j := rng.IntN(2)
		if len(models[i]) == 0 {
			continue
		}
		in := rng.IntN(rb) // how far into a row both ranges start
		so := rng.IntN(len(models[i])/rb+1)*rb + in
		do := rng.IntN(8)*rb + in
		n := rng.IntN(4 * rb)
		if i == j && so < do+n && do < so+n {
			continue // overlapping: EINVAL, as on Linux
		}
		want := uint64(max(0, min(n, len(models[i])-so)))
		got, err := c.CopyRange(ctx, files[i], uint64(so), files[j], uint64(do), uint64(n))
		if errors.Is(err, syscall.EOPNOTSUPP) {
			continue // no whole row in it: the kernel would copy
		}
		if err != nil || got != want {
			t.Fatalf("step %d: copy f%d %d+%d to f%d at %d: %d, %v; want %d", step, i, so, n, j, do, got, err, want)
		}
		if got > 0 {
			part := bytes.Clone(models[i][so : so+int(got)])
			if end := do + int(got); end > len(models[j]) {
				models[j] = append(models[j], make([]byte, end-len(models[j]))...)
			}
			copy(models[j][do:], part)
		}
	}
	for _, f := range files { // every write sent before a target goes down
		if err := f.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i := range files {
		if a, _ := e.meta.GetAttr(ctx, attrs[i].Ino); len(a.Layout.Stale) > 0 {
			t.Fatalf("f%d: slots %v marked stale with every target up; log:\n%s", i, a.Layout.Stale, logs)
		}
		if got := readAll(t, e.client(t), attrs[i].Ino, len(models[i])); !bytes.Equal(got, models[i]) {
			t.Fatalf("f%d: %s", i, diffAt(got, models[i]))
		}
		for _, tg := range attrs[i].Layout.Targets {
			e.storage.set(tg, "down")
			if got := readAll(t, e.client(t), attrs[i].Ino, len(models[i])); !bytes.Equal(got, models[i]) {
				t.Fatalf("f%d with target %d down: %s", i, tg, diffAt(got, models[i]))
			}
			e.storage.set(tg, "")
		}
	}
	if e.storage.copyRows.Load() == 0 {
		t.Fatal("no row was copied on the server")
	}
}

// patientClient is a client that waits a minute for a slow shard before
// giving up on it and marking it stale: these tests take no target down
// while they write, and a loaded machine must not make them mark shards
// stale (MirrorGrace of e.client is 200 ms).
func patientClient(t *testing.T, e *mirrorEnv, log *slog.Logger) *Client {
	c := NewWithServices(e.meta, e.storage, Config{MirrorGrace: time.Minute, Logger: log})
	t.Cleanup(func() { c.Close() })
	return c
}
