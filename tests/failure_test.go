package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weft-fs/weft/internal/testcluster"
)

// mountTimeout is the --timeout the failure tests give their mounts.
const mountTimeout = 3 * time.Second

func isIOFailure(err error) bool {
	return errors.Is(err, syscall.EIO) || errors.Is(err, syscall.ETIMEDOUT)
}

// timed runs f, fails the test if it hangs, and returns its error and
// how long it took.
func timed(t *testing.T, what string, f func() error) (error, time.Duration) {
	t.Helper()
	start := time.Now()
	err := within(t, what, f)
	return err, time.Since(start)
}

// TestStorageFailure stops a storage server: I/O to files on its targets
// fails with EIO or ETIMEDOUT within the mount's --timeout instead of
// hanging, files on the other server still work, and once it is back the
// same mounts work again by themselves.
func TestStorageFailure(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Servers: 2, Targets: 4, Mounts: 2, Timeout: "3s"})
	mnt := c.Mount(0)
	d := filepath.Join(mnt, "d")
	os.Mkdir(d, 0o755)
	weft(t, c, "setstripe", "-c", "1", "-S", "1M", d)

	df, server := targetServers(t, c, mnt)
	// One file on a target of server 0 (victim) and one on server 1.
	var victim, survivor string
	for i := 0; i < 40 && (victim == "" || survivor == ""); i++ {
		p := filepath.Join(d, fmt.Sprintf("f%d", i))
		if err := os.WriteFile(p, pattern(uint32(i), 0, 2<<20), 0o644); err != nil {
			t.Fatal(err)
		}
		l, err := testcluster.GetLayout(p)
		if err != nil || len(l.Targets) != 1 {
			t.Fatalf("layout of %s: %+v %v", p, l, err)
		}
		s, ok := server[l.Targets[0]]
		if !ok {
			t.Fatalf("target %d not in df %+v (storage addrs %s %s)", l.Targets[0], df, c.StorageAddr(0), c.StorageAddr(1))
		}
		if s == 0 && victim == "" {
			victim = p
		} else if s == 1 && survivor == "" {
			survivor = p
		}
	}
	if victim == "" || survivor == "" {
		t.Fatalf("40 files with stripe count 1 did not land on both servers")
	}
	rel := func(p string) string { r, _ := filepath.Rel(mnt, p); return r }
	var vi int
	fmt.Sscanf(filepath.Base(victim), "f%d", &vi)
	victimWant := pattern(uint32(vi), 0, 2<<20)

	c.StopStorage(0)
	fresh := filepath.Join(c.Mount(1), rel(victim)) // never read on mount 1: not cached

	// Read.
	err, took := timed(t, "read from a stopped server", func() error {
		_, err := os.ReadFile(fresh)
		return err
	})
	t.Logf("read from a stopped server: %v after %v", err, took.Round(time.Millisecond))
	if !isIOFailure(err) {
		t.Errorf("read from a stopped server: %v, want EIO or ETIMEDOUT", err)
	}
	// Write (the error may show at write, fsync or close).
	err, took = timed(t, "write to a stopped server", func() error {
		f, err := os.OpenFile(victim, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		_, werr := f.WriteAt(pattern(99, 0, 1<<20), 0)
		serr := f.Sync()
		cerr := f.Close()
		return errors.Join(werr, serr, cerr)
	})
	t.Logf("write to a stopped server: %v after %v", err, took.Round(time.Millisecond))
	if !isIOFailure(err) {
		t.Errorf("write+fsync to a stopped server: %v, want EIO or ETIMEDOUT", err)
	}
	// The other server's files still work.
	err, _ = timed(t, "read from the live server", func() error {
		got, err := os.ReadFile(filepath.Join(c.Mount(1), rel(survivor)))
		if err == nil && len(got) != 2<<20 {
			err = fmt.Errorf("short read %d", len(got))
		}
		return err
	})
	if err != nil {
		t.Errorf("read from the live server while the other is down: %v", err)
	}

	c.StartStorage(0)
	start := time.Now()
	var got []byte
	for {
		got, err = os.ReadFile(fresh)
		if err == nil || time.Since(start) > hangGuard {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("mount 1 read the file again %v after the server restarted (%v)", time.Since(start).Round(time.Millisecond), err)
	if err != nil {
		t.Fatalf("mount did not recover within %v after the server came back: %v", hangGuard, err)
	}
	// The failed write may or may not have reached the object; the first
	// MiB is either old or new data, the rest is old.
	if !bytes.Equal(got[1<<20:], victimWant[1<<20:]) {
		t.Errorf("after recovery: %s", firstDiff(got[1<<20:], victimWant[1<<20:]))
	}
	// Writes work again through the same mount.
	nw := pattern(77, 0, 1<<20)
	if err := os.WriteFile(victim, nw, 0o644); err != nil {
		t.Fatalf("write after recovery: %v", err)
	}
	if got, err := os.ReadFile(fresh); err != nil || !bytes.Equal(got, nw) {
		t.Errorf("read on the other mount after recovery: %v %s", err, firstDiff(got, nw))
	}
}

// TestMetaFailure stops the metadata server: namespace operations fail
// within the timeout and work again once it is back.
func TestMetaFailure(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Servers: 1, Targets: 2, Timeout: "3s"})
	mnt := c.Mount(0)
	c.StopMeta()
	for _, op := range []struct {
		name string
		f    func() error
	}{
		{"mkdir", func() error { return os.Mkdir(filepath.Join(mnt, "new"), 0o755) }},
		{"create", func() error { return os.WriteFile(filepath.Join(mnt, "newfile"), []byte("x"), 0o644) }},
		{"stat", func() error { _, err := os.Stat(filepath.Join(mnt, "never-seen")); return err }},
	} {
		err, took := timed(t, op.name+" without meta", op.f)
		t.Logf("%s without meta: %v after %v", op.name, err, took.Round(time.Millisecond))
		if !isIOFailure(err) {
			t.Errorf("%s without meta: %v, want EIO or ETIMEDOUT", op.name, err)
		}
	}
	c.StartMeta()
	start := time.Now()
	var err error
	for {
		err = os.Mkdir(filepath.Join(mnt, "after"), 0o755)
		if err == nil || time.Since(start) > hangGuard {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("mkdir worked again %v after meta restarted", time.Since(start).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("mount did not recover within %v after meta came back: %v", hangGuard, err)
	}
	// Creating a file needs targets the restarted meta server counts as
	// up: the ones it had registered are, for a grace period, before the
	// storage servers' next heartbeat.
	if err := os.WriteFile(filepath.Join(mnt, "after", "f0"), []byte("data"), 0o644); err != nil {
		t.Errorf("create right after meta restarted (%v): %v", time.Since(start).Round(time.Millisecond), err)
	}
	c.WaitTargetsUp(2)
	t.Logf("targets up again %v after meta restarted", time.Since(start).Round(time.Millisecond))
	if err := os.WriteFile(filepath.Join(mnt, "after", "f"), []byte("data"), 0o644); err != nil {
		t.Errorf("write after meta recovery: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(mnt, "after", "f")); string(got) != "data" {
		t.Errorf("read after meta recovery: %q %v", got, err)
	}
}

// TestFullTarget fills small targets: a write that does not fit fails with
// ENOSPC, and files that fit are intact.
func TestFullTarget(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Servers: 1, Targets: 4, Capacity: "4MiB"})
	mnt := c.Mount(0)
	small := pattern(5, 0, 1<<20)
	if err := os.WriteFile(filepath.Join(mnt, "small"), small, 0o644); err != nil {
		t.Fatalf("1 MiB on 16 MiB of targets: %v", err)
	}
	err, took := timed(t, "writing past capacity", func() error {
		f, err := os.Create(filepath.Join(mnt, "big"))
		if err != nil {
			return err
		}
		var werr error
		for off := int64(0); off < 32<<20 && werr == nil; off += 1 << 20 {
			_, werr = f.WriteAt(pattern(6, off, 1<<20), off)
		}
		return errors.Join(werr, f.Sync(), f.Close())
	})
	t.Logf("writing 32 MiB on 4x4 MiB targets: %v after %v", err, took.Round(time.Millisecond))
	if !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("writing 32 MiB on 4x4 MiB targets: %v, want ENOSPC", err)
	}
	if got, err := os.ReadFile(filepath.Join(mnt, "small")); err != nil || !bytes.Equal(got, small) {
		t.Errorf("small file after ENOSPC: %v %s", err, firstDiff(got, small))
	}
	// Space comes back when the big file goes.
	os.Remove(filepath.Join(mnt, "big"))
	start := time.Now()
	for {
		err = os.WriteFile(filepath.Join(mnt, "again"), pattern(8, 0, 4<<20), 0o644)
		if err == nil || time.Since(start) > hangGuard {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err != nil {
		t.Errorf("4 MiB after removing the big file: %v", err)
	}
}

// TestFrozenServers freezes (SIGSTOP) a storage server and then the
// metadata server: nothing refuses connections, nothing answers, and only
// the mount's --timeout can turn the wait into an error. Operations must
// fail with ETIMEDOUT or EIO within the timeout, and work again soon after
// SIGCONT.
func TestFrozenServers(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Servers: 1, Targets: 2, Mounts: 2, Timeout: "3s"})
	p := filepath.Join(c.Mount(0), "f")
	want := pattern(31, 0, 3<<20)
	if err := os.WriteFile(p, want, 0o644); err != nil {
		t.Fatal(err)
	}
	fresh := filepath.Join(c.Mount(1), "f") // never read on mount 1

	c.FreezeStorage(0)
	f, err := os.Open(fresh) // meta answers; the data read will not
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	err, took := timed(t, "read from a frozen storage server", func() error {
		_, err := f.ReadAt(make([]byte, 4096), 0) // one read(2)
		return err
	})
	t.Logf("read from a frozen storage server: %v after %v", err, took.Round(time.Millisecond))
	if !isIOFailure(err) {
		t.Errorf("read from a frozen storage server: %v, want ETIMEDOUT or EIO", err)
	}
	c.ThawStorage(0)
	var got []byte
	start := time.Now()
	for {
		got, err = os.ReadFile(fresh)
		if err == nil || time.Since(start) > hangGuard {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read after SIGCONT: %v %s", err, firstDiff(got, want))
	}
	t.Logf("read worked again %v after SIGCONT", time.Since(start).Round(time.Millisecond))

	c.FreezeMeta()
	err, took = timed(t, "mkdir with a frozen meta server", func() error {
		return os.Mkdir(filepath.Join(c.Mount(0), "new"), 0o755)
	})
	t.Logf("mkdir with a frozen meta server: %v after %v", err, took.Round(time.Millisecond))
	if !isIOFailure(err) {
		t.Errorf("mkdir with a frozen meta server: %v, want ETIMEDOUT or EIO", err)
	}
	c.ThawMeta()
	start = time.Now()
	for {
		err = os.Mkdir(filepath.Join(c.Mount(0), "after"), 0o755)
		if err == nil || time.Since(start) > hangGuard {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("mkdir after SIGCONT: %v", err)
	}
	t.Logf("mkdir worked again %v after SIGCONT", time.Since(start).Round(time.Millisecond))
}

// TestMountWithoutMeta starts a mount whose metadata server is not there:
// it must fail within its timeout with a message naming the server, and
// leave no dead FUSE mount behind.
func TestMountWithoutMeta(t *testing.T) {
	bin := testcluster.Binary(t)
	mnt := t.TempDir()
	addr := freeAddr(t) // nothing listens there now
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	start := time.Now()
	out, err := exec.CommandContext(ctx, bin, "mount", "--meta", addr, "--timeout", "2s",
		"--keys", filepath.Join(testcluster.GenerateKeys(t), "client"), mnt).CombinedOutput()
	took := time.Since(start)
	if err == nil {
		exec.Command("fusermount3", "-u", "-z", mnt).Run()
		t.Fatalf("weft mount without a metadata server succeeded: %s", out)
	}
	if !strings.Contains(string(out), addr) || !strings.Contains(string(out), "did not answer") {
		t.Errorf("error does not say which server did not answer: %s", out)
	}
	t.Logf("weft mount gave up after %v with --timeout 2s", took.Round(time.Millisecond))
	if mounts, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mounts), " "+mnt+" ") {
		exec.Command("fusermount3", "-u", "-z", mnt).Run()
		t.Errorf("a dead mount was left at %s", mnt)
	}
}
