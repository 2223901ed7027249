package meta

import (
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weft-fs/weft/meta/store"
	"github.com/weft-fs/weft/proto"
)

// gateStore is a Mem store whose synced commits wait while the gate is
// closed, so a test can hold a group's sync and let proposals queue.
type gateStore struct {
	*store.Mem
	mu      sync.Mutex
	gate    chan struct{} // nil: open
	blocked int           // synced commits that reached the gate
}

func (g *gateStore) close() {
	g.mu.Lock()
	g.gate = make(chan struct{})
	g.mu.Unlock()
}

func (g *gateStore) open() {
	g.mu.Lock()
	if g.gate != nil {
		close(g.gate)
	}
	g.gate = nil
	g.mu.Unlock()
}

// reached returns how many synced commits have reached the gate, open or
// closed (the server's own at start included).
func (g *gateStore) reached() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.blocked
}

func (g *gateStore) wait() {
	g.mu.Lock()
	gate := g.gate
	g.blocked++
	g.mu.Unlock()
	if gate != nil {
		<-gate
	}
}

func (g *gateStore) Sync() error {
	g.wait()
	return g.Mem.Sync()
}

func (g *gateStore) NewBatch() store.Batch { return gateBatch{g.Mem.NewBatch(), g} }

type gateBatch struct {
	store.Batch
	g *gateStore
}

func (b gateBatch) Commit(sync bool) error {
	if sync {
		b.g.wait()
	}
	return b.Batch.Commit(sync)
}

func (s *Server) queued() int { return s.local.queued() }

// TestGroupOneSync holds the first group's sync while more commands queue,
// and checks that all of them, including a failing last one, become one
// group made durable by one sync.
func TestGroupOneSync(t *testing.T) {
	gs := &gateStore{Mem: store.NewMem()}
	e := newEnv(t, func(o *Options) { o.Store = gs })
	// Runs before the env's cleanup: a test that failed with the gate
	// closed would otherwise leave Server.Close waiting for its proposals.
	t.Cleanup(gs.open)
	syncs0, groups0 := gs.Syncs(), e.groups()
	// The server's start synced commits of its own (formatting the
	// store): the first group's is the next to reach the gate.
	reached0 := gs.reached()
	gs.close()
	var wg sync.WaitGroup
	errs := make([]error, 10)
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, errs[0] = e.srv.Mkdir(ctx, proto.RootIno, "first", 0755, 0, 0)
	}()
	waitFor(t, "the first group to reach its sync", func() bool { return gs.reached() == reached0+1 })
	for i := 1; i < len(errs); i++ {
		name := fmt.Sprint("d", i)
		if i == len(errs)-1 {
			name = "d1" // fails: exists by then, and writes nothing
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = e.srv.Mkdir(ctx, proto.RootIno, name, 0755, 0, 0)
		}()
		waitFor(t, "a queued proposal", func() bool { return e.srv.queued() == i })
	}
	gs.open()
	wg.Wait()
	for i, err := range errs[:len(errs)-1] {
		if err != nil {
			t.Fatalf("mkdir %d: %v", i, err)
		}
	}
	if !errors.Is(errs[len(errs)-1], syscall.EEXIST) {
		t.Fatalf("duplicate mkdir: %v, want EEXIST", errs[len(errs)-1])
	}
	if g := e.groups() - groups0; g != 2 {
		t.Fatalf("%d groups, want 2 (the first command, then the 9 queued behind it)", g)
	}
	if s := gs.Syncs() - syncs0; s != 2 {
		t.Fatalf("%d syncs for 2 groups", s)
	}
	checkInvariants(t, gs)
}

func (e *env) groups() uint64 {
	g, _ := e.srv.GroupStats()
	return g
}

// TestReleaseNoSync checks that opening and releasing a linked file costs
// no command and no sync (open counts are in memory), and that releasing
// the last handle of an unlinked file reclaims it.
func TestReleaseNoSync(t *testing.T) {
	mem := store.NewMem()
	e := newEnv(t, func(o *Options) { o.Store = mem })
	e.addTarget("t1", 1<<30)
	f, _, _, err := e.srv.CreateOpen(ctx, proto.CreateIn{Parent: proto.RootIno, Name: "f", Mode: 0644}, proto.AccessReadWrite)
	e.must(err)
	syncs0, groups0 := mem.Syncs(), e.groups()
	for range 3 {
		_, _, err := e.srv.Open(ctx, f.Ino, proto.AccessRead)
		e.must(err)
	}
	e.must(e.srv.Release(ctx, f.Ino))
	e.must(e.srv.ReleaseMany(ctx, []proto.Ino{f.Ino, f.Ino}))
	if s, g := mem.Syncs()-syncs0, e.groups()-groups0; s != 0 || g != 0 {
		t.Fatalf("open and release of a linked file: %d syncs, %d groups", s, g)
	}
	if n := e.srv.OpenCount(f.Ino); n != 1 {
		t.Fatalf("open count %d, want 1", n)
	}
	e.must(e.srv.Unlink(ctx, proto.RootIno, "f"))
	e.must(e.srv.Release(ctx, f.Ino))
	e.waitReclaim(t)
	if _, err := e.srv.GetAttr(ctx, f.Ino); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("unlinked file after its last release: %v", err)
	}
}

// TestAckedIsDurable runs concurrent mutations on pebble over a crashable
// in-memory file system, then crashes it (every unsynced write is lost)
// and checks that each change a caller was told succeeded survived.
func TestAckedIsDurable(t *testing.T) {
	fs := vfs.NewCrashableMem()
	st, err := store.OpenPebble("meta", store.PebbleOptions{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	// The durable mark is rewritten as often as it can be, so the crash
	// may catch it at any point: it must never claim more than survived
	// (newEnv on the crashed store fails with ErrRollback if it did).
	e := newEnv(t, func(o *Options) { o.Store = st; o.MarkInterval = time.Microsecond })
	e.addTarget("t1", 1<<30)
	type want struct {
		name string
		size uint64
		gone bool
	}
	const workers, each = 8, 30
	wants := make([][]want, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				name := fmt.Sprintf("w%d-%d", w, i)
				a, _, _, err := e.srv.CreateOpen(ctx, proto.CreateIn{Parent: proto.RootIno, Name: name, Mode: 0644}, proto.AccessReadWrite)
				if err != nil {
					t.Error(err)
					return
				}
				wt := want{name: name}
				switch i % 3 {
				case 1:
					if _, err := e.srv.WriteDone(ctx, a.Ino, uint64(i+1), 0, proto.NoBlocks); err != nil {
						t.Error(err)
						return
					}
					wt.size = uint64(i + 1)
				case 2:
					if err := e.srv.Unlink(ctx, proto.RootIno, name); err != nil {
						t.Error(err)
						return
					}
					wt.gone = true
				}
				e.srv.Release(ctx, a.Ino)
				wants[w] = append(wants[w], wt)
			}
		}()
	}
	wg.Wait()
	// Crash now, with the server still running: only what was synced stays.
	crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	st2, err := store.OpenPebble("meta", store.PebbleOptions{FS: crashed})
	if err != nil {
		t.Fatal(err)
	}
	e2 := newEnv(t, func(o *Options) { o.Store = st2 })
	for _, ws := range wants {
		for _, w := range ws {
			a, err := e2.srv.Lookup(ctx, proto.RootIno, w.name)
			switch {
			case w.gone && !errors.Is(err, syscall.ENOENT):
				t.Errorf("%s: unlinked before the crash, now %v", w.name, err)
			case !w.gone && err != nil:
				t.Errorf("%s: created before the crash, now %v", w.name, err)
			case !w.gone && a.Size != w.size:
				t.Errorf("%s: size %d, want %d", w.name, a.Size, w.size)
			}
		}
	}
	e2.srv.Close()
	checkInvariants(t, st2)
}
