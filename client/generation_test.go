package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/weft-fs/weft/meta"
	"github.com/weft-fs/weft/meta/store"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/storage"
	"github.com/weft-fs/weft/storage/vfs"
)

// TestReusedInodeNeverSeesOldData is issue 8's measured leak: after the
// metadata store is put back to a backup taken before a file was made,
// the file's inode number is handed out again. The new file must not see
// the old file's bytes: its objects carry another generation, so they are
// other objects on the target.
func TestReusedInodeNeverSeesOldData(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "meta")
	backup := filepath.Join(t.TempDir(), "backup")

	fs := vfs.NewMem(1 << 30)
	tg, err := storage.OpenTarget("/t1", storage.TargetOptions{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	if err := tg.SetID(1); err != nil {
		t.Fatal(err)
	}
	ssrv := storage.NewServer()
	if err := ssrv.Add(tg); err != nil {
		t.Fatal(err)
	}

	startMeta := func(d string) (*meta.Server, func()) {
		t.Helper()
		st, err := store.OpenPebble(d, store.PebbleOptions{})
		if err != nil {
			t.Fatal(err)
		}
		srv, err := meta.New(meta.Options{Store: st, Storage: ssrv, Seed: 1, OrphanGrace: time.Hour})
		if err != nil {
			st.Close()
			t.Fatal(err)
		}
		if _, err := srv.RegisterTarget(ctx, "u1", proto.TargetInfo{Addr: "h:1", Total: 1 << 30, Free: 1 << 30}); err != nil {
			t.Fatal(err)
		}
		return srv, func() { srv.Close(); st.Close() }
	}

	// The backup: a formatted file system with its target, no files yet.
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	_, stop := startMeta(dir)
	stop()
	if err := os.CopyFS(backup, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}

	// A file with a secret, written and synced through a client.
	msrv, stop := startMeta(dir)
	c := NewWithServices(msrv, ssrv, Config{})
	secret := []byte("SECRET-of-the-old-file")
	f, old, _, err := c.CreateOpen(ctx, proto.CreateIn{Parent: proto.RootIno, Name: "old", Mode: syscall.S_IFREG | 0o644, Exclusive: true}, proto.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, f, secret, 0)
	if err := f.Fsync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.Release(ctx); err != nil {
		t.Fatal(err)
	}
	c.Close()
	stop()
	if old.Gen == 0 {
		t.Fatal("a new file has generation 0")
	}

	// The restore: the metadata server starts on the backup, which has
	// never heard of the file, and hands out its inode number again.
	msrv, stop = startMeta(backup)
	defer stop()
	c = NewWithServices(msrv, ssrv, Config{})
	defer c.Close()
	f, reused, _, err := c.CreateOpen(ctx, proto.CreateIn{Parent: proto.RootIno, Name: "new", Mode: syscall.S_IFREG | 0o644, Exclusive: true}, proto.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Release(ctx)
	if reused.Ino != old.Ino {
		t.Fatalf("the restored server gave inode %d, not the old file's %d: the test does not reuse a number", reused.Ino, old.Ino)
	}
	if reused.Gen == old.Gen {
		t.Fatalf("both files have generation %#x", old.Gen)
	}

	// The new file's object does not exist yet: reading it (past its size
	// too, as a racing reader could) gives nothing of the secret.
	buf := make([]byte, len(secret))
	n, err := ssrv.Read(ctx, 1, proto.ObjectID{Ino: reused.Ino, Gen: reused.Gen}, 0, buf)
	if err != nil && !errors.Is(err, syscall.ENOENT) {
		t.Fatal(err)
	}
	if bytes.Contains(buf[:n], []byte("SECRET")) {
		t.Fatalf("the new file's object holds %q", buf[:n])
	}
	// Written through the client, it holds its own bytes only.
	mine := []byte("mine")
	mustWrite(t, f, mine, 0)
	if err := f.Fsync(ctx); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 64)
	n, err = f.Read(ctx, got, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[:n], mine) {
		t.Fatalf("the new file reads %q, want %q", got[:n], mine)
	}

	// The target holds both objects, under different names; the old one
	// still has the secret (its GC is the old metadata's business).
	names, err := fs.ReadDir(filepath.Join("/t1", "objects", fmt.Sprintf("%02x", old.Ino&0xff)))
	if err != nil {
		t.Fatal(err)
	}
	var objs []string
	for _, n := range names {
		if filepath.Ext(n) != ".crc" {
			objs = append(objs, n)
		}
	}
	if len(objs) != 2 {
		t.Fatalf("objects of inode %d on the target: %v, want one per generation", old.Ino, names)
	}
	slices.Sort(objs)
	n, err = ssrv.Read(ctx, 1, proto.ObjectID{Ino: old.Ino, Gen: old.Gen}, 0, buf)
	if err != nil || !bytes.Equal(buf[:n], secret) {
		t.Fatalf("the old object reads %q, %v", buf[:n], err)
	}
	t.Logf("objects: %v", objs)
}
