package client

import (
	"bytes"
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/weft-fs/weft/meta"
	"github.com/weft-fs/weft/meta/store"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/storage"
	"github.com/weft-fs/weft/storage/vfs"
)

// realServices is an in-process metadata server and storage server with
// one in-memory target: the real parts, without processes.
func realServices(t *testing.T) (*meta.Server, *storage.Server) {
	t.Helper()
	tg, err := storage.OpenTarget("/t1", storage.TargetOptions{FS: vfs.NewMem(1 << 30)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tg.Close() })
	if err := tg.SetID(1); err != nil {
		t.Fatal(err)
	}
	ssrv := storage.NewServer()
	if err := ssrv.Add(tg); err != nil {
		t.Fatal(err)
	}
	st := store.NewMem()
	msrv, err := meta.New(meta.Options{Store: st, Storage: ssrv, Seed: 1, OrphanGrace: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { msrv.Close(); st.Close() })
	if _, err := msrv.RegisterTarget(context.Background(), "u1", proto.TargetInfo{Addr: "h:1", Total: 1 << 30, Free: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	return msrv, ssrv
}

// TestAppendTwoClients: appends through two clients of one file system
// interleave without overwriting each other, each at the end the metadata
// server reserved, whatever their own idea of the size.
func TestAppendTwoClients(t *testing.T) {
	ctx := context.Background()
	msrv, ssrv := realServices(t)
	c1, c2 := NewWithServices(msrv, ssrv, Config{}), NewWithServices(msrv, ssrv, Config{})
	defer c1.Close()
	defer c2.Close()
	if !c1.ClusterLocks() {
		t.Fatal("meta.Server has no lock service")
	}
	f1, a, _, err := c1.CreateOpen(ctx, proto.CreateIn{Parent: proto.RootIno, Name: "log", Mode: syscall.S_IFREG | 0o644}, proto.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	f2, _, err := c2.Open(ctx, a.Ino, proto.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	var want []byte
	for i := range 20 {
		f, rec := f1, []byte("one:"+string(rune('a'+i))+"\n")
		if i%3 == 0 {
			f, rec = f2, []byte("two:"+string(rune('a'+i))+"!\n")
		}
		off, n, err := f.Append(ctx, rec)
		if err != nil || n != len(rec) || off != uint64(len(want)) {
			t.Fatalf("append %d: at %d, %d bytes, %v; want at %d", i, off, n, err, len(want))
		}
		want = append(want, rec...)
	}
	for _, f := range []*File{f1, f2} {
		if err := f.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if s := f1.Size(); s != uint64(len(want)) {
		t.Fatalf("size %d, want %d", s, len(want))
	}
	got := make([]byte, len(want))
	n, err := f2.Read(ctx, got, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[:n], want) {
		t.Fatalf("file holds %q, want %q", got[:n], want)
	}
}

// TestLockBook: a close sends unlocks only for owners that hold locks
// here; the release of a File drops the locks of owners that locked only
// through it (flock, OFD), and FlushLocks a process's POSIX locks.
func TestLockBook(t *testing.T) {
	ctx := context.Background()
	msrv, ssrv := realServices(t)
	c := NewWithServices(msrv, ssrv, Config{})
	defer c.Close()
	f, a, _, err := c.CreateOpen(ctx, proto.CreateIn{Parent: proto.RootIno, Name: "f", Mode: syscall.S_IFREG | 0o644}, proto.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	g, _, err := c.Open(ctx, a.Ino, proto.AccessRead)
	if err != nil {
		t.Fatal(err)
	}
	const posixOwner, ofdOwner = 1, 2
	if _, err := f.Lock(ctx, proto.Lock{Owner: posixOwner, Type: proto.LockWrite, Start: 0, End: 9}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Lock(ctx, proto.Lock{Owner: posixOwner, Type: proto.LockRead, Start: 20, End: 29}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Lock(ctx, proto.Lock{Owner: ofdOwner, Type: proto.LockRead, Start: 100, End: proto.LockEOF}, false); err != nil {
		t.Fatal(err)
	}
	if n := msrv.LockCount(a.Ino); n != 3 {
		t.Fatalf("%d locks, want 3", n)
	}
	// Another owner conflicts (EAGAIN); a waiter is interrupted by its ctx.
	if _, err := f.Lock(ctx, proto.Lock{Owner: 3, Type: proto.LockWrite, Start: 5, End: 5}, false); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("conflicting lock: %v", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	err = f.LockWait(wctx, proto.Lock{Owner: 3, Type: proto.LockWrite, Start: 5, End: 5})
	cancel()
	if !errors.Is(err, syscall.EINTR) {
		t.Fatalf("interrupted wait: %v, want EINTR", err)
	}
	// An owner with nothing here: nothing to release.
	if err := f.FlushLocks(ctx, 99); err != nil {
		t.Fatal(err)
	}
	// The POSIX owner's close of either handle releases both its locks.
	if err := g.FlushLocks(ctx, posixOwner); err != nil {
		t.Fatal(err)
	}
	if n := msrv.LockCount(a.Ino); n != 1 {
		t.Fatalf("%d locks after the POSIX owner's close, want the OFD lock only", n)
	}
	// g's release leaves the OFD owner's lock (it locked through f).
	if err := g.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := msrv.LockCount(a.Ino); n != 1 {
		t.Fatalf("%d locks after releasing another handle, want 1", n)
	}
	if err := f.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := msrv.LockCount(a.Ino); n != 0 {
		t.Fatalf("%d locks after the last release", n)
	}
}

// TestManyWaiters: more waiters than maxLockWaits all get their (shared)
// locks once the holder lets go; those beyond the bound poll.
func TestManyWaiters(t *testing.T) {
	ctx := context.Background()
	msrv, ssrv := realServices(t)
	c := NewWithServices(msrv, ssrv, Config{})
	defer c.Close()
	f, a, _, err := c.CreateOpen(ctx, proto.CreateIn{Parent: proto.RootIno, Name: "f", Mode: syscall.S_IFREG | 0o644}, proto.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Lock(ctx, proto.Lock{Owner: 1, Type: proto.LockWrite, End: proto.LockEOF}, false); err != nil {
		t.Fatal(err)
	}
	const n = maxLockWaits + 8
	done := make(chan error, n)
	for i := range n {
		go func() {
			done <- f.LockWait(ctx, proto.Lock{Owner: uint64(100 + i), Type: proto.LockRead, End: proto.LockEOF})
		}()
	}
	if _, err := f.Lock(ctx, proto.Lock{Owner: 1, Type: proto.LockUnlock, End: proto.LockEOF}, false); err != nil {
		t.Fatal(err)
	}
	for range n {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if got := msrv.LockCount(a.Ino); got != n {
		t.Fatalf("%d read locks, want %d", got, n)
	}
}
