package fuseceiling

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestMountServesBackingDir(t *testing.T) {
	backing, mnt := t.TempDir(), t.TempDir()
	m, err := New(backing, mnt)
	if err != nil {
		t.Fatal(err)
	}
	unmounted := false
	t.Cleanup(func() {
		if !unmounted {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			m.Unmount(ctx)
		}
	})
	data := bytes.Repeat([]byte("weft"), 300000) // > MaxWrite: several requests
	if err := os.WriteFile(filepath.Join(mnt, "f"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(backing, "f"))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("backing file: %d bytes, err %v", len(got), err)
	}
	got, err = os.ReadFile(filepath.Join(mnt, "f"))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read through the mount: %d bytes, err %v", len(got), err)
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	if !strings.Contains(string(mounts), mnt) {
		t.Fatalf("%s not in mountinfo", mnt)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := m.Unmount(ctx); err != nil {
		t.Fatal(err)
	}
	unmounted = true
	mounts, _ = os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mounts), mnt) {
		t.Fatalf("%s still mounted", mnt)
	}
}

func TestNoPassthrough(t *testing.T) {
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// A loopback file would offer its fd for passthrough; the wrapper
	// must refuse.
	var fh = noPassthrough(newLoopbackFile(f))
	p, ok := fh.(interface{ PassthroughFd() (int, bool) })
	if !ok {
		t.Fatal("wrapper lost the interface go-fuse probes")
	}
	if _, use := p.PassthroughFd(); use {
		t.Fatal("passthrough offered")
	}
}

func TestIsTmpfs(t *testing.T) {
	if IsTmpfs("/proc") {
		t.Error("/proc is not tmpfs")
	}
	if _, err := os.Stat("/dev/shm"); err == nil && !IsTmpfs("/dev/shm") {
		t.Error("/dev/shm is tmpfs here")
	}
}
