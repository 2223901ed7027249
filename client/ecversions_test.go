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

	"github.com/weft-fs/weft/proto"
)

// TestECCrashBetweenShardWrites stops a partial-row update of an ec 2+1
// file after its data shard was written and before its parity (a client
// killed there): no read returns wrong bytes (a reconstruction that would
// need the mismatched shards fails with EIO instead, one from the shards
// that agree gives the row as it was), and resync re-encodes the row, after
// which every shard can be lost and the new bytes read back.
func TestECCrashBetweenShardWrites(t *testing.T) {
	e := newMirrorEnv(t)
	ctx := context.Background()
	f, a := createWith(t, e.client(t), "ec", ec21)
	old := make([]byte, 256<<10) // two rows of 128 KiB
	for i := range old {
		old[i] = byte(i*7 + 3)
	}
	writeClose(t, f, old, 0)
	l := a.Layout
	data0, data1, parity := l.Targets[l.Slot(0, 0)], l.Targets[l.Slot(0, 1)], l.Targets[l.Slot(0, 2)]

	// The crash: the write of data shard 0 lands; then the client dies
	// (its context ends) before any other shard is written.
	c := e.client(t)
	f2, _, err := c.Open(ctx, a.Ino, proto.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	landed := make(chan struct{})
	var once sync.Once
	hook := func(hctx context.Context, tg proto.TargetID, w proto.RowWrite, next func() error) error {
		if tg == data0 && len(w.Data) > 0 {
			err := next()
			once.Do(func() { close(landed) })
			return err
		}
		<-landed
		cancel()
		return context.Canceled
	}
	e.storage.rowHook.Store(&hook)
	p := bytes.Repeat([]byte{0xee}, 5000)
	if err := c.ecWrite(cctx, f2.state(), l, 1000, p); err == nil {
		t.Fatal("the interrupted write succeeded")
	}
	e.storage.rowHook.Store(nil)
	cur := append([]byte(nil), old...)
	copy(cur[1000:], p)
	if got, _ := e.meta.GetAttr(ctx, a.Ino); len(got.Layout.Stale) != 0 {
		t.Fatalf("the crashed write marked shards stale: %v", got.Layout)
	}

	if got := readAll(t, e.client(t), a.Ino, len(cur)); !bytes.Equal(got, cur) {
		t.Fatal("all shards up: the data shards do not read back")
	}
	// Shard 0 down: decoded from shard 1 and the parity, which agree: the
	// row as it was before the unacknowledged write.
	e.storage.set(data0, "down")
	if got := readAll(t, e.client(t), a.Ino, len(old)); !bytes.Equal(got, old) {
		t.Fatal("shard 0 down: the row does not decode to its state before the crash")
	}
	e.storage.set(data0, "")
	// Shard 1 down: shard 0 and the parity hold different versions; the
	// read of row 0 fails rather than decoding them together.
	e.storage.set(data1, "down")
	if err := readErr(e.client(t), a.Ino, 0, 128<<10); !errors.Is(err, syscall.EIO) {
		t.Fatalf("shard 1 down, mismatched row: read %v, want EIO", err)
	}
	e.storage.set(data1, "")
	if err := f2.Release(ctx); err != nil {
		t.Logf("release after the crash: %v", err)
	}

	// Resync finds the row and re-encodes it.
	resyncEventually(t, e.client(t), a.Ino, 0)
	for _, tg := range []proto.TargetID{data0, data1, parity} {
		e.storage.set(tg, "down")
		if got := readAll(t, e.client(t), a.Ino, len(cur)); !bytes.Equal(got, cur) {
			t.Fatalf("after the repair, target %d down: differs", tg)
		}
		e.storage.set(tg, "")
	}
}

// readErr reads n bytes at off of ino with a fresh handle and returns the
// error.
func readErr(c *Client, ino proto.Ino, off uint64, n int) error {
	ctx := context.Background()
	f, _, err := c.Open(ctx, ino, proto.AccessRead)
	if err != nil {
		return err
	}
	defer f.Release(ctx)
	_, err = f.Read(ctx, make([]byte, n), off)
	return err
}

// TestECConcurrentPartialWriters: two clients (two mounts) write disjoint
// 4 KiB blocks of the same rows of an ec 2+1 file at once, each with its
// own row locks. Conditional shard writes make one of two colliding row
// updates start again, so at the end every row's parity matches its data:
// each shard can be lost and the file still reads back whole, and every
// row's shards hold one version.
func TestECConcurrentPartialWriters(t *testing.T) {
	e := newMirrorEnv(t)
	ctx := context.Background()
	const size = 256 << 10
	f, a := createWith(t, e.client(t), "ec", ec21)
	writeClose(t, f, make([]byte, size), 0)
	want := make([]byte, size)
	// Each shard write waits a moment first, so the two writers' row
	// updates overlap often (in process they are otherwise too quick).
	hook := func(ctx context.Context, tg proto.TargetID, w proto.RowWrite, next func() error) error {
		time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
		return next()
	}
	e.storage.rowHook.Store(&hook)
	var wg sync.WaitGroup
	for w := range 2 {
		c := e.client(t)
		fw, _, err := c.Open(ctx, a.Ino, proto.AccessReadWrite)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(uint64(w), 9))
		var blocks []int // writer w owns the blocks b with b%2 == w
		for b := w; b < size/4096; b += 2 {
			blocks = append(blocks, b)
		}
		// Both go through the rows in the same order, each block at a
		// random place in its row, so they meet in every row.
		for lo := 0; lo < len(blocks); lo += 16 {
			r := blocks[lo:min(lo+16, len(blocks))]
			rng.Shuffle(len(r), func(i, j int) { r[i], r[j] = r[j], r[i] })
		}
		for _, b := range blocks {
			for i := range 4096 {
				want[b*4096+i] = byte(w + 1 + b)
			}
		}
		wg.Go(func() {
			for _, b := range blocks {
				p := bytes.Repeat([]byte{byte(w + 1 + b)}, 4096)
				if err := c.ecWrite(ctx, fw.state(), a.Layout, uint64(b)*4096, p); err != nil {
					t.Errorf("writer %d block %d: %v", w, b, err)
					return
				}
			}
			fw.Release(ctx)
		})
	}
	wg.Wait()
	e.storage.rowHook.Store(nil)
	if t.Failed() {
		return
	}
	if got, _ := e.meta.GetAttr(ctx, a.Ino); len(got.Layout.Stale) != 0 {
		t.Fatalf("shards marked stale without a failure: %v", got.Layout)
	}
	for _, tg := range append([]proto.TargetID{0}, a.Layout.Targets...) {
		e.storage.set(tg, "down")
		if got := readAll(t, e.client(t), a.Ino, size); !bytes.Equal(got, want) {
			t.Fatalf("target %d down: the file differs", tg)
		}
		e.storage.set(tg, "")
	}
	rv := e.storage.StorageService.(proto.RowVersioner)
	for row := uint64(0); row < 2; row++ {
		var first proto.RowVersion
		for j, tg := range a.Layout.Targets {
			_, v, err := rv.ReadRow(ctx, tg, proto.ObjectID{Ino: a.Ino, Gen: a.Gen, Stripe: uint32(j)}, row*ec21.StripeSize, ec21.StripeSize, nil)
			if err != nil {
				t.Fatal(err)
			}
			if j == 0 {
				first = v
			} else if v != first || v.Dirty {
				t.Fatalf("row %d: shard %d at %+v, shard 0 at %+v", row, j, v, first)
			}
		}
	}
}

// TestMirrorLateWriteFenced: a write to a copy whose server froze (the
// client gave up on it and marked the copy stale) is applied by that
// server only after resync repaired the copy. The repair fenced the copy,
// so the late write is refused and the repaired copy keeps the file's
// bytes; without the fence it would hold the late write's older bytes.
func TestMirrorLateWriteFenced(t *testing.T) {
	e := newMirrorEnv(t)
	ctx := context.Background()
	c := e.client(t)
	f, a := createMirror(t, c, "m")
	a1 := bytes.Repeat([]byte{0xa1}, 100<<10)
	if _, err := f.Write(ctx, a1, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Fsync(ctx); err != nil {
		t.Fatal(err)
	}
	frozen := a.Layout.Targets[1]
	e.storage.set(frozen, "capture")
	b := bytes.Repeat([]byte{0xb2}, 100<<10)
	if _, err := f.Write(ctx, b, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Fsync(ctx); err != nil { // gives up on the frozen copy, marks it stale
		t.Fatal(err)
	}
	cur := bytes.Repeat([]byte{0xc3}, 100<<10)
	if _, err := f.Write(ctx, cur, 0); err != nil { // the fresh copy only
		t.Fatal(err)
	}
	if err := f.Release(ctx); err != nil {
		t.Fatal(err)
	}
	e.storage.mu.Lock()
	late := e.storage.late
	e.storage.state[frozen] = ""
	e.storage.mu.Unlock()
	if len(late) == 0 {
		t.Fatal("no write reached the frozen copy")
	}
	resyncEventually(t, e.client(t), a.Ino, 1)
	for _, w := range late {
		if err := w(); !errors.Is(err, syscall.EACCES) {
			t.Fatalf("late write after the repair: %v, want refused (EACCES)", err)
		}
	}
	e.storage.set(a.Layout.Targets[0], "down") // read the repaired copy
	if got := readAll(t, e.client(t), a.Ino, len(cur)); !bytes.Equal(got, cur) {
		t.Fatal("the repaired copy does not hold the file's bytes after the late write")
	}
}
