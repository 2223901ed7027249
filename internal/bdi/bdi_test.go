package bdi

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// fakeSysfs points sysfsRoot at a temporary tree holding a bdi directory for
// the device of dir, the way the kernel names it.
func fakeSysfs(t *testing.T, dir string) string {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	bdiDir := filepath.Join(root, fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev)))
	if err := os.Mkdir(bdiDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bdiDir, "read_ahead_kb"), []byte("128\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := sysfsRoot
	sysfsRoot = root
	t.Cleanup(func() { sysfsRoot = old })
	return bdiDir
}

func TestSetReadAheadWritesKiB(t *testing.T) {
	mnt := t.TempDir()
	bdiDir := fakeSysfs(t, mnt)
	if got, err := ReadAhead(mnt); err != nil || got != 128<<10 {
		t.Fatalf("ReadAhead before = %d, %v; want 131072", got, err)
	}
	if err := SetReadAhead(mnt, 1<<20); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(bdiDir, "read_ahead_kb"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(b)) != "1024" {
		t.Fatalf("read_ahead_kb = %q, want 1024", b)
	}
	if got, err := ReadAhead(mnt); err != nil || got != 1<<20 {
		t.Fatalf("ReadAhead after = %d, %v; want 1 MiB", got, err)
	}
}

func TestSetReadAheadErrors(t *testing.T) {
	mnt := t.TempDir()
	fakeSysfs(t, mnt)
	if err := SetReadAhead(mnt, 100); err == nil {
		t.Fatal("a window below one page was accepted")
	}
	if err := SetReadAhead(filepath.Join(mnt, "missing"), 1<<20); err == nil {
		t.Fatal("a missing mountpoint was accepted")
	}
	sysfsRoot = t.TempDir() // no bdi directories at all
	if err := SetReadAhead(mnt, 1<<20); err == nil || !strings.Contains(err.Error(), "no backing device") {
		t.Fatalf("err = %v, want 'no backing device'", err)
	}
}
