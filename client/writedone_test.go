package client

import (
	"context"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/weft-fs/weft/internal/fake"
	"github.com/weft-fs/weft/meta"
	"github.com/weft-fs/weft/proto"
)

// gatedMeta holds the first WriteDone that reaches it until gate is
// closed, as a loaded metadata server may answer one call after another
// sent later.
type gatedMeta struct {
	*meta.Server
	armed   atomic.Bool
	entered chan struct{}
	gate    chan struct{}
}

func (m *gatedMeta) WriteDone(ctx context.Context, ino proto.Ino, end uint64, mtime int64, blocks uint64) (proto.Attr, error) {
	if m.armed.CompareAndSwap(true, false) {
		close(m.entered)
		<-m.gate
	}
	return m.Server.WriteDone(ctx, ino, end, mtime, blocks)
}

// twoHandles returns a client of meta and storage, and two read-write
// handles of one new file: early (its creation's) and f.
func twoHandles(t *testing.T, meta proto.MetaService, storage proto.StorageService) (c *Client, early, f *File, a proto.Attr) {
	t.Helper()
	ctx := context.Background()
	c = NewWithServices(meta, storage, Config{})
	t.Cleanup(func() { c.Close() })
	early, a, _, err := c.CreateOpen(ctx, proto.CreateIn{Parent: proto.RootIno, Name: "a", Mode: syscall.S_IFREG | 0o644}, proto.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	if f, _, err = c.Open(ctx, a.Ino, proto.AccessReadWrite); err != nil {
		t.Fatal(err)
	}
	return c, early, f, a
}

// raceLateFlush writes through one of two handles of a new file (its
// last byte ending at off plus the data), has the other handle's release
// flush those writes with its WriteDone held at the metadata server, and
// runs op meanwhile: op must not complete while that WriteDone is out
// (what, in the error, names it). It returns the server and the file's
// inode once both have finished and the writing handle is released.
func raceLateFlush(t *testing.T, off uint64, what string, op func(c *Client, f *File, ino proto.Ino) error) (*gatedMeta, proto.Ino) {
	t.Helper()
	ctx := context.Background()
	srv := &gatedMeta{Server: newMetaServer(t), entered: make(chan struct{}), gate: make(chan struct{})}
	c, early, f, a := twoHandles(t, srv, fake.NewStorage())
	mustWrite(t, f, []byte("written before the race"), off)

	srv.armed.Store(true)
	released := make(chan error, 1)
	go func() { released <- early.Release(ctx) }()
	<-srv.entered // its WriteDone is out
	done := make(chan error, 1)
	go func() { done <- op(c, f, a.Ino) }()
	// op must not complete while the WriteDone is out; give a wrong one
	// the chance to (how long only decides whether a wrong order shows;
	// a right one waits for the gate whatever it is).
	select {
	case err := <-done:
		t.Errorf("the %s completed while a WriteDone of earlier writes was still out (%v)", what, err)
		done <- err
	case <-time.After(100 * time.Millisecond):
	}
	close(srv.gate)
	if err := <-released; err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := f.Release(ctx); err != nil {
		t.Fatal(err)
	}
	return srv, a.Ino
}

// TestExplicitMtimeAfterLateFlush: an explicit mtime (futimens) set while
// another handle's flush of the same writes is still out (the kernel's
// RELEASE of an earlier descriptor, late on a loaded machine) is the
// file's mtime at the end: the time set waits for that WriteDone instead
// of sending its own and going ahead, which let the late one land after it
// and put the write's time back (TestModel: "write a then futimens 1: a:
// mtime <now>, want 1").
func TestExplicitMtimeAfterLateFlush(t *testing.T) {
	srv, ino := raceLateFlush(t, 204800, "time set", func(c *Client, _ *File, ino proto.Ino) error {
		_, err := c.SetAttr(context.Background(), ino, proto.SetAttrIn{Valid: proto.SetMtime | proto.SetAtime, Mtime: 1, Atime: 1})
		return err
	})
	got, err := srv.GetAttr(context.Background(), ino)
	if err != nil {
		t.Fatal(err)
	}
	if got.Mtime != 1 {
		t.Fatalf("mtime %d after futimens to 1, want 1: the flush's WriteDone moved it", got.Mtime)
	}
}

// TestTruncateAfterLateFlush: a truncate while another handle's flush of
// earlier writes is still out (the kernel's late RELEASE) waits for it: a
// WriteDone applied after the truncate would set the size back up to the
// end of those writes (fsx, TestFsxMirror: "Size error: expected 0x42ad8
// but found 0x100000").
func TestTruncateAfterLateFlush(t *testing.T) {
	const size = 4096
	srv, ino := raceLateFlush(t, 1<<20, "truncate", func(_ *Client, f *File, _ proto.Ino) error {
		_, err := f.Truncate(context.Background(), size)
		return err
	})
	got, err := srv.GetAttr(context.Background(), ino)
	if err != nil {
		t.Fatal(err)
	}
	if got.Size != size {
		t.Fatalf("size %d after a truncate to %d: the late flush's WriteDone set it back", got.Size, size)
	}
}

// TestWriteDoneRecordsOnlyLandedWrites: a WriteDone records the end of
// the writes that reached storage, not of one accepted and sent after the
// flush drained (another handle's write, while the kernel's late RELEASE
// of an earlier one flushes): a size recorded over bytes still on their
// way is a size the objects do not back (a read meanwhile found a copy
// "shorter than its file" and marked it stale: TestFsxMirror in CI; a
// crash then would leave the file's tail missing).
func TestWriteDoneRecordsOnlyLandedWrites(t *testing.T) {
	ctx := context.Background()
	srv := newMetaServer(t)
	fs := fake.NewStorage()
	_, early, f, a := twoHandles(t, srv, fs)
	mustWrite(t, early, []byte("landed"), 0)
	if err := early.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	entered, gate := make(chan struct{}), make(chan struct{})
	var held atomic.Bool
	fs.SetFault(func(op fake.Op, _ proto.TargetID, _ proto.ObjectID, _ uint64, _ int) error {
		if op == fake.OpWrite && held.CompareAndSwap(false, true) {
			close(entered)
			<-gate
		}
		return nil
	})
	const far = 1 << 20
	mustWrite(t, f, []byte("on its way"), far)
	st := f.state()
	st.mu.Lock()
	st.pushAllLocked() // sent now, as the coalescer's timer would
	st.mu.Unlock()
	<-entered
	// What the late flush does once it has drained: record.
	if err := early.writeDone(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := srv.GetAttr(ctx, a.Ino)
	if err != nil {
		t.Fatal(err)
	}
	if got.Size != 6 {
		t.Errorf("size %d recorded while the write ending at %d was still on its way, want 6", got.Size, far+10)
	}
	close(gate)
	if err := f.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := early.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err = srv.GetAttr(ctx, a.Ino); err != nil || got.Size != far+10 {
		t.Fatalf("size %d (%v) once the write landed and its handle closed, want %d", got.Size, err, far+10)
	}
}
