package tests

import (
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/weft-fs/weft/internal/testcluster"
)

// TestMutationsIgnoreInterrupts: a signal to a process waiting in a FUSE
// request makes the kernel send the mount an interrupt. The Go runtime
// signals its own threads all the time (SIGURG), and callers retry on
// EINTR (Go's os package does): a create or mkdir that the mount answered
// with EINTR after the metadata service applied it would fail on the
// retry with EEXIST. The mount therefore serves requests that change
// state to their end (fuse/locks.go, uninterrupted; the client's own RPC
// contexts ignore cancellation too, client.rpcCtx). Here raw system calls
// (no retry) create, write, rename and remove names from a thread flooded
// with SIGURG: every call must succeed.
func TestMutationsIgnoreInterrupts(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Servers: 1, Targets: 1})
	d := filepath.Join(c.Mount(0), "intr")
	if err := unix.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	// The calls below run on this thread, and the signals go to it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	pid, tid := unix.Getpid(), unix.Gettid()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	sent := 0
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = unix.Tgkill(pid, tid, unix.SIGURG)
			sent++
			time.Sleep(20 * time.Microsecond)
		}
	})
	defer func() {
		close(stop)
		wg.Wait()
	}()
	const n = 100
	for i := range n {
		dir := filepath.Join(d, fmt.Sprintf("d%d", i))
		if err := unix.Mkdir(dir, 0o755); err != nil {
			t.Fatalf("mkdir %d under signals: %v", i, err)
		}
		f := filepath.Join(dir, "f")
		fd, err := unix.Open(f, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o644)
		if err != nil {
			t.Fatalf("create %d under signals: %v", i, err)
		}
		if _, err := unix.Write(fd, []byte("x")); err != nil {
			t.Fatalf("write %d under signals: %v", i, err)
		}
		if err := unix.Close(fd); err != nil {
			t.Fatalf("close %d under signals: %v", i, err)
		}
		if err := unix.Rename(f, f+".r"); err != nil {
			t.Fatalf("rename %d under signals: %v", i, err)
		}
		if err := unix.Unlink(f + ".r"); err != nil {
			t.Fatalf("unlink %d under signals: %v", i, err)
		}
		if err := unix.Rmdir(dir); err != nil {
			t.Fatalf("rmdir %d under signals: %v", i, err)
		}
	}
	t.Logf("%d requests of each kind, %d signals sent", n, sent)
}
