package client

import (
	"bytes"
	"context"
	"testing"
	"unsafe"

	"github.com/weft-fs/weft/internal/fake"
	"github.com/weft-fs/weft/proto"
)

// TestReadAheadInterleaved: several handles reading one file in
// interleaved, strided records (ior-hard's read pattern) share the
// prefetched chunks and do not make each other fetch them again, and a
// random reader does not trigger read-ahead.
func TestReadAheadInterleaved(t *testing.T) {
	const (
		ss      = 64 << 10
		units   = 64
		record  = 47008
		readers = 4
	)
	e := newEnv(t, ss, 4, Config{})
	ctx := context.Background()
	f, a := e.create(t, "f")
	data := make([]byte, units*ss)
	for i := range data {
		data[i] = byte(i*7 + i>>12)
	}
	mustWrite(t, f, data, 0)
	if err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	hs := make([]*File, readers)
	for r := range hs {
		h, _, err := e.c.Open(ctx, a.Ino, proto.AccessReadWrite)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Release(ctx)
		hs[r] = h
	}
	before := e.store.Calls(fake.OpRead)
	for s := 0; ; s++ {
		done := false
		for r, h := range hs {
			off := (s*readers + r) * record
			if off >= len(data) {
				done = true
				break
			}
			n := min(record, len(data)-off)
			if got := mustRead(t, h, uint64(off), n); !bytes.Equal(got, data[off:off+n]) {
				t.Fatalf("reader %d record %d differs", r, s)
			}
		}
		if done {
			break
		}
	}
	// Each stripe unit is one chunk: fetched about once, not once per
	// reader or per record.
	if calls := e.store.Calls(fake.OpRead) - before; calls > units+units/4 {
		t.Fatalf("%d storage reads for %d stripe units read by %d interleaved readers", calls, units, readers)
	}

	// A random reader: no read-ahead (one storage read per read).
	g, _, err := e.c.Open(ctx, a.Ino, proto.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Release(ctx)
	before = e.store.Calls(fake.OpRead)
	offs := []int{37, 5, 60, 12, 44, 3, 29, 51, 18, 8}
	for _, u := range offs {
		off := u*ss + 4096
		if got := mustRead(t, g, uint64(off), 4096); !bytes.Equal(got, data[off:off+4096]) {
			t.Fatalf("random read at %d differs", off)
		}
	}
	if calls := e.store.Calls(fake.OpRead) - before; calls != len(offs) {
		t.Fatalf("%d storage reads for %d random reads", calls, len(offs))
	}
}

// TestReadBufsHoldsChunks: ReadBufs serves sequential reads from read-ahead
// chunks without copying; a chunk's memory stays out of the budget while a
// caller holds it, even after a write dropped the chunk, and is given back
// once every holder released it. The bytes held never change.
func TestReadBufsHoldsChunks(t *testing.T) {
	const ss = 64 << 10
	e := newEnv(t, ss, 2, Config{})
	ctx := context.Background()
	f, _ := e.create(t, "f")
	data := make([]byte, 16*ss)
	for i := range data {
		data[i] = byte(i*13 + i>>10)
	}
	mustWrite(t, f, data, 0)
	if err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var held []func()
	var heldBufs [][]byte
	chunkServed := false
	p := make([]byte, 48<<10)
	for off := 0; off < len(data); off += len(p) {
		bufs, release, err := f.ReadBufs(ctx, p, uint64(off))
		if err != nil {
			t.Fatal(err)
		}
		var got []byte
		for _, b := range bufs {
			if len(b) > 0 && !within(b, p) {
				chunkServed = true
			}
			got = append(got, b...)
		}
		if !bytes.Equal(got, data[off:min(off+len(p), len(data))]) {
			t.Fatalf("ReadBufs at %d: wrong bytes", off)
		}
		held = append(held, release)
		heldBufs = append(heldBufs, bufs...)
		p = make([]byte, len(p)) // the held slices may point into the old p
	}
	if !chunkServed {
		t.Fatal("no read was served from a read-ahead chunk")
	}
	// A write drops every chunk; those held must not be recycled.
	mustWrite(t, f, make([]byte, len(data)), 0)
	if err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var got []byte
	for _, b := range heldBufs {
		got = append(got, b...)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("held slices changed after a write")
	}
	e.c.budget.mu.Lock()
	used := e.c.budget.used
	e.c.budget.mu.Unlock()
	if used == 0 {
		t.Fatal("budget already given back while chunks are held")
	}
	for _, r := range held {
		r()
	}
	// A chunk holds its budget until it is both dropped and fetched: a
	// read-ahead fetch still running (a busy machine) gives it back when
	// it ends.
	waitUntil(t, "the budget given back after every release", func() bool {
		e.c.budget.mu.Lock()
		defer e.c.budget.mu.Unlock()
		return e.c.budget.used == 0
	})
}

// within reports whether b lies in p's memory.
func within(b, p []byte) bool {
	bs, ps := uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(unsafe.Pointer(unsafe.SliceData(p)))
	return bs >= ps && bs < ps+uintptr(cap(p))
}
