package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/weft-fs/weft/internal/testutil"
	"github.com/weft-fs/weft/layout"
	"github.com/weft-fs/weft/proto"
)

// TestSpaceCallsProtected: random writes, truncates and fallocate calls
// (every mode) on a mirror 2 file and an ec 2+1 file read back like an
// in-memory model, SEEK_DATA/SEEK_HOLE answer consistently with it, and
// afterwards the file reads the same with each target down (so every copy
// took every call, and EC parity matches the data). Then, with one target
// down, a punch still succeeds and marks that object stale.
func TestSpaceCallsProtected(t *testing.T) {
	for _, tc := range []struct {
		name string
		l    layout.Layout
	}{
		{"mirror", layout.Layout{Kind: layout.Mirror, Mirror: 2, StripeSize: 64 << 10, StripeCount: 1}},
		{"ec", ec21},
	} {
		for seed := range uint64(2) {
			t.Run(fmt.Sprintf("%s/%d", tc.name, seed), func(t *testing.T) { spaceModel(t, tc.l, seed) })
		}
	}
}

func spaceModel(t *testing.T, l layout.Layout, seed uint64) {
	e := newMirrorEnv(t)
	log, logs := testutil.NewLogger()
	c := NewWithServices(e.meta, e.storage, Config{MirrorGrace: 200 * time.Millisecond, Logger: log})
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	f, a := createWith(t, c, "f", l)
	rng := rand.New(rand.NewPCG(seed, 10))
	var model []byte
	grow := func(end int) {
		if end > len(model) {
			model = append(model, make([]byte, end-len(model))...)
		}
	}
	modes := []uint32{0, unix.FALLOC_FL_KEEP_SIZE, unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE,
		unix.FALLOC_FL_ZERO_RANGE, unix.FALLOC_FL_ZERO_RANGE | unix.FALLOC_FL_KEEP_SIZE}
	for i := range 60 {
		off := rng.IntN(600 << 10)
		n := 1 + rng.IntN(300<<10)
		if rng.IntN(3) == 0 {
			off -= off % (64 << 10) // whole units and rows, too
			n += (64 << 10) - n%(64<<10)
		}
		switch r := rng.IntN(10); {
		case r < 4:
			p := make([]byte, n)
			for j := range p {
				p[j] = byte(rng.Uint32() | 1)
			}
			if _, err := f.Write(ctx, p, uint64(off)); err != nil {
				t.Fatal(err)
			}
			grow(off + n)
			copy(model[off:], p)
		case r == 4:
			size := rng.IntN(700 << 10)
			if _, err := f.Truncate(ctx, uint64(size)); err != nil {
				t.Fatal(err)
			}
			grow(size)
			model = model[:size]
		default:
			mode := modes[rng.IntN(len(modes))]
			if err := f.Allocate(ctx, uint64(off), uint64(n), mode); err != nil {
				t.Fatalf("op %d: fallocate %#x [%d,+%d): %v", i, mode, off, n, err)
			}
			if mode&unix.FALLOC_FL_KEEP_SIZE == 0 {
				grow(off + n)
			}
			if mode&(unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_ZERO_RANGE) != 0 && off < len(model) {
				clear(model[off:min(off+n, len(model))])
			}
		}
		if testing.Verbose() {
			t.Logf("op %d: size %d off %d n %d", i, len(model), off, n)
		}
		if i%6 == 5 {
			if err := f.Fsync(ctx); err != nil {
				t.Fatal(err)
			}
		}
		buf := make([]byte, len(model)+10)
		got, err := f.Read(ctx, buf, 0)
		if err != nil || !bytes.Equal(buf[:got], model) {
			t.Fatalf("op %d: read %d bytes (%v), want %d: %s", i, got, err, len(model), diffAt(buf[:got], model))
		}
		checkSeek(t, ctx, f, model)
	}
	if err := f.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), "level=WARN") || strings.Contains(logs.String(), "level=ERROR") {
		t.Fatalf("warnings with every target up:\n%s", logs)
	}
	for _, tg := range a.Layout.Targets {
		e.storage.set(tg, "down")
		if got := readAll(t, e.client(t), a.Ino, len(model)); !bytes.Equal(got, model) {
			t.Fatalf("target %d down: %s", tg, diffAt(got, model))
		}
		e.storage.set(tg, "")
	}

	// One target down: a punch of a whole row and a partial one succeeds
	// on the others and marks its object stale; the bytes stay right.
	f, _, err := c.Open(ctx, a.Ino, proto.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Release(ctx)
	down := a.Layout.Targets[1]
	e.storage.set(down, "down")
	defer e.storage.set(down, "")
	if err := f.Allocate(ctx, 10<<10, 250<<10, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE); err != nil {
		t.Fatalf("punch with target %d down: %v", down, err)
	}
	clear(model[min(10<<10, len(model)):min(260<<10, len(model))])
	if !f.state().currentLayout(layout.Layout{}).IsStale(1) {
		t.Fatalf("slot 1 on the down target is not stale: %v", f.state().currentLayout(layout.Layout{}))
	}
	buf := make([]byte, len(model)+10)
	got, err := f.Read(ctx, buf, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf[:got], model) {
		t.Fatalf("after a degraded punch: %s", diffAt(buf[:got], model))
	}
}

// checkSeek checks SEEK_DATA and SEEK_HOLE from offsets across the file
// against what model allows: what a SEEK_DATA skips reads as zeros, a
// hole found before the end reads as zeros, and past the end both fail
// with ENXIO.
func checkSeek(t *testing.T, ctx context.Context, f *File, model []byte) {
	t.Helper()
	size := uint64(len(model))
	for off := uint64(0); off <= size; off += 37<<10 + 11 {
		d, derr := f.Lseek(ctx, off, unix.SEEK_DATA)
		h, herr := f.Lseek(ctx, off, unix.SEEK_HOLE)
		if off >= size {
			if !errors.Is(derr, syscall.ENXIO) || !errors.Is(herr, syscall.ENXIO) {
				t.Fatalf("lseek at the end %d: %v, %v, want ENXIO", off, derr, herr)
			}
			continue
		}
		if herr != nil || h < off || h > size {
			t.Fatalf("SEEK_HOLE(%d) of %d bytes = %d, %v", off, size, h, herr)
		}
		if h < size && model[h] != 0 {
			t.Fatalf("SEEK_HOLE(%d) = %d, where the file holds %#x", off, h, model[h])
		}
		end := size
		if derr == nil {
			if d < off || d >= size {
				t.Fatalf("SEEK_DATA(%d) of %d bytes = %d", off, size, d)
			}
			end = d
		} else if !errors.Is(derr, syscall.ENXIO) {
			t.Fatalf("SEEK_DATA(%d): %v", off, derr)
		}
		if i := bytes.IndexFunc(model[off:end], func(r rune) bool { return r != 0 }); i >= 0 {
			t.Fatalf("SEEK_DATA(%d) = %d (%v) skips data at %d", off, d, derr, off+uint64(i))
		}
	}
}

func diffAt(got, want []byte) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("%d and %d bytes differ first at %d: %#x, want %#x", len(got), len(want), i, got[i], want[i])
		}
	}
	return fmt.Sprintf("%d bytes, want %d", len(got), len(want))
}
