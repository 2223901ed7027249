package client

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/weft-fs/weft/internal/fake"
	"github.com/weft-fs/weft/proto"
)

// TestCoalesceSequential: a stream of small unaligned writes reaches
// storage as about one RPC per chunk, with the right bytes.
func TestCoalesceSequential(t *testing.T) {
	const ss = 1 << 20
	e := newEnv(t, ss, 4, Config{})
	f, _ := e.create(t, "f")
	const rec = 4099 // odd, so records straddle pages and chunks
	const writes = 2048
	data := make([]byte, rec*writes)
	for i := range data {
		data[i] = byte(i*7 + i>>12)
	}
	for i := range writes {
		mustWrite(t, f, data[i*rec:(i+1)*rec], uint64(i*rec))
	}
	if err := f.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	// 8 MiB in 1 MiB chunks: 9 RPCs if nothing interrupted the stream; a
	// few more if the idle timer cut it on a busy machine, never one per
	// write.
	t.Logf("%d storage writes for %d writes", e.store.Calls(fake.OpWrite), writes)
	if calls := e.store.Calls(fake.OpWrite); calls > writes/8 {
		t.Fatalf("%d storage writes for %d contiguous writes", calls, writes)
	}
	if got := mustRead(t, f, 0, len(data)); !bytes.Equal(got, data) {
		t.Fatal("content differs")
	}
	_ = f.Release(context.Background())
}

// TestCoalesceInterleaved: records of several writers of one inode on
// this client, arriving a little out of order as those of ior-hard's
// processes do, are merged too; written concurrently, they land right.
func TestCoalesceInterleaved(t *testing.T) {
	const ss = 1 << 20
	const rec, ranks, per = 47008, 4, 40
	want := make([]byte, rec*ranks*per)
	for i := range want {
		want[i] = byte(i*13 + i>>16)
	}
	// write cuts a record as the kernel does: first to the page boundary.
	write := func(f *File, off int) {
		cut := min(rec, 4096-off%4096)
		for _, pc := range [][2]int{{off, off + cut}, {off + cut, off + rec}} {
			if pc[0] == pc[1] {
				continue
			}
			if _, err := f.Write(context.Background(), want[pc[0]:pc[1]], uint64(pc[0])); err != nil {
				t.Error(err)
			}
		}
	}
	check := func(e *env, f *File) {
		if err := f.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := mustRead(t, f, 0, len(want)); !bytes.Equal(got, want) {
			t.Fatal("content differs")
		}
		_ = f.Release(context.Background())
	}

	e := newEnv(t, ss, 4, Config{})
	f, _ := e.create(t, "f")
	order := make([]int, ranks*per)
	for i := range order {
		order[i] = i
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < len(order); i += 2 * ranks { // drift of up to two records per rank
		w := order[i:min(len(order), i+2*ranks)]
		rng.Shuffle(len(w), func(a, b int) { w[a], w[b] = w[b], w[a] })
	}
	for _, k := range order {
		write(f, k*rec)
	}
	check(e, f)
	// 7.2 MiB in 1 MiB chunks: about 8 RPCs when nothing cut the stream.
	t.Logf("%d storage writes for %d records", e.store.Calls(fake.OpWrite), ranks*per)
	if calls := e.store.Calls(fake.OpWrite); calls > ranks*per/4 {
		t.Fatalf("%d storage writes for %d records", calls, ranks*per)
	}

	e = newEnv(t, ss, 4, Config{})
	f, _ = e.create(t, "f")
	var wg sync.WaitGroup
	for r := range ranks {
		wg.Go(func() {
			for s := range per {
				write(f, (s*ranks+r)*rec)
			}
		})
	}
	wg.Wait()
	check(e, f)
}

// TestCoalesceModel runs random writes (often contiguous, overlapping or
// inside earlier ones), reads, truncates and flushes against storage with
// random latency, comparing every read and the final objects with a model.
func TestCoalesceModel(t *testing.T) {
	const ss = 64 << 10
	for seed := range uint64(4) {
		e := newEnv(t, ss, 3, Config{CacheLimit: 512 << 10})
		var lat sync.Mutex
		lrng := rand.New(rand.NewPCG(seed, 99))
		e.store.SetFault(func(op fake.Op, _ proto.TargetID, _ proto.ObjectID, _ uint64, _ int) error {
			if op == fake.OpWrite {
				lat.Lock()
				d := time.Duration(lrng.IntN(300)) * time.Microsecond
				lat.Unlock()
				time.Sleep(d)
			}
			return nil
		})
		ctx := context.Background()
		f, a := e.create(t, "f")
		rng := rand.New(rand.NewPCG(seed, 7))
		var model []byte
		next := uint64(0)
		for i := range 600 {
			switch k := rng.IntN(20); {
			case k < 14: // write
				var off uint64
				switch rng.IntN(4) {
				case 0, 1:
					off = next // contiguous
				case 2:
					off = rng.Uint64N(uint64(len(model)) + 1) // overwrite inside
				default:
					off = rng.Uint64N(8 * ss) // anywhere
				}
				n := 1 + rng.IntN(3*ss/2)
				if rng.IntN(3) > 0 {
					n = 1 + rng.IntN(5000)
				}
				p := make([]byte, n)
				for j := range p {
					p[j] = byte(i) ^ byte(j*31)
				}
				mustWrite(t, f, p, off)
				if end := off + uint64(n); end > uint64(len(model)) {
					model = append(model, make([]byte, end-uint64(len(model)))...)
				}
				copy(model[off:], p)
				next = off + uint64(n)
			case k < 17: // read
				ro := rng.Uint64N(uint64(len(model)) + 1000)
				rn := 1 + rng.IntN(2*ss)
				got := mustRead(t, f, ro, rn)
				var want []byte
				if ro < uint64(len(model)) {
					want = model[ro:min(uint64(len(model)), ro+uint64(rn))]
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("seed %d op %d: read %d@%d differs", seed, i, rn, ro)
				}
			case k < 18: // truncate
				size := rng.Uint64N(uint64(len(model)) + ss)
				if _, err := f.Truncate(ctx, size); err != nil {
					t.Fatal(err)
				}
				if size < uint64(len(model)) {
					model = model[:size]
				} else {
					model = append(model, make([]byte, size-uint64(len(model)))...)
				}
			case k < 19:
				if err := f.Flush(ctx); err != nil {
					t.Fatal(err)
				}
			default:
				if err := f.Fsync(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if f.Size() != uint64(len(model)) {
				t.Fatalf("seed %d op %d: size %d, want %d", seed, i, f.Size(), len(model))
			}
		}
		if err := f.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		l := a.Layout
		for _, ex := range l.Extents(0, uint64(len(model))) {
			obj, _ := e.store.Object(l.Targets[ex.Stripe], proto.ObjectID{Ino: a.Ino, Stripe: uint32(ex.Stripe)})
			got := make([]byte, ex.Len)
			if ex.ObjOff < uint64(len(obj)) {
				copy(got, obj[ex.ObjOff:])
			}
			if !bytes.Equal(got, model[ex.FileOff:ex.FileOff+ex.Len]) {
				t.Fatalf("seed %d: extent %+v differs on storage", seed, ex)
			}
		}
		ma, _ := e.meta.GetAttr(ctx, a.Ino)
		if ma.Size != uint64(len(model)) {
			t.Fatalf("seed %d: meta size %d, want %d", seed, ma.Size, len(model))
		}
		_ = f.Release(ctx)
	}
}

// TestCoalesceDisjointClients: two clients (two mounts) writing interleaved
// disjoint unaligned records of one file never clobber each other: each
// sends only the bytes it was given, never a filled-in gap.
func TestCoalesceDisjointClients(t *testing.T) {
	e := newEnv(t, 64<<10, 2, Config{})
	ctx := context.Background()
	f, a := e.create(t, "f")
	other := NewWithServices(e.meta, e.store, Config{})
	defer other.Close()
	g, _, err := other.Open(ctx, a.Ino, proto.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	const rec, per = 3001, 100
	want := make([]byte, 2*rec*per)
	var wg sync.WaitGroup
	for w, h := range []*File{f, g} {
		wg.Go(func() {
			for s := range per {
				off := (2*s + w) * rec
				p := bytes.Repeat([]byte{byte(w + 1)}, rec)
				copy(want[off:], p)
				if _, err := h.Write(ctx, p, uint64(off)); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	for _, h := range []*File{f, g} {
		if err := h.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.Release(ctx); err != nil {
		t.Fatal(err)
	}
	_ = f.Release(ctx)
	f2, _, err := e.c.Open(ctx, a.Ino, proto.AccessReadWrite) // close-to-open: sees both
	if err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, f2, 0, len(want)); !bytes.Equal(got, want) {
		t.Fatal("one client's records clobbered the other's")
	}
	_ = f2.Release(ctx)
}

// TestCoalesceErrors: a send that fails in the background is reported by
// the flush or fsync that sent it, once.
func TestCoalesceErrors(t *testing.T) {
	e := newEnv(t, 64<<10, 2, Config{})
	ctx := context.Background()
	f, _ := e.create(t, "f")
	e.store.SetFault(func(op fake.Op, _ proto.TargetID, _ proto.ObjectID, _ uint64, _ int) error {
		if op == fake.OpWrite {
			return syscall.EIO
		}
		return nil
	})
	for _, sync := range []bool{false, true} {
		mustWrite(t, f, []byte("abc"), 10)
		mustWrite(t, f, []byte("def"), 13) // merged: one send, one failure
		var err error
		if sync {
			err = f.Fsync(ctx)
		} else {
			err = f.Flush(ctx)
		}
		if !errors.Is(err, syscall.EIO) {
			t.Fatalf("sync=%v: %v, want EIO", sync, err)
		}
		if err := f.Flush(ctx); err != nil {
			t.Fatalf("sync=%v: second flush %v, want nil (reported once)", sync, err)
		}
	}
	e.store.SetFault(nil)
	_ = f.Release(ctx)
}

// TestCoalesceIdle: buffered bytes reach storage by themselves, without a
// flush, while the file stays open.
func TestCoalesceIdle(t *testing.T) {
	e := newEnv(t, 64<<10, 2, Config{})
	f, a := e.create(t, "f")
	mustWrite(t, f, []byte("idle"), 5)
	obj := proto.ObjectID{Ino: a.Ino}
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := e.store.Object(a.Layout.Targets[0], obj)
		if len(b) == 9 && string(b[5:]) == "idle" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("object %q: buffered write never sent", b)
		}
		time.Sleep(time.Millisecond)
	}
	if calls := e.store.Calls(fake.OpWrite); calls != 1 {
		t.Fatalf("%d storage writes, want 1", calls)
	}
	_ = f.Release(context.Background())
}

// TestCoalesceRewrite: rewriting the same bytes again and again costs no
// RPC per write and no budget beyond the bytes themselves.
func TestCoalesceRewrite(t *testing.T) {
	e := newEnv(t, 64<<10, 2, Config{})
	f, _ := e.create(t, "f")
	for i := range 1000 {
		mustWrite(t, f, []byte{byte(i), byte(i), byte(i)}, 100)
	}
	if err := f.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if calls := e.store.Calls(fake.OpWrite); calls > 100 {
		t.Fatalf("%d storage writes for 1000 rewrites", calls)
	}
	if got := mustRead(t, f, 100, 3); !bytes.Equal(got, []byte{231, 231, 231}) {
		t.Fatalf("read %v", got)
	}
	_ = f.Release(context.Background())
	e.c.budget.mu.Lock()
	used := e.c.budget.used
	e.c.budget.mu.Unlock()
	if used != 0 {
		t.Fatalf("budget holds %d bytes after release", used)
	}
}
