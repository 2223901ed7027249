package tests

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weft-fs/weft/internal/testcluster"
)

// sessionLease is the metadata server's session lease in these tests:
// short, so that they are quick, but far above the mount's renewal period
// (a third of it) even on a loaded machine: with 2 s, a mount starved of
// CPU for 2 s under a parallel test run lost its session before the test
// froze it. The tests wait for conditions, never for a time.
const sessionLease = "8s"

// objectsOf counts the object files of inode ino on every target.
func objectsOf(c *testcluster.Cluster, ino uint64) int {
	prefix := fmt.Sprintf("%d.", ino)
	n := 0
	for _, td := range c.AllTargetDirs() {
		filepath.WalkDir(td, func(path string, de fs.DirEntry, err error) error {
			if err == nil && de.Type().IsRegular() && strings.HasPrefix(de.Name(), prefix) &&
				strings.Contains(path, string(filepath.Separator)+"objects"+string(filepath.Separator)) {
				n++
			}
			return nil
		})
	}
	return n
}

// waitFor polls cond until it holds, failing after a generous timeout
// (a guard against hangs, not a timing assertion).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(hangGuard)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// openUnlinked creates path, writes data, fsyncs, unlinks it and returns
// the still-open file and its inode number.
func openUnlinked(t *testing.T, path string, data []byte) (*os.File, uint64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_EXCL, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	return f, st.Ino
}

// TestKilledMountFilesReclaimed: a mount killed with kill -9 while it holds
// an unlinked file open loses its session when the lease runs out; the
// server drops its handles and the file's objects are removed from the
// targets, with no restart. Another mount's open unlinked file stays,
// readable, until that mount closes it.
func TestKilledMountFilesReclaimed(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Mounts: 2, Targets: 2, MetaArgs: []string{"--session-lease", sessionLease}})
	dead := pattern(11, 0, 3<<20)
	live := pattern(12, 0, 3<<20)
	fd, deadIno := openUnlinked(t, filepath.Join(c.Mount(0), "dead"), dead)
	defer fd.Close()
	fl, liveIno := openUnlinked(t, filepath.Join(c.Mount(1), "live"), live)
	defer fl.Close()
	if objectsOf(c, deadIno) == 0 || objectsOf(c, liveIno) == 0 {
		t.Fatalf("no objects on the targets for inodes %d (%d) and %d (%d)", deadIno, objectsOf(c, deadIno), liveIno, objectsOf(c, liveIno))
	}

	c.StopMount(0) // kill -9
	waitFor(t, "the killed mount's unlinked file to be removed from the targets", func() bool {
		return objectsOf(c, deadIno) == 0
	})
	if !strings.Contains(c.Log("meta"), "session expired") {
		t.Errorf("the metadata server did not log the expired session:\n%s", c.Log("meta"))
	}
	if n := objectsOf(c, liveIno); n == 0 {
		t.Fatal("the live mount's open unlinked file was removed")
	}
	got := make([]byte, len(live))
	if _, err := fl.ReadAt(got, 0); err != nil {
		t.Fatalf("read the live mount's open unlinked file: %v", err)
	}
	if !bytes.Equal(got, live) {
		t.Fatalf("the live mount's open unlinked file changed: %s", firstDiff(got, live))
	}
	if err := fl.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the live mount's file to be removed after its close", func() bool {
		return objectsOf(c, liveIno) == 0
	})
}

// TestStoppedMountHandlesStale: a mount stopped (SIGSTOP) for longer than
// its lease loses its session. Once continued, a handle it had open fails
// with ESTALE (or EIO) instead of writing into a file the server forgot it
// had open; the mount logs why; opening the file again works.
func TestStoppedMountHandlesStale(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Targets: 2, MetaArgs: []string{"--session-lease", sessionLease}})
	mnt := c.Mount(0)
	path := filepath.Join(mnt, "f")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte("before")); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}

	c.FreezeMount(0)
	waitFor(t, "the metadata server to expire the stopped mount's session", func() bool {
		return strings.Contains(c.Log("meta"), "session expired")
	})
	c.ThawMount(0)

	err = within(t, "write and fsync through the stale handle", func() error {
		_, werr := f.WriteAt([]byte("stale write"), 0)
		return errors.Join(werr, f.Sync())
	})
	if e := errnoOf(err); e != syscall.ESTALE && e != syscall.EIO {
		t.Fatalf("write and fsync through a handle of the expired session: %v, want ESTALE or EIO", err)
	}
	t.Logf("through the stale handle: %v", err)
	f.Close()

	g, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("open after the session expired: %v", err)
	}
	if _, err := g.WriteAt([]byte("after!"), 0); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatalf("close of a handle of the new session: %v", err)
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != "after!" {
		t.Fatalf("file after reopening: %q %v", got, err)
	}
	if log := c.Log("mount-0"); !strings.Contains(log, "metadata session expired") {
		t.Errorf("the mount did not log the expired session:\n%s", log)
	}
}

// TestMetaRestartKeepsOpenFiles: after kill -9 and restart of the metadata
// server, which keeps sessions and open counts in memory only, a mount
// re-registers the files it holds open within the grace period: its open
// unlinked file survives the end of the grace period, when a file unlinked
// meanwhile that nobody holds is deleted, and stays readable until closed.
func TestMetaRestartKeepsOpenFiles(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Targets: 2, MetaArgs: []string{"--session-lease", sessionLease, "--orphan-grace", "3s", "--log-level", "info"}})
	mnt := c.Mount(0)
	held := pattern(21, 0, 2<<20)
	f, heldIno := openUnlinked(t, filepath.Join(mnt, "held"), held)
	defer f.Close()
	other := filepath.Join(mnt, "other")
	if err := os.WriteFile(other, pattern(22, 0, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(other, &st); err != nil {
		t.Fatal(err)
	}

	c.StopMeta() // kill -9
	c.StartMeta()
	waitFor(t, "the mount to re-register its open file", func() bool {
		return strings.Contains(c.Log("meta"), "session re-registered after restart")
	})
	if err := os.Remove(other); err != nil {
		t.Fatal(err)
	}
	// The unlinked file nobody holds goes when the grace period ends
	// (or at once, if it already had).
	waitFor(t, "the unheld unlinked file to be removed from the targets", func() bool {
		return objectsOf(c, st.Ino) == 0
	})
	if objectsOf(c, heldIno) == 0 {
		t.Fatal("the mount's open unlinked file was removed after the restart")
	}
	got := make([]byte, len(held))
	if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, held) {
		t.Fatalf("read the open unlinked file after the restart: %v %s", err, firstDiff(got, held))
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the file to be removed after its close", func() bool { return objectsOf(c, heldIno) == 0 })
}
