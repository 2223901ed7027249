package tests

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/weft-fs/weft/internal/testcluster"
)

// TestOpenFromLeaseCache: a read-only open of an empty file a mount holds
// under a lease is made without asking the leader (client.OpenCached), and
// such a handle still keeps its file as any open handle does: through
// another mount's write and unlink, and through its own mount's unlink
// (docs/caching.md, "Opens from the cache").
func TestOpenFromLeaseCache(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{Mounts: 2})
	a, b := c.Mount(0), c.Mount(1)
	if err := os.Mkdir(filepath.Join(a, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	mk := func(t *testing.T, name string, mode os.FileMode) (onA, onB string) {
		t.Helper()
		onA, onB = filepath.Join(a, "d", name), filepath.Join(b, "d", name)
		if err := os.WriteFile(onA, nil, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(onA, mode); err != nil { // whatever the umask
			t.Fatal(err)
		}
		warmLeases(t, b, onB, false)
		return onA, onB
	}
	// openB opens path on B read-only and reports whether B made the open
	// from its cache.
	openB := func(t *testing.T, path string) (*os.File, bool) {
		t.Helper()
		before := mountLeases(t, b)
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f, mountLeases(t, b).Opens > before.Opens
	}
	// openCachedB makes name (0644) on A and opens it on B, which must make
	// the open from its cache.
	// The mount opens from its cache only attributes a poll answered after
	// it cached them confirmed (a fifth of the lease term at most): until
	// then the open asks the leader, and is tried again.
	openCachedB := func(t *testing.T, name string) (onA, onB string, f *os.File) {
		t.Helper()
		onA, onB = mk(t, name, 0o644)
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			f, cached := openB(t, onB)
			if cached {
				return onA, onB, f
			}
			f.Close()
			if time.Now().After(deadline) {
				t.Fatalf("no open of an empty file B holds under a lease was made from its cache: %+v", mountLeases(t, b))
			}
		}
	}
	readAll := func(t *testing.T, f *os.File) []byte {
		t.Helper()
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(f)
		if err != nil {
			t.Fatalf("read %s: %v", f.Name(), err)
		}
		return got
	}

	t.Run("empty file", func(t *testing.T) {
		_, _, f := openCachedB(t, "empty")
		if got := readAll(t, f); len(got) != 0 {
			t.Errorf("read %q from an empty file", got)
		}
	})

	t.Run("not readable by every class", func(t *testing.T) {
		// The tests run as root, which the server may squash: the mount
		// opens from its cache only what root may read either way.
		_, fB := mk(t, "private", 0o600)
		if _, cached := openB(t, fB); cached {
			t.Errorf("root's open of a 0600 file was made from the cache")
		}
	})

	t.Run("written and unlinked elsewhere while open", func(t *testing.T) {
		fA, fB, f := openCachedB(t, "shared")
		pinned := mountLeases(t, b).Pinned
		w, err := os.OpenFile(fA, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte("hello")); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if got := mountLeases(t, b).Pinned; got <= pinned {
			t.Errorf("B acknowledged A's write without pinning its open (pinned %d, %d before)", got, pinned)
		}
		if err := os.Remove(fA); err != nil {
			t.Fatal(err)
		}
		mustNotExist(t, "after A's unlink", fB)
		fi, err := f.Stat()
		if err != nil {
			t.Fatalf("fstat on B of the unlinked file: %v", err)
		}
		if n := fi.Sys().(*syscall.Stat_t).Nlink; n != 0 || fi.Size() != 5 {
			t.Errorf("fstat on B of the unlinked file: nlink %d size %d, want 0 and 5", n, fi.Size())
		}
		if got := readAll(t, f); !bytes.Equal(got, []byte("hello")) {
			t.Errorf("B read %q from its open handle after A wrote and unlinked the file, want %q", got, "hello")
		}
	})

	t.Run("locked through it", func(t *testing.T) {
		// A lock file: opened read-only and locked. The lock goes
		// through a handle the leader counts (pinned first).
		fA, _, f := openCachedB(t, "lock")
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			t.Fatalf("flock on B through a handle opened from the cache: %v", err)
		}
		g, err := os.Open(fA)
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		if err := unix.Flock(int(g.Fd()), unix.LOCK_EX|unix.LOCK_NB); !errors.Is(err, unix.EWOULDBLOCK) {
			t.Errorf("flock on A while B holds the lock: %v, want EWOULDBLOCK", err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		// The kernel drops a flock lock with the RELEASE it sends after
		// close returned: wait for it (generously: a slow machine).
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			err := unix.Flock(int(g.Fd()), unix.LOCK_EX|unix.LOCK_NB)
			if err == nil {
				break
			}
			if !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(deadline) {
				t.Fatalf("flock on A after B closed its descriptor: %v", err)
			}
		}
	})

	t.Run("unlinked by its own mount while open", func(t *testing.T) {
		_, fB, f := openCachedB(t, "own")
		pinned := mountLeases(t, b).Pinned
		if err := os.Remove(fB); err != nil {
			t.Fatal(err)
		}
		if got := mountLeases(t, b).Pinned; got <= pinned {
			t.Errorf("B removed the file's last name without pinning its open (pinned %d, %d before)", got, pinned)
		}
		fi, err := f.Stat()
		if err != nil {
			t.Fatalf("fstat of the unlinked file: %v", err)
		}
		if n := fi.Sys().(*syscall.Stat_t).Nlink; n != 0 {
			t.Errorf("fstat of the unlinked file: nlink %d, want 0", n)
		}
		if got := readAll(t, f); len(got) != 0 {
			t.Errorf("read %q from the unlinked empty file", got)
		}
	})
}

// TestOpenFromLeaseCacheAcrossRestart: a handle a mount opened from its
// lease cache is registered with a restarted metadata server (which lost
// every lease and open count), so that an unlink elsewhere does not have
// the file reclaimed under it once the grace period is over.
func TestOpenFromLeaseCacheAcrossRestart(t *testing.T) {
	t.Parallel()
	const grace = 3 * time.Second
	c := testcluster.Start(t, testcluster.Options{Mounts: 2, MetaArgs: []string{"--orphan-grace", grace.String()}})
	a, b := c.Mount(0), c.Mount(1)
	fA, fB := filepath.Join(a, "f"), filepath.Join(b, "f")
	if err := os.WriteFile(fA, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(fA, 0o644); err != nil {
		t.Fatal(err)
	}
	warmLeases(t, b, fB, false)
	var f *os.File
	for deadline := time.Now().Add(60 * time.Second); f == nil; time.Sleep(20 * time.Millisecond) {
		before := mountLeases(t, b).Opens
		g, err := os.Open(fB)
		if err != nil {
			t.Fatal(err)
		}
		if mountLeases(t, b).Opens > before {
			f = g
			break
		}
		g.Close()
		if time.Now().After(deadline) {
			t.Fatalf("no open was made from B's cache: %+v", mountLeases(t, b))
		}
	}
	defer f.Close()
	pinned := mountLeases(t, b).Pinned

	c.StopMeta()
	c.StartMeta()
	restarted := time.Now()
	// B learns of the restart (its session renewal or lease poll) and
	// registers the handle with the new server.
	for deadline := time.Now().Add(60 * time.Second); mountLeases(t, b).Pinned <= pinned; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("B never registered its open from the cache with the restarted server: %+v", mountLeases(t, b))
		}
	}
	if err := os.Remove(fA); err != nil {
		t.Fatal(err)
	}
	// Past the grace period the server reclaims the orphans nobody
	// registered; this one B holds.
	time.Sleep(time.Until(restarted.Add(grace + 2*time.Second)))
	fi, err := f.Stat()
	if err != nil {
		t.Fatalf("fstat on B after the restart, the unlink and the grace period: %v (the file was reclaimed under its open handle)", err)
	}
	if n := fi.Sys().(*syscall.Stat_t).Nlink; n != 0 {
		t.Errorf("fstat on B of the unlinked file: nlink %d, want 0", n)
	}
}
