package client

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/weft-fs/weft/internal/fake"
	"github.com/weft-fs/weft/meta"
	"github.com/weft-fs/weft/meta/store"
	"github.com/weft-fs/weft/proto"
)

// newMetaServer returns a real metadata server (in-memory store) with one
// target, which offers the combined operations.
func newMetaServer(t *testing.T) *meta.Server {
	t.Helper()
	st := store.NewMem()
	srv, err := meta.New(meta.Options{Store: st, Seed: 1, OrphanGrace: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(); st.Close() })
	if _, err := srv.RegisterTarget(context.Background(), "u1", proto.TargetInfo{Addr: "h:1", Total: 1 << 30, Free: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	return srv
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); !cond(); time.Sleep(time.Millisecond) { // a hang guard
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestCombinedOps: CreateOpen counts the handle in one call, Release is sent
// in the background but never before the close, and an unlinked file that
// is open here survives until its release.
func TestCombinedOps(t *testing.T) {
	ctx := context.Background()
	srv := newMetaServer(t)
	c := NewWithServices(srv, fake.NewStorage(), Config{})
	defer c.Close()

	f, a, p, err := c.CreateOpen(ctx, proto.CreateIn{Parent: proto.RootIno, Name: "f", Mode: syscall.S_IFREG | 0o644, Exclusive: true}, proto.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	if !a.IsRegular() || f.Ino() != a.Ino || p.Ino != proto.RootIno || p.Mtime != a.Mtime {
		t.Fatalf("createopen: %+v parent %+v", a, p)
	}
	if n := srv.OpenCount(a.Ino); n != 1 {
		t.Fatalf("open count %d after CreateOpen", n)
	}
	if _, _, _, err := c.CreateOpen(ctx, proto.CreateIn{Parent: proto.RootIno, Name: "f", Mode: syscall.S_IFREG | 0o644, Exclusive: true}, proto.AccessReadWrite); !errors.Is(err, syscall.EEXIST) {
		t.Fatalf("exclusive CreateOpen of an existing name: %v", err)
	}

	// Unlink while open: the file lives until the (background) release.
	pa, err := c.UnlinkAt(ctx, proto.RootIno, "f")
	if err != nil || pa.Ino != proto.RootIno {
		t.Fatalf("unlinkat: %+v %v", pa, err)
	}
	if _, err := srv.GetAttr(ctx, a.Ino); err != nil {
		t.Fatalf("open file gone after unlink: %v", err)
	}
	if err := f.Release(ctx); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "release reaches the server and the orphan is reclaimed", func() bool {
		_, err := srv.GetAttr(ctx, a.Ino)
		return errors.Is(err, syscall.ENOENT)
	})

	// Many closes at once: all released, and Close waits for them.
	var files []*File
	for i := range 50 {
		f, _, _, err := c.CreateOpen(ctx, proto.CreateIn{Parent: proto.RootIno, Name: fmt.Sprint("g", i), Mode: syscall.S_IFREG | 0o644}, proto.AccessReadWrite)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	for _, f := range files {
		if err := f.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if n := srv.OpenCount(f.Ino()); n != 0 {
			t.Fatalf("ino %d: open count %d after Close", f.Ino(), n)
		}
	}
}

// noExtMeta is a server that answers the combined operations with ENOSYS,
// as an older server would.
type noExtMeta struct{ *meta.Server }

func (noExtMeta) CreateOpen(context.Context, proto.CreateIn, proto.Access) (proto.Attr, proto.Attr, []byte, error) {
	return proto.Attr{}, proto.Attr{}, nil, syscall.ENOSYS
}
func (noExtMeta) UnlinkAt(context.Context, proto.Ino, string) (proto.Attr, error) {
	return proto.Attr{}, syscall.ENOSYS
}
func (noExtMeta) RmdirAt(context.Context, proto.Ino, string) (proto.Attr, error) {
	return proto.Attr{}, syscall.ENOSYS
}
func (noExtMeta) ReleaseMany(context.Context, []proto.Ino) error { return syscall.ENOSYS }

// TestCombinedOpsFallback: a server without the combined operations gets
// the plain ones, and the client stops asking.
func TestCombinedOpsFallback(t *testing.T) {
	ctx := context.Background()
	srv := newMetaServer(t)
	c := NewWithServices(noExtMeta{srv}, fake.NewStorage(), Config{})
	defer c.Close()
	f, a, p, err := c.CreateOpen(ctx, proto.CreateIn{Parent: proto.RootIno, Name: "f", Mode: syscall.S_IFREG | 0o644, Exclusive: true}, proto.AccessReadWrite)
	if err != nil || p.Ino != 0 || srv.OpenCount(a.Ino) != 1 {
		t.Fatalf("fallback createopen: %+v %+v %v, count %d", a, p, err, srv.OpenCount(a.Ino))
	}
	if !c.ext.noSys.Load() {
		t.Fatal("ENOSYS did not switch the combined operations off")
	}
	if err := f.Release(ctx); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "release", func() bool { return srv.OpenCount(a.Ino) == 0 })
	if pa, err := c.UnlinkAt(ctx, proto.RootIno, "f"); err != nil || pa.Ino != 0 {
		t.Fatalf("fallback unlink: %+v %v", pa, err)
	}
}
