package storage

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weft-fs/weft/storage/vfs"
)

// A target directory is served by one process at a time: a second open
// (another server, or a second --target of the same directory) fails with
// a clear error while the first holds it, and succeeds after it closed.
func TestTargetLocked(t *testing.T) {
	for name, fs := range map[string]vfs.FS{"disk": vfs.Default, "mem": vfs.NewMem(1 << 30)} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "t")
			if name == "mem" {
				dir = "/t"
			}
			t1, err := OpenTarget(dir, TargetOptions{FS: fs})
			if err != nil {
				t.Fatal(err)
			}
			_, err = OpenTarget(dir, TargetOptions{FS: fs})
			if !errors.Is(err, vfs.ErrLocked) || !strings.Contains(err.Error(), "in use by another storage server") {
				t.Fatalf("second open: %v, want ErrLocked", err)
			}
			if err := t1.Close(); err != nil {
				t.Fatal(err)
			}
			t2, err := OpenTarget(dir, TargetOptions{FS: fs})
			if err != nil {
				t.Fatalf("open after close: %v", err)
			}
			t2.Close()
		})
	}
}

// fsidRegistry is a fakeRegistry of a file system with an id.
type fsidRegistry struct {
	*fakeRegistry
	fsid string
}

func (r fsidRegistry) FSID(context.Context) (string, error) { return r.fsid, nil }

// A target records the file system id at its first registration, sends it
// with every registration, and refuses, at start, a metadata server of
// another file system, with target.json left as it was.
func TestTargetFSID(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "t1")
	reg := fsidRegistry{newFakeRegistry(0), "fs-a"}
	stop := startRun(t, Config{ListenAddr: "127.0.0.1:0", Targets: []string{dir}, Registry: reg, HeartbeatInterval: 10 * time.Millisecond})
	waitFor(t, "registration", func() bool { _, b := reg.snapshot(); return len(b) == 1 && b[101] >= 2 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if infos, _ := reg.snapshot(); infos[101].FSID != "fs-a" {
		t.Fatalf("registration carried fsid %q", infos[101].FSID)
	}
	before, err := os.ReadFile(filepath.Join(dir, identityFile))
	if err != nil || !strings.Contains(string(before), `"fsid":"fs-a"`) {
		t.Fatalf("target.json %s %v", before, err)
	}
	other := fsidRegistry{newFakeRegistry(0), "fs-b"}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = Run(ctx, Config{ListenAddr: "127.0.0.1:0", Targets: []string{dir}, Registry: other})
	if !errors.Is(err, ErrForeignFS) || !strings.Contains(err.Error(), "fs-a") || !strings.Contains(err.Error(), "fs-b") {
		t.Fatalf("Run against another file system: %v, want ErrForeignFS naming both", err)
	}
	if _, beats := other.snapshot(); len(beats) != 0 {
		t.Fatalf("the foreign registry got registrations: %v", beats)
	}
	after, _ := os.ReadFile(filepath.Join(dir, identityFile))
	if string(after) != string(before) {
		t.Fatalf("target.json changed: %s -> %s", before, after)
	}
}
