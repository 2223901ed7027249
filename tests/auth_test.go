package tests

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weft-fs/weft/internal/testcluster"
	"github.com/weft-fs/weft/internal/testutil"
)

// TestForeignKeysRefused runs a cluster and points processes holding keys
// of another cluster at it: a mount and a storage server. Both are refused
// at the handshake; the mount fails saying so, the storage server's target
// never registers, and the metadata server logs the refusals.
func TestForeignKeysRefused(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Servers: 1, Targets: 1, Mounts: -1})
	foreign := testcluster.GenerateKeys(t)

	mnt := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	out, err := exec.CommandContext(ctx, c.Bin(), "mount", "--meta", c.MetaAddr(), "--timeout", "2s",
		"--keys", filepath.Join(foreign, "client"), mnt).CombinedOutput()
	if err == nil {
		exec.Command("fusermount3", "-u", "-z", mnt).Run()
		t.Fatalf("mount with another cluster's keys succeeded: %s", out)
	}
	if !strings.Contains(string(out), "authentication failed") {
		t.Errorf("mount's error does not say authentication failed: %s", out)
	}

	// A storage server of another cluster cannot register its target.
	storage := exec.CommandContext(ctx, c.Bin(), "storage", "--listen", freeAddr(t), "--meta", c.MetaAddr(),
		"--keys", filepath.Join(foreign, "storage"), "--target", t.TempDir(), "--log-level", "warn")
	slog := &testutil.LogBuffer{} // written by exec's copier while read here
	storage.Stdout, storage.Stderr = slog, slog
	if err := storage.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { storage.Process.Kill(); storage.Wait() }()
	deadline := time.Now().Add(hangGuard)
	for !strings.Contains(c.Log("meta"), "refusing connection") {
		if time.Now().After(deadline) {
			t.Fatalf("meta logged no refusal within %v; meta log:\n%s", hangGuard, c.Log("meta"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	for !strings.Contains(slog.String(), "authentication failed") {
		if time.Now().After(deadline) {
			t.Fatalf("the foreign storage server did not report an authentication failure within %v:\n%s", hangGuard, slog.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
