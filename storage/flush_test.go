package storage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/storage/vfs"
)

// syncCounter is an in-memory file system that counts SyncFS calls.
type syncCounter struct {
	*vfs.MemFS
	mu    sync.Mutex
	dirs  []string
	fails error
}

func (s *syncCounter) SyncFS(dir string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dirs = append(s.dirs, dir)
	return s.fails
}

func (s *syncCounter) calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.dirs)
}

// TestBackgroundSync: a target syncs its file system after a write,
// truncate or remove, once per round however many objects changed, and
// not at all while nothing changes; the loop's last round runs when it
// stops; a failed sync is logged, not fatal.
func TestBackgroundSync(t *testing.T) {
	fs := &syncCounter{MemFS: newMemFS(t)}
	tg := openMem(t, fs, TargetOptions{})
	ctx := context.Background()
	a, b := proto.ObjectID{Ino: 1}, proto.ObjectID{Ino: 2}

	tg.flushWritten()
	if n := fs.calls(); n != 0 {
		t.Fatalf("a target nothing was written to synced %d times", n)
	}
	for _, obj := range []proto.ObjectID{a, b} {
		if _, err := tg.Write(ctx, obj, 0, pattern(1, 5000)); err != nil {
			t.Fatal(err)
		}
	}
	tg.flushWritten()
	tg.flushWritten()
	if n := fs.calls(); n != 1 || fs.dirs[0] != "/t/target" {
		t.Fatalf("two objects written, two rounds: %d syncs of %v, want one of /t/target", n, fs.dirs)
	}
	for i, change := range []func() error{
		func() error { return tg.Truncate(ctx, a, 100) },
		func() error { return tg.Remove(ctx, b) },
	} {
		if err := change(); err != nil {
			t.Fatal(err)
		}
		tg.flushWritten()
		if n := fs.calls(); n != 2+i {
			t.Fatalf("change %d: %d syncs, want %d", i, n, 2+i)
		}
	}

	fs.fails = errors.New("injected: writeback error")
	if _, err := tg.Write(ctx, a, 0, []byte("x")); err != nil {
		t.Fatal(err)
	}
	tg.flushWritten() // logged
	fs.fails = nil

	// The loop: a write, then the stop's last round syncs it.
	if _, err := tg.Write(ctx, a, 0, []byte("y")); err != nil {
		t.Fatal(err)
	}
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	before := fs.calls()
	go func() { defer close(done); tg.flushLoop(lctx, hangGuardInterval) }()
	cancel()
	<-done
	if n := fs.calls(); n != before+1 {
		t.Fatalf("stopping the loop with a write pending: %d syncs, want %d", n, before+1)
	}
}

// hangGuardInterval is a loop interval no test waits for.
const hangGuardInterval = 1 << 62

// TestSyncFSDisk: the real file system's SyncFS syncs a directory's file
// system, and names the directory when it cannot.
func TestSyncFSDisk(t *testing.T) {
	syncer, ok := vfs.Default.(vfs.FSSyncer)
	if !ok {
		t.Fatal("the OS file system has no SyncFS: targets on disk would never be synced in the background")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syncer.SyncFS(dir); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")
	if err := syncer.SyncFS(missing); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("SyncFS of a missing directory: %v, want ENOENT", err)
	}
}

// TestRemoveMissingObject: removing an object that was never made (the
// objects of a file never written, which every unlink queues) makes no
// system call (the presence filter knows it has no file) and so asks for
// no background sync; leftovers of an interrupted creation (a sidecar and
// a version file without their data file, found when the target opens
// after the crash) are removed, and synced.
func TestRemoveMissingObject(t *testing.T) {
	for _, gen := range []uint64{0, 3} { // <ino>.<stripe> and <ino>.<gen>.<stripe> names
		t.Run(fmt.Sprintf("gen%d", gen), func(t *testing.T) {
			fs := &syncCounter{MemFS: newMemFS(t)}
			left := proto.ObjectID{Ino: 8, Gen: gen}
			leftPath := "/t/target/objects/08/" + objName(left)
			if err := fs.MkdirAll("/t/target/objects/08", 0o755); err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{leftPath + ".crc", leftPath + ".ver"} {
				f, err := fs.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
				if err != nil {
					t.Fatal(err)
				}
				f.Close()
			}
			counted := &callCounter{FS: fs}
			tg := openMem(t, counted, TargetOptions{})
			ctx := context.Background()

			before := counted.calls.Load()
			if err := tg.Remove(ctx, proto.ObjectID{Ino: 7, Stripe: 1, Gen: gen}); err != nil {
				t.Fatal(err)
			}
			if n := counted.calls.Load() - before; n != 0 {
				t.Errorf("removing an object that was never made: %d file system calls, want none", n)
			}
			tg.flushWritten()
			if n := fs.calls(); n != 0 {
				t.Fatalf("removing a missing object: %d syncs, want none", n)
			}

			if err := tg.Remove(ctx, left); err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{leftPath, leftPath + ".crc", leftPath + ".ver"} {
				if _, err := fs.Stat(name); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s after the removal: %v, want it gone", filepath.Base(name), err)
				}
			}
			tg.flushWritten()
			if n := fs.calls(); n != 1 {
				t.Fatalf("removing leftovers: %d syncs, want 1", n)
			}
		})
	}
}

// callCounter counts the calls that name a file (opens, removals, stats).
type callCounter struct {
	vfs.FS
	calls atomic.Int64
}

func (c *callCounter) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	c.calls.Add(1)
	return c.FS.OpenFile(name, flag, perm)
}

func (c *callCounter) Remove(name string) error {
	c.calls.Add(1)
	return c.FS.Remove(name)
}

func (c *callCounter) Stat(name string) (os.FileInfo, error) {
	c.calls.Add(1)
	return c.FS.Stat(name)
}

// SyncFS passes the background sync on to the counted file system.
func (c *callCounter) SyncFS(dir string) error { return c.FS.(vfs.FSSyncer).SyncFS(dir) }
