package client

import (
	"bytes"
	"context"
	"testing"

	"github.com/weft-fs/weft/internal/fake"
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
		h, _, err := e.c.Open(ctx, a.Ino)
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
	g, _, err := e.c.Open(ctx, a.Ino)
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
