package storage

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weft-fs/weft/proto"
)

// TestPresence: every object added is reported present (a Bloom filter
// has no false negatives, and the target relies on it), and at the size
// the filter was made for about 1 % of the others are (false positives
// cost the system calls the filter saves, nothing else).
func TestPresence(t *testing.T) {
	const n = minPresenceObjects
	p := newPresence(n / 2) // made for n objects (twice the count found)
	added := func(i int) proto.ObjectID {
		return proto.ObjectID{Ino: proto.Ino(1000 + i), Gen: uint64(i%7 + 1), Stripe: uint32(i % 4)}
	}
	for i := range n {
		p.add(added(i))
	}
	for i := range n {
		if !p.mayHold(added(i)) {
			t.Fatalf("object %v added but not reported present", added(i))
		}
	}
	fp := 0
	for i := range n {
		// Other generations and stripes of the same inode numbers, and
		// other inode numbers: what a removal of a file's never-made
		// objects asks.
		if p.mayHold(proto.ObjectID{Ino: proto.Ino(1000 + i), Gen: uint64(i%7 + 1), Stripe: uint32(i%4) + 4}) {
			fp++
		}
	}
	rate := float64(fp) / n
	t.Logf("%d objects, %d bits: %.2f %% false positives", n, len(p.words)*64, 100*rate)
	if rate > 0.03 {
		t.Errorf("false positives: %.2f %% of absent objects reported present, want about 1 %%", 100*rate)
	}
}

// TestPresenceRenewal: a filter churned past its size is replaced by one
// made from a listing of the target, which forgets removed objects and
// keeps every object that has a file, including those created while the
// listing runs (they are added to both filters).
func TestPresenceRenewal(t *testing.T) {
	tg := openMem(t, newMemFS(t), TargetOptions{})
	ctx := context.Background()
	obj := func(i int) proto.ObjectID { return proto.ObjectID{Ino: proto.Ino(100 + i), Gen: 5} }
	for i := range 20 {
		if _, err := tg.Write(ctx, obj(i), 0, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 {
		if err := tg.Remove(ctx, obj(i)); err != nil {
			t.Fatal(err)
		}
	}
	old := tg.objs.cur.Load()
	if !old.mayHold(obj(0)) {
		t.Fatal("a removed object left the filter before any renewal: the test assumes it stays")
	}

	// Creations while renewals run, the first renewal started by the
	// filter filling up (a capacity of 25 adds: 20 made, 5 more below).
	old.capacity = 25
	// A listing slow enough that creations land in directories it has
	// already listed: only their adds to the next filter keep them.
	tg.objs.list = func(add func(proto.ObjectID)) error {
		for i := range 256 {
			names, err := tg.fs.ReadDir(tg.fanoutDir(i))
			if err != nil {
				return err
			}
			for _, n := range names {
				if o, ok := objectOfFile(n); ok {
					add(o)
				}
			}
			if i%16 == 0 {
				time.Sleep(time.Millisecond)
			}
		}
		return nil
	}
	var wg sync.WaitGroup
	writing := make(chan struct{})
	var written atomic.Int64 // objects 0 .. written-1 were made
	written.Store(20)
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(writing)
		for i := 20; i < 400; i++ {
			if _, err := tg.Write(ctx, obj(i), 0, []byte("y")); err != nil {
				t.Error(err)
				return
			}
			written.Store(int64(i + 1))
			time.Sleep(50 * time.Microsecond)
		}
	}()
	renewals := 0
	for done := false; !done; {
		select {
		case <-writing:
			done = true
		default:
		}
		if tg.objs.renewing.CompareAndSwap(false, true) { // as creatingObject starts one
			tg.objs.renew()
			renewals++
			// Every object made before the renewal ended, during its
			// listing too, is in the filter it installed.
			for i := 10; i < int(written.Load()); i++ {
				if !tg.objs.mayHold(obj(i)) {
					t.Fatalf("object %v was made before renewal %d ended but the filter calls it absent", obj(i), renewals)
				}
			}
		}
	}
	wg.Wait()
	if renewals == 0 {
		t.Fatal("no renewal ran while objects were created")
	}
	for tg.objs.renewing.Load() { // the background renewal the adds started
		time.Sleep(time.Millisecond)
	}
	if tg.objs.cur.Load() == old {
		t.Fatal("the filter was not renewed")
	}
	for i := 10; i < 400; i++ {
		if !tg.objs.mayHold(obj(i)) {
			t.Fatalf("object %v has files but the renewed filter calls it absent", obj(i))
		}
	}
	gone := 0
	for i := range 10 {
		if !tg.objs.mayHold(obj(i)) {
			gone++
		}
	}
	if gone < 9 {
		t.Errorf("%d of 10 removed objects still in the renewed filter, want (about) none", 10-gone)
	}
	// And they read as missing, with the filter's word alone.
	if n, err := tg.Read(ctx, obj(0), 0, make([]byte, 1)); err != nil || n != 0 {
		t.Errorf("read of a removed object: %d bytes, %v; want 0, nil", n, err)
	}
}
