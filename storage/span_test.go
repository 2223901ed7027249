package storage

import (
	"bytes"
	"errors"
	"syscall"
	"testing"

	"github.com/weft-fs/weft/proto"
)

// TestReadSpan: the span of whole blocks with their entries, cut at the
// object's end; EINVAL for a range that is not whole blocks; nothing for a
// missing object; writes and removes go on while a span is held (its
// reader checks the bytes), and the span's file stays readable until
// release.
func TestReadSpan(t *testing.T) {
	tg := openMem(t, newMemFS(t), TargetOptions{})
	obj := proto.ObjectID{Ino: 5}
	data := pattern(1, 2*BlockSize+100)
	if _, err := tg.Write(ctx, obj, 0, data); err != nil {
		t.Fatal(err)
	}
	sums := make([]byte, 8*4)
	f, off, n, release, err := tg.ReadSpan(ctx, obj, BlockSize, 3*BlockSize, sums)
	if err != nil || off != BlockSize || n != BlockSize+100 {
		t.Fatalf("span: off %d n %d %v", off, n, err)
	}
	got := make([]byte, n)
	if _, err := f.ReadAt(got, off); err != nil {
		t.Fatal(err)
	}
	es := make([]entry, 3)
	decodeEntries(sums, es)
	if es[0].Cur != blockCRC(data[BlockSize:2*BlockSize]) || es[1].Cur != blockCRC(data[2*BlockSize:]) || es[2] != (entry{}) {
		t.Fatalf("entries %+v", es)
	}
	if _, err := tg.Write(ctx, obj, BlockSize, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := tg.Remove(ctx, obj); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ReadAt(got, off); err != nil || got[0] != 'x' || !bytes.Equal(got[1:], data[BlockSize+1:]) {
		t.Fatalf("the span's file after a write and a remove: %v", err)
	}
	release()

	for _, bad := range []struct {
		off uint64
		n   int
	}{{1, BlockSize}, {0, 100}} {
		_, _, _, release, err := tg.ReadSpan(ctx, obj, bad.off, bad.n, sums)
		release()
		if !errors.Is(err, syscall.EINVAL) {
			t.Errorf("span of %d at %d: %v, want EINVAL", bad.n, bad.off, err)
		}
	}
	f, _, n, release, err = tg.ReadSpan(ctx, proto.ObjectID{Ino: 6}, 0, BlockSize, sums)
	release()
	if err != nil || f != nil || n != 0 {
		t.Fatalf("a missing object: %v %d %v", f, n, err)
	}
}
