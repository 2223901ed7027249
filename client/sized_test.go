package client

import (
	"bytes"
	"context"
	"errors"
	"syscall"
	"testing"

	"github.com/weft-fs/weft/layout"
	"github.com/weft-fs/weft/proto"
)

func createWith(t *testing.T, c *Client, name string, l layout.Layout) (*File, proto.Attr) {
	t.Helper()
	f, a, _, err := c.CreateOpen(context.Background(), proto.CreateIn{Parent: proto.RootIno, Name: name, Mode: syscall.S_IFREG | 0o644, Exclusive: true, Layout: &l}, proto.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	if !a.Layout.ObjectsSized {
		t.Fatalf("a new file's layout is not sized: %v", a.Layout)
	}
	return f, a
}

func writeClose(t *testing.T, f *File, p []byte, off uint64) {
	t.Helper()
	ctx := context.Background()
	if _, err := f.Write(ctx, p, off); err != nil {
		t.Fatal(err)
	}
	if err := f.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Holes stay holes: a file with a hole at its end (a write far past the
// others, so some objects were never written) and a file grown by
// truncate read back with zeros, not as lost data.
func TestSizedHolesAreNotLoss(t *testing.T) {
	e := newMirrorEnv(t)
	c := e.client(t)
	ctx := context.Background()
	raid0 := layout.Layout{StripeSize: 64 << 10, StripeCount: 3}
	f, a := createWith(t, c, "hole", raid0)
	writeClose(t, f, []byte("tail"), 1<<20)
	want := append(make([]byte, 1<<20), "tail"...)
	if got := readAll(t, e.client(t), a.Ino, len(want)); !bytes.Equal(got, want) {
		t.Fatalf("file with a hole: %d bytes, differ", len(got))
	}
	f, a = createWith(t, c, "grown", raid0)
	writeClose(t, f, []byte("head"), 0)
	if _, err := c.SetAttr(ctx, a.Ino, proto.SetAttrIn{Valid: proto.SetSize, Size: 700 << 10}); err != nil {
		t.Fatal(err)
	}
	want = append([]byte("head"), make([]byte, 700<<10-4)...)
	if got := readAll(t, e.client(t), a.Ino, len(want)); !bytes.Equal(got, want) {
		t.Fatalf("file grown by truncate: %d bytes, differ", len(got))
	}
}

// A deleted or shortened object of an unprotected file reads as EIO, not
// as zeros; one of a mirrored file is read from the other copy and marked
// stale.
func TestSizedLostObject(t *testing.T) {
	e := newMirrorEnv(t)
	c := e.client(t)
	ctx := context.Background()
	want := bytes.Repeat([]byte("0123456789abcdef"), 300<<10/16)

	f, a := createWith(t, c, "raid0", layout.Layout{StripeSize: 64 << 10, StripeCount: 2})
	writeClose(t, f, want, 0)
	obj := proto.ObjectID{Ino: a.Ino, Stripe: 1, Gen: a.Gen}
	if err := e.storage.Truncate(ctx, a.Layout.Targets[1], obj, 10<<10); err != nil {
		t.Fatal(err)
	}
	rf, _, err := e.client(t).Open(ctx, a.Ino, proto.AccessRead)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(want))
	if _, err := rf.Read(ctx, buf, 0); !errors.Is(err, syscall.EIO) || !errors.Is(err, errShortObject) {
		t.Fatalf("read of a file with a shortened object: %v, want EIO", err)
	}
	rf.Release(ctx)

	f, a = createWith(t, c, "mirror", layout.Layout{Kind: layout.Mirror, Mirror: 2, StripeSize: 64 << 10, StripeCount: 1})
	writeClose(t, f, want, 0)
	for _, slot := range []int{0, 1} {
		// Lose one copy's object; the next read finds it short whichever
		// copy it tries first.
		if err := e.storage.Remove(ctx, a.Layout.Targets[slot], proto.ObjectID{Ino: a.Ino, Stripe: uint32(slot), Gen: a.Gen}); err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, e.client(t), a.Ino, len(want)); !bytes.Equal(got, want) {
			t.Fatalf("mirror with copy %d lost: %d bytes, differ", slot, len(got))
		}
		got, _ := e.meta.GetAttr(ctx, a.Ino)
		if !got.Layout.IsStale(slot) {
			t.Fatalf("the lost copy %d is not marked stale: %v", slot, got.Layout)
		}
		resyncEventually(t, e.client(t), a.Ino, 1)
	}
}

// flushedFile creates a file striped over two objects of 64 KiB units,
// writes data at 0 and flushes it; it returns the file, its state and
// layout, and the extent of the second object's first unit.
func flushedFile(t *testing.T, c *Client, data []byte) (*File, *inodeState, layout.Layout, layout.Extent) {
	t.Helper()
	ctx := context.Background()
	f, _ := createWith(t, c, "f", layout.Layout{StripeSize: 64 << 10, StripeCount: 2})
	if _, err := f.Write(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	st := f.state()
	return f, st, st.layout, layout.Extent{Stripe: 1, ObjOff: 0, Len: 64 << 10}
}

// A read that a truncate of this client overlapped is no evidence of
// loss, even when it is checked after the truncate ended: it may have
// found an object cut down by the truncate and not yet grown by the next
// one (read-ahead under way across fsx's truncate down then up). The same
// short read without a truncate meanwhile is lost data.
func TestSizedReadOverlappingTruncate(t *testing.T) {
	e := newMirrorEnv(t)
	c := e.client(t)
	ctx := context.Background()
	f, st, l, ext := flushedFile(t, c, bytes.Repeat([]byte{7}, 300<<10))
	before := st.readEpoch(ctx)
	st.beginTruncate()
	st.endTruncate()
	if err := c.checkLength(before, st, l, ext, 0); err != nil {
		t.Fatalf("a short read that a truncate overlapped: %v, want no loss", err)
	}
	if err := c.checkLength(st.readEpoch(ctx), st, l, ext, 0); !errors.Is(err, errShortObject) {
		t.Fatalf("a short read with no truncate meanwhile: %v, want errShortObject", err)
	}
	f.Release(ctx)
}

// A read is checked against the size recorded when it began: one that
// began before a size covering more was recorded (read-ahead under way
// while another handle's writes landed and were flushed) may have read an
// object before those writes reached it, which is no evidence of loss.
// Checked against the size at its start, the same short read is loss.
func TestSizedReadBeforeTheFileGrew(t *testing.T) {
	e := newMirrorEnv(t)
	c := e.client(t)
	ctx := context.Background()
	f, st, l, ext := flushedFile(t, c, []byte("small"))
	before := st.readEpoch(ctx) // stripe 1 holds nothing of 5 bytes
	if _, err := f.Write(ctx, bytes.Repeat([]byte{7}, 300<<10), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.checkLength(before, st, l, ext, 0); err != nil {
		t.Fatalf("a short read that began before the file grew: %v, want no loss", err)
	}
	if err := c.checkLength(st.readEpoch(ctx), st, l, ext, 0); !errors.Is(err, errShortObject) {
		t.Fatalf("a short read that began after the file grew: %v, want errShortObject", err)
	}
	f.Release(ctx)
}
