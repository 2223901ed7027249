package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/weft-fs/weft/internal/testcluster"
	"github.com/weft-fs/weft/internal/testutil"
)

// fuseFD returns the number of the descriptor process pid has open on
// /dev/fuse.
func fuseFD(t *testing.T, pid int) int {
	t.Helper()
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && l == "/dev/fuse" {
			n, err := strconv.Atoi(e.Name())
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("process %d has no descriptor on /dev/fuse", pid)
	return -1
}

// startMount starts `weft mount` of c at a new mountpoint, with extra
// flags, and waits until it is mounted. The process is killed and the
// mountpoint detached at cleanup, whatever happened.
func startMount(t *testing.T, c *testcluster.Cluster, extra ...string) (*exec.Cmd, string, *testutil.LogBuffer, chan struct{}) {
	t.Helper()
	mnt := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"mount", "--meta", c.MetaAddr(), "--keys", c.Keys("client"), "--timeout", "3s"}, extra...)
	cmd := exec.Command(c.Bin(), append(args, mnt)...)
	log := &testutil.LogBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
		syscall.Unmount(mnt, syscall.MNT_DETACH)
	})
	for deadline := time.Now().Add(hangGuard); !testcluster.IsFuseMount(mnt); time.Sleep(50 * time.Millisecond) {
		select {
		case <-done:
			t.Fatalf("weft mount exited: %v\n%s", cmd.ProcessState, log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("weft mount did not mount %s\n%s", mnt, log.String())
		}
	}
	// The cluster was started without a mount, so nothing waited for its
	// targets to register: a create before that fails (EIO on a loaded
	// machine). Wait for them, as testcluster.Start does through a mount.
	waitFor(t, "the cluster's targets up", func() bool {
		ts, err := testcluster.DF(mnt)
		if err != nil || len(ts) == 0 {
			return false
		}
		for _, ti := range ts {
			if !ti.Up {
				return false
			}
		}
		return true
	})
	return cmd, mnt, log, done
}

// TestMountShutdownBounded: SIGTERM makes `weft mount` exit, and leave no
// mount behind, even when the unmount cannot complete: while another
// process holds a duplicate of its FUSE descriptor, and while a file on
// the mount is open. It unmounts, detaches lazily after
// --unmount-timeout, aborts the connection if its serving loops still do
// not end, and says so in its log.
func TestMountShutdownBounded(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Servers: 1, Targets: 1, Mounts: -1})
	wait := func(t *testing.T, done chan struct{}, log *testutil.LogBuffer) {
		t.Helper()
		select {
		case <-done:
		case <-time.After(hangGuard):
			t.Fatalf("weft mount did not exit after SIGTERM\n%s", log.String())
		}
	}

	t.Run("fuse fd held by another process", func(t *testing.T) {
		cmd, mnt, log, done := startMount(t, c, "--unmount-timeout", "2s")
		if err := os.WriteFile(filepath.Join(mnt, "f"), []byte("data"), 0o644); err != nil {
			t.Fatal(err)
		}
		// This test process takes a duplicate of the mount's /dev/fuse
		// descriptor (pidfd_getfd), so the connection outlives the mount
		// process's own descriptor.
		pidfd, err := unix.PidfdOpen(cmd.Process.Pid, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(pidfd)
		held, err := unix.PidfdGetfd(pidfd, fuseFD(t, cmd.Process.Pid), 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(held)
		// And a process in another mount namespace keeps the mount itself
		// (a private copy: the unmount here does not reach it), so the
		// kernel does not end the connection at the unmount.
		unshare := exec.Command("unshare", "--mount", "--propagation", "private", "sleep", "3600")
		if err := unshare.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { unshare.Process.Kill(); unshare.Wait() }()
		proc := filepath.Join("/proc", strconv.Itoa(unshare.Process.Pid))
		for deadline := time.Now().Add(hangGuard); ; time.Sleep(20 * time.Millisecond) {
			// Once unshare runs sleep, its namespace is set up (private).
			comm, _ := os.ReadFile(filepath.Join(proc, "comm"))
			mi, _ := os.ReadFile(filepath.Join(proc, "mountinfo"))
			if string(comm) == "sleep\n" && strings.Contains(string(mi), " "+mnt+" ") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("unshare's namespace never showed %s", mnt)
			}
		}

		cmd.Process.Signal(syscall.SIGTERM)
		wait(t, done, log)
		t.Logf("weft mount's log (%v):\n%s", cmd.ProcessState, log.String())
		if testcluster.IsFuseMount(mnt) {
			t.Errorf("%s is still mounted after weft mount exited", mnt)
		}
		if !strings.Contains(log.String(), "aborted the FUSE connection") {
			t.Errorf("the log does not say the connection was aborted")
		}
	})

	t.Run("file open on the mount", func(t *testing.T) {
		cmd, mnt, log, done := startMount(t, c, "--unmount-timeout", "2s")
		f, err := os.Create(filepath.Join(mnt, "open"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		cmd.Process.Signal(syscall.SIGTERM)
		wait(t, done, log)
		t.Logf("weft mount's log:\n%s", log.String())
		if testcluster.IsFuseMount(mnt) {
			t.Errorf("%s is still mounted after weft mount exited", mnt)
		}
		if !strings.Contains(log.String(), "detached lazily") {
			t.Errorf("the log does not say the mount was detached lazily")
		}
		// The open file's mount is gone with its daemon: it fails, it does
		// not hang.
		if _, err := f.Write([]byte("y")); err == nil {
			t.Errorf("write to a file of a mount whose daemon exited succeeded")
		}
	})
}
