package client

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"

	"github.com/weft-fs/weft/layout"
	"github.com/weft-fs/weft/proto"
)

// allocSpy counts Allocated calls and passes everything else through,
// WriteCounting included.
type allocSpy struct {
	proto.StorageService
	allocated atomic.Int64
}

func (s *allocSpy) Allocated(ctx context.Context, t proto.TargetID, obj proto.ObjectID) (uint64, error) {
	s.allocated.Add(1)
	return s.StorageService.Allocated(ctx, t, obj)
}

func (s *allocSpy) WriteCounting(ctx context.Context, t proto.TargetID, obj proto.ObjectID, off uint64, data []byte) (uint64, uint64, error) {
	return s.StorageService.(proto.CountingWriter).WriteCounting(ctx, t, obj, off, data)
}

// TestBlocksFromWriteReplies: a flush after writes counts the file's
// blocks from what the writes answered, without an Allocated call, and
// gets what Allocated says; a truncate forgets the counts, so the next
// count asks again and is right.
func TestBlocksFromWriteReplies(t *testing.T) {
	e := newMirrorEnv(t)
	srv := e.storage.StorageService
	spy := &allocSpy{StorageService: srv}
	c := NewWithServices(e.meta, spy, Config{})
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	f, _ := createWith(t, c, "f", layout.Layout{Kind: layout.Mirror, Mirror: 2, StripeSize: 64 << 10, StripeCount: 2})
	st := f.state()
	truth := func() uint64 {
		l := st.currentLayout(layout.Layout{})
		var sum uint64
		for slot, tg := range l.Targets {
			n, err := srv.Allocated(ctx, tg, st.objectOf(slot))
			if err != nil {
				t.Fatal(err)
			}
			sum += n
		}
		return sum / 512
	}

	if _, err := f.Write(ctx, bytes.Repeat([]byte("x"), 100<<10), 0); err != nil { // both stripes
		t.Fatal(err)
	}
	if err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := spy.allocated.Load(); n != 0 {
		t.Errorf("flush after writes made %d Allocated calls, want 0", n)
	}
	a, err := c.GetAttr(ctx, f.Ino())
	if err != nil {
		t.Fatal(err)
	}
	if want := truth(); a.Blocks != want || want == 0 {
		t.Errorf("blocks after the flush: %d, Allocated says %d", a.Blocks, want)
	}

	if _, err := f.Truncate(ctx, 1000); err != nil {
		t.Fatal(err)
	}
	got := st.allocatedBlocks(ctx, st.currentLayout(layout.Layout{}), 100<<10)
	if want := truth(); got != want {
		t.Errorf("blocks counted after a truncate: %d, Allocated says %d", got, want)
	}
	if n := spy.allocated.Load(); n == 0 {
		t.Errorf("the count after a truncate made no Allocated call: it used counts from before the truncate")
	}
}

// TestNoteAllocatedOrder: of two replies for one object the higher
// version's count stays, whatever order they arrive in; a reply to a write
// begun before a change of the objects (another epoch) is dropped, and a
// failed write forgets its object's count.
func TestNoteAllocatedOrder(t *testing.T) {
	st := &inodeState{}
	k := allocKey{t: 1, obj: proto.ObjectID{Ino: 2}}
	st.noteAllocated(0, k, allocCount{version: 5, bytes: 8192}, nil)
	st.noteAllocated(0, k, allocCount{version: 4, bytes: 4096}, nil) // an earlier write's late reply
	if n, ok := st.knownAllocated(k.t, k.obj); !ok || n != 8192 {
		t.Fatalf("after replies of versions 5 then 4: %d %v, want 8192", n, ok)
	}
	done := st.changingAllocation()
	st.noteAllocated(0, k, allocCount{version: 6, bytes: 12288}, nil) // begun before the change
	done()
	if _, ok := st.knownAllocated(k.t, k.obj); ok {
		t.Fatal("a reply to a write begun before a truncate was counted")
	}
	st.noteAllocated(st.alloc.epoch, k, allocCount{version: 7, bytes: 4096}, nil)
	st.noteAllocated(st.alloc.epoch, k, allocCount{}, context.DeadlineExceeded)
	if _, ok := st.knownAllocated(k.t, k.obj); ok {
		t.Fatal("a failed write left its object's count")
	}
}
