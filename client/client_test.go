package client

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weft-fs/weft/internal/fake"
	"github.com/weft-fs/weft/layout"
	"github.com/weft-fs/weft/proto"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type env struct {
	meta  *fake.Meta
	store *fake.Storage
	c     *Client
}

func newEnv(t *testing.T, stripeSize uint64, count int32, cfg Config) *env {
	t.Helper()
	store := fake.NewStorage()
	meta := fake.NewMeta([]proto.TargetID{11, 12, 13, 14}, store)
	meta.SetDefaultLayout(layout.Layout{StripeSize: stripeSize, StripeCount: count})
	c := NewWithServices(meta, store, cfg)
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return &env{meta: meta, store: store, c: c}
}

func (e *env) create(t *testing.T, name string) (*File, proto.Attr) {
	t.Helper()
	ctx := context.Background()
	a, err := e.c.Create(ctx, proto.CreateIn{Parent: proto.RootIno, Name: name, Mode: syscall.S_IFREG | 0o644, Exclusive: true})
	if err != nil {
		t.Fatal(err)
	}
	f, _, err := e.c.Open(ctx, a.Ino, proto.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	return f, a
}

func mustWrite(t *testing.T, f *File, p []byte, off uint64) {
	t.Helper()
	n, err := f.Write(context.Background(), p, off)
	if err != nil || n != len(p) {
		t.Fatalf("write %d@%d: n=%d err=%v", len(p), off, n, err)
	}
}

func mustRead(t *testing.T, f *File, off uint64, n int) []byte {
	t.Helper()
	p := make([]byte, n)
	got, err := f.Read(context.Background(), p, off)
	if err != nil {
		t.Fatalf("read %d@%d: %v", n, off, err)
	}
	return p[:got]
}

// TestStriping writes random ranges across stripe boundaries of a 3-target
// file and compares every read, and the objects on the targets, with a
// model of the file.
func TestStriping(t *testing.T) {
	const ss = 64 << 10
	e := newEnv(t, ss, 3, Config{})
	f, a := e.create(t, "f")
	if len(a.Layout.Targets) != 3 {
		t.Fatalf("layout %v", a.Layout)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	model := make([]byte, 0)
	for i := 0; i < 200; i++ {
		off := rng.Uint64N(20 * ss)
		n := 1 + rng.IntN(3*ss)
		p := make([]byte, n)
		for j := range p {
			p[j] = byte(rng.Uint32())
		}
		mustWrite(t, f, p, off)
		if end := off + uint64(n); end > uint64(len(model)) {
			model = append(model, make([]byte, end-uint64(len(model)))...)
		}
		copy(model[off:], p)
		if i%10 == 0 {
			ro := rng.Uint64N(uint64(len(model)) + ss)
			rn := 1 + rng.IntN(4*ss)
			got := mustRead(t, f, ro, rn)
			want := []byte{}
			if ro < uint64(len(model)) {
				want = model[ro:min(uint64(len(model)), ro+uint64(rn))]
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("read %d@%d differs from model (got %d bytes, want %d)", rn, ro, len(got), len(want))
			}
		}
	}
	if f.Size() != uint64(len(model)) {
		t.Fatalf("size %d, want %d", f.Size(), len(model))
	}
	if err := f.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, f, 0, len(model)+100); !bytes.Equal(got, model) {
		t.Fatal("whole-file read differs from model")
	}
	ma, _ := e.meta.GetAttr(context.Background(), a.Ino)
	if ma.Size != uint64(len(model)) {
		t.Fatalf("meta size %d after flush, want %d", ma.Size, len(model))
	}
	// Objects hold exactly the bytes the layout maps to them.
	l := a.Layout
	for s, tgt := range l.Targets {
		obj, _ := e.store.Object(tgt, proto.ObjectID{Ino: a.Ino, Stripe: uint32(s)})
		if uint64(len(obj)) != l.ObjectSize(uint64(len(model)), s) {
			t.Fatalf("stripe %d object size %d, want %d", s, len(obj), l.ObjectSize(uint64(len(model)), s))
		}
	}
	for _, ex := range l.Extents(0, uint64(len(model))) {
		obj, _ := e.store.Object(l.Targets[ex.Stripe], proto.ObjectID{Ino: a.Ino, Stripe: uint32(ex.Stripe)})
		if !bytes.Equal(obj[ex.ObjOff:ex.ObjOff+ex.Len], model[ex.FileOff:ex.FileOff+ex.Len]) {
			t.Fatalf("extent %+v misplaced", ex)
		}
	}
	if err := f.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := e.meta.OpenCount(a.Ino); n != 0 {
		t.Fatalf("open count %d after release", n)
	}
}

// TestWriteBehindOrdering sends overlapping writes against storage with
// random latency: the last write of each byte must win, and reads through
// the client must see it even before the flush.
func TestWriteBehindOrdering(t *testing.T) {
	const ss = 64 << 10
	e := newEnv(t, ss, 4, Config{})
	var seed atomic.Uint64
	e.store.SetFault(func(op fake.Op, _ proto.TargetID, _ proto.ObjectID, _ uint64, _ int) error {
		if op == fake.OpWrite {
			time.Sleep(time.Duration(seed.Add(7)%5) * time.Millisecond)
		}
		return nil
	})
	f, _ := e.create(t, "f")
	rng := rand.New(rand.NewPCG(3, 4))
	model := make([]byte, 4*ss)
	for i := 0; i < 100; i++ {
		off := rng.Uint64N(3 * ss)
		n := 1 + rng.IntN(ss)
		p := bytes.Repeat([]byte{byte(i + 1)}, n)
		mustWrite(t, f, p, off)
		copy(model[off:], p)
		if i%17 == 0 {
			got := mustRead(t, f, off, n)
			if !bytes.Equal(got, p) {
				t.Fatalf("read-your-write %d: mismatch", i)
			}
		}
	}
	if err := f.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := mustRead(t, f, 0, len(model))
	end := int(f.Size())
	if !bytes.Equal(got, model[:end]) {
		t.Fatal("final content differs from model")
	}
	_ = f.Release(context.Background())
}

// TestErrorLatching: a failed background write is returned by the next
// write and by flush (once), so close() reports it.
func TestErrorLatching(t *testing.T) {
	e := newEnv(t, 64<<10, 2, Config{})
	f, _ := e.create(t, "f")
	var fail atomic.Bool
	fail.Store(true)
	e.store.SetFault(func(op fake.Op, _ proto.TargetID, _ proto.ObjectID, _ uint64, _ int) error {
		if op == fake.OpWrite && fail.Load() {
			return syscall.ENOSPC
		}
		return nil
	})
	mustWrite(t, f, []byte("hello"), 0) // acknowledged into the buffer
	// The next write sees the error once the first one failed.
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		_, err = f.Write(context.Background(), []byte("x"), 100)
		time.Sleep(time.Millisecond)
	}
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write after failure: %v, want ENOSPC", err)
	}
	if err := f.Flush(context.Background()); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("flush: %v, want ENOSPC", err)
	}
	if errno, _ := Errno(err); errno != syscall.ENOSPC {
		t.Fatalf("Errno = %v", errno)
	}
	fail.Store(false)
	if err := f.Flush(context.Background()); err != nil {
		t.Fatalf("second flush: %v, want nil (reported once)", err)
	}
	mustWrite(t, f, []byte("ok"), 0)
	if err := f.Fsync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := f.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestTimeout: a storage call slower than the timeout fails the flush with
// ETIMEDOUT instead of hanging.
func TestTimeout(t *testing.T) {
	e := newEnv(t, 64<<10, 1, Config{Timeout: 30 * time.Millisecond})
	f, _ := e.create(t, "f")
	e.store.SetFault(func(op fake.Op, _ proto.TargetID, _ proto.ObjectID, _ uint64, _ int) error {
		if op == fake.OpWrite {
			time.Sleep(100 * time.Millisecond)
		}
		return nil
	})
	mustWrite(t, f, []byte("slow"), 0)
	err := f.Flush(context.Background())
	if !errors.Is(err, syscall.ETIMEDOUT) {
		t.Fatalf("flush: %v, want ETIMEDOUT", err)
	}
	e.store.SetFault(nil)
	_ = f.Release(context.Background())
}

func TestTruncate(t *testing.T) {
	const ss = 64 << 10
	e := newEnv(t, ss, 3, Config{})
	ctx := context.Background()
	f, a := e.create(t, "f")
	data := make([]byte, 7*ss+123)
	for i := range data {
		data[i] = byte(i%251 + 1)
	}
	mustWrite(t, f, data, 0)
	for _, size := range []uint64{5*ss + 7, ss, 0, 2*ss + 1, 9 * ss} {
		got, err := f.Truncate(ctx, size)
		if err != nil {
			t.Fatal(err)
		}
		if got.Size != size || f.Size() != size {
			t.Fatalf("truncate %d: attr size %d, handle size %d", size, got.Size, f.Size())
		}
		for s, tgt := range a.Layout.Targets {
			obj, _ := e.store.Object(tgt, proto.ObjectID{Ino: a.Ino, Stripe: uint32(s)})
			if want := a.Layout.ObjectSize(size, s); uint64(len(obj)) != want {
				t.Fatalf("truncate %d: stripe %d object size %d, want %d", size, s, len(obj), want)
			}
		}
		if size < uint64(len(data)) {
			clear(data[size:])
		}
		back := mustRead(t, f, 0, int(size)+10)
		want := make([]byte, size)
		copy(want, data)
		if !bytes.Equal(back, want) {
			t.Fatalf("truncate %d: content differs", size)
		}
		mustWrite(t, f, []byte{9}, size) // extend by one byte again
		if size < uint64(len(data)) {
			data[size] = 9
		}
		if f.Size() != size+1 {
			t.Fatalf("size %d after append at %d", f.Size(), size)
		}
	}
	// Truncate by inode (no handle involved) while the file is not open.
	if err := f.Release(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := e.c.SetAttr(ctx, a.Ino, proto.SetAttrIn{Valid: proto.SetSize, Size: 3})
	if err != nil || got.Size != 3 {
		t.Fatalf("path truncate: %v size %d", err, got.Size)
	}
}

func TestFsyncSyncsWrittenObjects(t *testing.T) {
	const ss = 64 << 10
	e := newEnv(t, ss, 4, Config{})
	ctx := context.Background()
	f, a := e.create(t, "f")
	mustWrite(t, f, make([]byte, ss+10), ss/2) // stripes 0 and 1
	if err := f.Fsync(ctx); err != nil {
		t.Fatal(err)
	}
	for s := range 4 {
		want := 0
		if s < 2 {
			want = 1
		}
		if got := e.store.Syncs(proto.ObjectID{Ino: a.Ino, Stripe: uint32(s)}); got != want {
			t.Fatalf("stripe %d synced %d times, want %d", s, got, want)
		}
	}
	ma, _ := e.meta.GetAttr(ctx, a.Ino)
	if ma.Size != ss/2+ss+10 {
		t.Fatalf("meta size %d after fsync", ma.Size)
	}
	_ = f.Release(ctx)
}

// TestBudget: with a small cache limit and slow storage, writes still all
// land, and the bytes in flight never exceed the limit.
func TestBudget(t *testing.T) {
	const limit = 256 << 10
	e := newEnv(t, 64<<10, 4, Config{CacheLimit: limit})
	var cur, peak atomic.Int64
	e.store.SetFault(func(op fake.Op, _ proto.TargetID, _ proto.ObjectID, _ uint64, n int) error {
		if op == fake.OpWrite {
			v := cur.Add(int64(n))
			for {
				p := peak.Load()
				if v <= p || peak.CompareAndSwap(p, v) {
					break
				}
			}
			time.Sleep(time.Millisecond)
			cur.Add(-int64(n))
		}
		return nil
	})
	f, _ := e.create(t, "f")
	var wg sync.WaitGroup
	chunk := make([]byte, 32<<10)
	for w := range 4 {
		wg.Go(func() {
			for i := range 16 {
				off := uint64((w*16 + i) * len(chunk))
				if _, err := f.Write(context.Background(), chunk, off); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if err := f.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if p := peak.Load(); p > limit || p == 0 {
		t.Fatalf("peak in-flight %d, limit %d", p, limit)
	}
	if f.Size() != 64*32<<10 {
		t.Fatalf("size %d", f.Size())
	}
	_ = f.Release(context.Background())
}

// TestUnlinkedOpenFile: data stays readable through an open handle after
// the last link is gone; the objects go with the last release.
func TestUnlinkedOpenFile(t *testing.T) {
	e := newEnv(t, 64<<10, 2, Config{})
	ctx := context.Background()
	f, a := e.create(t, "f")
	mustWrite(t, f, []byte("still here"), 0)
	if err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Unlink(ctx, proto.RootIno, "f"); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, f, 0, 100); string(got) != "still here" {
		t.Fatalf("read %q", got)
	}
	if err := f.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.store.Object(a.Layout.Targets[0], proto.ObjectID{Ino: a.Ino}); ok {
		t.Fatal("object survived the last release")
	}
}

func TestErrno(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want syscall.Errno
		ok   bool
	}{
		{nil, 0, true},
		{syscall.ENOENT, syscall.ENOENT, true},
		{errors.Join(errors.New("ctx"), syscall.EEXIST), syscall.EEXIST, true},
		{context.DeadlineExceeded, syscall.ETIMEDOUT, true},
		{errors.New("boom"), syscall.EIO, false},
	} {
		got, ok := Errno(tc.err)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Errno(%v) = %v,%v want %v,%v", tc.err, got, ok, tc.want, tc.ok)
		}
	}
}

func TestBufPool(t *testing.T) {
	p := newBufPool()
	for _, n := range []int{1, 4096, 4097, 47008, 1 << 20, 4 << 20, 4<<20 + 1} {
		b := p.Get(n)
		if len(b) != n {
			t.Fatalf("get(%d) has len %d", n, len(b))
		}
		if n <= 4<<20 && cap(b)&(cap(b)-1) != 0 {
			t.Fatalf("get(%d) cap %d not a power of two", n, cap(b))
		}
		p.Put(b)
	}
}

// TestReadAhead: sequential reads are served from prefetched chunks, and
// neither this client's writes nor another client's writes followed by a
// reopen are hidden by them.
func TestReadAhead(t *testing.T) {
	const ss = 64 << 10
	e := newEnv(t, ss, 4, Config{})
	ctx := context.Background()
	f, a := e.create(t, "f")
	data := make([]byte, 40*ss)
	for i := range data {
		data[i] = byte(i*31 + i>>16)
	}
	mustWrite(t, f, data, 0)
	if err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	e.store.SetFault(func(op fake.Op, _ proto.TargetID, _ proto.ObjectID, _ uint64, _ int) error {
		if op == fake.OpRead {
			time.Sleep(200 * time.Microsecond)
		}
		return nil
	})
	const rs = 16 << 10
	before := e.store.Calls(fake.OpRead)
	for off := 0; off < 20*ss; off += rs {
		if got := mustRead(t, f, uint64(off), rs); !bytes.Equal(got, data[off:off+rs]) {
			t.Fatalf("sequential read at %d differs", off)
		}
	}
	// 16 KiB reads over 20 stripe units: without read-ahead 80 RPCs, with
	// it about one per unit.
	if calls := e.store.Calls(fake.OpRead) - before; calls > 40 {
		t.Fatalf("%d storage reads for 80 sequential reads: no read-ahead?", calls)
	}
	// A write by this client ahead of the reader drops what was fetched.
	patch := bytes.Repeat([]byte{0xEE}, rs)
	mustWrite(t, f, patch, 20*ss+rs)
	copy(data[20*ss+rs:], patch)
	for off := 20 * ss; off < 24*ss; off += rs {
		if got := mustRead(t, f, uint64(off), rs); !bytes.Equal(got, data[off:off+rs]) {
			t.Fatalf("read at %d after own write differs", off)
		}
	}
	if err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// Warm the read-ahead, let another client overwrite ahead, reopen.
	for off := 24 * ss; off < 26*ss; off += rs {
		mustRead(t, f, uint64(off), rs)
	}
	other := NewWithServices(e.meta, e.store, Config{})
	g, _, err := other.Open(ctx, a.Ino, proto.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	patch2 := bytes.Repeat([]byte{0x77}, ss)
	if _, err := g.Write(ctx, patch2, 27*ss); err != nil {
		t.Fatal(err)
	}
	if err := g.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	copy(data[27*ss:], patch2)
	f2, _, err := e.c.Open(ctx, a.Ino, proto.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	for off := 26 * ss; off < 30*ss; off += rs {
		if got := mustRead(t, f2, uint64(off), rs); !bytes.Equal(got, data[off:off+rs]) {
			t.Fatalf("read at %d after reopen differs (stale read-ahead)", off)
		}
	}
	_ = f2.Release(ctx)
	_ = f.Release(ctx)
}
