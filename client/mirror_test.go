package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/weft-fs/weft/layout"
	"github.com/weft-fs/weft/meta"
	"github.com/weft-fs/weft/meta/store"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/storage"
	"github.com/weft-fs/weft/storage/vfs"
)

// flakyStorage is a real storage.Server whose targets can be taken down
// (requests fail with EHOSTUNREACH, as for a dead server) or frozen
// (requests hang until their ctx ends, as for a SIGSTOPped one).
type flakyStorage struct {
	proto.StorageService
	mu    sync.Mutex
	state map[proto.TargetID]string // "down", "frozen", "capture", "copyfail" (CopyRow only)
	reads atomic.Int64
	// readBytes and writeBytes count the data this client moved (Read,
	// ReadRow; Write, WriteRow); copyRows the CopyRow requests, whose
	// data moves between servers.
	readBytes, writeBytes, copyRows atomic.Int64
	// rowHook, if set, runs each WriteRow instead of the storage: next
	// is the storage's (ecversions_test.go stops writes at crash points).
	late    []func() error // writes held by a "capture" target, guarded by mu
	rowHook atomic.Pointer[func(ctx context.Context, t proto.TargetID, w proto.RowWrite, next func() error) error]
	// writeHook, if set, sees each Write before the storage does.
	writeHook atomic.Pointer[func(o proto.ObjectID)]
}

func (f *flakyStorage) set(t proto.TargetID, s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.state[t] = s
}

func (f *flakyStorage) check(ctx context.Context, t proto.TargetID) error {
	f.mu.Lock()
	s := f.state[t]
	f.mu.Unlock()
	switch s {
	case "down":
		return fmt.Errorf("flaky: target %d down: %w", t, syscall.EHOSTUNREACH)
	case "frozen":
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

func (f *flakyStorage) Read(ctx context.Context, t proto.TargetID, o proto.ObjectID, off uint64, p []byte) (int, error) {
	f.reads.Add(1)
	if err := f.check(ctx, t); err != nil {
		return 0, err
	}
	f.readBytes.Add(int64(len(p)))
	return f.StorageService.Read(ctx, t, o, off, p)
}

func (f *flakyStorage) Write(ctx context.Context, t proto.TargetID, o proto.ObjectID, off uint64, p []byte) (uint64, error) {
	f.mu.Lock()
	capture := f.state[t] == "capture"
	f.mu.Unlock()
	if capture {
		// A frozen server that will apply the write later (late()),
		// long after the client gave up on it.
		late := context.WithoutCancel(ctx)
		data := append([]byte(nil), p...)
		f.mu.Lock()
		f.late = append(f.late, func() error {
			_, err := f.StorageService.Write(late, t, o, off, data)
			return err
		})
		f.mu.Unlock()
		<-ctx.Done()
		return 0, ctx.Err()
	}
	if err := f.check(ctx, t); err != nil {
		return 0, err
	}
	if h := f.writeHook.Load(); h != nil {
		(*h)(o)
	}
	f.writeBytes.Add(int64(len(p)))
	return f.StorageService.Write(ctx, t, o, off, p)
}

func (f *flakyStorage) Truncate(ctx context.Context, t proto.TargetID, o proto.ObjectID, size uint64) error {
	if err := f.check(ctx, t); err != nil {
		return err
	}
	return f.StorageService.Truncate(ctx, t, o, size)
}

func (f *flakyStorage) Extend(ctx context.Context, t proto.TargetID, o proto.ObjectID, size uint64) error {
	if err := f.check(ctx, t); err != nil {
		return err
	}
	return f.StorageService.(proto.ObjectExtender).Extend(ctx, t, o, size)
}

func (f *flakyStorage) Space(ctx context.Context, t proto.TargetID, o proto.ObjectID, mode proto.SpaceMode, off, n uint64) error {
	if err := f.check(ctx, t); err != nil {
		return err
	}
	return f.StorageService.Space(ctx, t, o, mode, off, n)
}

func (f *flakyStorage) Seek(ctx context.Context, t proto.TargetID, o proto.ObjectID, off uint64, what proto.SeekWhat) (uint64, error) {
	if err := f.check(ctx, t); err != nil {
		return 0, err
	}
	return f.StorageService.Seek(ctx, t, o, off, what)
}

func (f *flakyStorage) ReadRow(ctx context.Context, t proto.TargetID, o proto.ObjectID, off, unit uint64, p []byte) (int, proto.RowVersion, error) {
	f.reads.Add(1)
	if err := f.check(ctx, t); err != nil {
		return 0, proto.RowVersion{}, err
	}
	f.readBytes.Add(int64(len(p)))
	return f.StorageService.(proto.RowVersioner).ReadRow(ctx, t, o, off, unit, p)
}

func (f *flakyStorage) WriteRow(ctx context.Context, t proto.TargetID, o proto.ObjectID, w proto.RowWrite) (uint64, error) {
	if err := f.check(ctx, t); err != nil {
		return 0, err
	}
	f.writeBytes.Add(int64(len(w.Data)))
	rv := f.StorageService.(proto.RowVersioner)
	if h := f.rowHook.Load(); h != nil {
		var v uint64
		err := (*h)(ctx, t, w, func() (err error) {
			v, err = rv.WriteRow(ctx, t, o, w)
			return err
		})
		return v, err
	}
	return rv.WriteRow(ctx, t, o, w)
}

func (f *flakyStorage) CopyRow(ctx context.Context, t proto.TargetID, o proto.ObjectID, c proto.RowCopy) error {
	if err := f.check(ctx, t); err != nil {
		return err
	}
	if err := f.check(ctx, c.SrcTarget); err != nil {
		return err
	}
	f.mu.Lock()
	copyFails := f.state[t] == "copyfail"
	f.mu.Unlock()
	if copyFails {
		return fmt.Errorf("flaky: target %d fails copies: %w", t, syscall.EIO)
	}
	f.copyRows.Add(1)
	return f.StorageService.(proto.RowCopier).CopyRow(ctx, t, o, c)
}

func (f *flakyStorage) Fence(ctx context.Context, t proto.TargetID, o proto.ObjectID) error {
	if err := f.check(ctx, t); err != nil {
		return err
	}
	return f.StorageService.(proto.RowVersioner).Fence(ctx, t, o)
}

func (f *flakyStorage) Sync(ctx context.Context, t proto.TargetID, o proto.ObjectID) error {
	if err := f.check(ctx, t); err != nil {
		return err
	}
	return f.StorageService.Sync(ctx, t, o)
}

// mirrorEnv is a real metadata server (in-memory store) and a real storage
// server with one target on each of three "servers".
type mirrorEnv struct {
	meta    *meta.Server
	storage *flakyStorage
	targets []*storage.Target
}

func newMirrorEnv(t *testing.T) *mirrorEnv {
	t.Helper()
	fs := vfs.NewMem(1 << 30)
	ssrv := storage.NewServer()
	e := &mirrorEnv{storage: &flakyStorage{StorageService: ssrv, state: map[proto.TargetID]string{}}}
	st := store.NewMem()
	// Capabilities are signed (and attached to every storage call) as in a
	// real cluster: the in-process storage does not check them, but its
	// fences (ecversions_test.go) compare their issue times.
	msrv, err := meta.New(meta.Options{Store: st, Storage: ssrv, Seed: 1, OrphanGrace: time.Hour, CapabilityKey: bytes.Repeat([]byte{5}, 32)})
	if err != nil {
		t.Fatal(err)
	}
	e.meta = msrv
	t.Cleanup(func() {
		msrv.Close()
		st.Close()
		for _, tg := range e.targets {
			tg.Close()
		}
	})
	for i := range 3 {
		tg, err := storage.OpenTarget(fmt.Sprintf("/t%d", i), storage.TargetOptions{FS: fs})
		if err != nil {
			t.Fatal(err)
		}
		e.targets = append(e.targets, tg)
		id, err := msrv.RegisterTarget(context.Background(), tg.UUID(), proto.TargetInfo{Addr: fmt.Sprintf("server%d:1", i), Total: 1 << 30, Free: 1 << 30})
		if err != nil {
			t.Fatal(err)
		}
		if err := tg.SetID(id); err != nil {
			t.Fatal(err)
		}
		if err := ssrv.Add(tg); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

func (e *mirrorEnv) client(t *testing.T) *Client {
	c := NewWithServices(e.meta, e.storage, Config{MirrorGrace: 200 * time.Millisecond})
	t.Cleanup(func() { c.Close() })
	return c
}

// createMirror makes a mirror 2 file of one stripe of 64 KiB units.
func createMirror(t *testing.T, c *Client, name string) (*File, proto.Attr) {
	t.Helper()
	l := layout.Layout{Kind: layout.Mirror, Mirror: 2, StripeSize: 64 << 10, StripeCount: 1}
	f, a, _, err := c.CreateOpen(context.Background(), proto.CreateIn{Parent: proto.RootIno, Name: name, Mode: syscall.S_IFREG | 0o644, Exclusive: true, Layout: &l}, proto.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	if a.Layout.Kind != layout.Mirror || len(a.Layout.Targets) != 2 {
		t.Fatalf("layout %v", a.Layout)
	}
	return f, a
}

func readAll(t *testing.T, c *Client, ino proto.Ino, n int) []byte {
	t.Helper()
	ctx := context.Background()
	f, _, err := c.Open(ctx, ino, proto.AccessRead)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Release(ctx)
	buf := make([]byte, n+10)
	got, err := f.Read(ctx, buf, 0)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return buf[:got]
}

// TestMirrorSurvivesDownCopy: with one copy's target down (failing) or
// frozen (hanging), writes, fsync and truncate succeed, the missed copy is
// marked stale, reads return every acknowledged byte from the other copy
// and never the stale one; Resync repairs it once its target is back, and
// then reads from it return the same bytes.
func TestMirrorSurvivesDownCopy(t *testing.T) {
	for _, mode := range []string{"down", "frozen"} {
		t.Run(mode, func(t *testing.T) {
			e := newMirrorEnv(t)
			c := e.client(t)
			ctx := context.Background()
			f, a := createMirror(t, c, "f")
			want := make([]byte, 300<<10)
			rng := rand.New(rand.NewPCG(1, 2))
			for i := range want {
				want[i] = byte(rng.Uint32())
			}
			if _, err := f.Write(ctx, want[:100<<10], 0); err != nil {
				t.Fatal(err)
			}
			if err := f.Fsync(ctx); err != nil {
				t.Fatal(err)
			}
			lost := a.Layout.Targets[1]
			e.storage.set(lost, mode)
			if _, err := f.Write(ctx, want[100<<10:], 100<<10); err != nil {
				t.Fatal(err)
			}
			if err := f.Fsync(ctx); err != nil {
				t.Fatalf("fsync with a copy %s: %v", mode, err)
			}
			if err := f.Release(ctx); err != nil {
				t.Fatal(err)
			}
			got, err := e.meta.GetAttr(ctx, a.Ino)
			if err != nil {
				t.Fatal(err)
			}
			if !got.Layout.IsStale(1) || got.Layout.IsStale(0) {
				t.Fatalf("stale marks after the missed write: %v", got.Layout)
			}
			// A new client reads every byte, from the fresh copy only.
			if b := readAll(t, e.client(t), a.Ino, len(want)); !bytes.Equal(b, want) {
				t.Fatalf("read with a copy %s: %d bytes, differ", mode, len(b))
			}
			// The stale copy really did miss the write: its object (one
			// stripe, so object offsets are file offsets) ends at 100 KiB.
			e.storage.set(lost, "")
			direct := make([]byte, 100<<10)
			if n, err := e.storage.Read(ctx, lost, proto.ObjectID{Ino: a.Ino, Stripe: 1, Gen: a.Gen}, 100<<10, direct); err != nil || n != 0 {
				t.Fatalf("the stale copy holds %d bytes past 100 KiB (%v)", n, err)
			}
			// Its target is up again, but it is never read: reads that
			// would pick it (every other stripe unit) use the fresh copy.
			if b := readAll(t, e.client(t), a.Ino, len(want)); !bytes.Equal(b, want) {
				t.Fatalf("read with the stale copy's target back: %d bytes, differ", len(b))
			}
			// Repair, then read with the other copy gone.
			resyncEventually(t, e.client(t), a.Ino, 1)
			got, _ = e.meta.GetAttr(ctx, a.Ino)
			if len(got.Layout.Stale) != 0 {
				t.Fatalf("stale after resync: %v", got.Layout)
			}
			e.storage.set(a.Layout.Targets[0], "down")
			if b := readAll(t, e.client(t), a.Ino, len(want)); !bytes.Equal(b, want) {
				t.Fatalf("read from the repaired copy: %d bytes, differ", len(b))
			}
		})
	}
}

// TestMirrorBothCopiesDown: with no copy reachable a write fails (latched,
// reported by fsync) and nothing is marked stale: the file is never left
// with every copy stale.
func TestMirrorBothCopiesDown(t *testing.T) {
	e := newMirrorEnv(t)
	c := e.client(t)
	ctx := context.Background()
	f, a := createMirror(t, c, "f")
	for _, tg := range a.Layout.Targets {
		e.storage.set(tg, "down")
	}
	if _, err := f.Write(ctx, []byte("hello"), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Fsync(ctx); !errors.Is(err, syscall.EHOSTUNREACH) {
		t.Fatalf("fsync with both copies down: %v, want EHOSTUNREACH", err)
	}
	f.Release(ctx)
	got, _ := e.meta.GetAttr(ctx, a.Ino)
	if len(got.Layout.Stale) != 0 {
		t.Fatalf("stale marks %v with no copy written", got.Layout.Stale)
	}
}

// TestResyncRefusedWhileWritten: a repair does not clear the marks while
// the file is open for writing (it may have missed those writes).
func TestResyncRefusedWhileWritten(t *testing.T) {
	e := newMirrorEnv(t)
	c := e.client(t)
	ctx := context.Background()
	f, a := createMirror(t, c, "f")
	e.storage.set(a.Layout.Targets[0], "down")
	if _, err := f.Write(ctx, []byte("hello"), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Fsync(ctx); err != nil {
		t.Fatal(err)
	}
	e.storage.set(a.Layout.Targets[0], "")
	if _, err := e.client(t).Resync(ctx, a.Ino); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("resync of a file open for writing: %v, want EBUSY", err)
	}
	f.Release(ctx)
	resyncEventually(t, e.client(t), a.Ino, 1)
}

// resyncEventually repairs ino, retrying while it is refused with EBUSY:
// a closed handle's release reaches the server a moment after the close.
func resyncEventually(t *testing.T, c *Client, ino proto.Ino, want int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second) // a hang guard only
	for {
		n, err := c.Resync(context.Background(), ino)
		if err == nil {
			if n != want {
				t.Fatalf("resync repaired %d copies, want %d", n, want)
			}
			return
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			t.Fatalf("resync: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
