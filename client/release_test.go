package client

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/weft-fs/weft/internal/fake"
	"github.com/weft-fs/weft/meta"
	"github.com/weft-fs/weft/proto"
)

// countingMeta counts the ReleaseMany calls that reach the server. It
// counts once the server has applied them, so a test that sees a count can
// check the server's state.
type countingMeta struct {
	*meta.Server
	calls, handles atomic.Int64
}

func (m *countingMeta) ReleaseMany(ctx context.Context, inos []proto.Ino) error {
	err := m.Server.ReleaseMany(ctx, inos)
	m.calls.Add(1)
	m.handles.Add(int64(len(inos)))
	return err
}

// TestReleaseBatching: closes one after another share ReleaseMany calls
// (the releaser lingers for more), and an unlink right after a close sends
// the waiting release first, so the file is reclaimed by the unlink itself
// instead of being left an orphan.
func TestReleaseBatching(t *testing.T) {
	ctx := context.Background()
	srv := &countingMeta{Server: newMetaServer(t)}
	c := NewWithServices(srv, fake.NewStorage(), Config{})
	defer c.Close()

	const n = 20
	var inos []proto.Ino
	for i := range n {
		f, _, _, err := c.CreateOpen(ctx, proto.CreateIn{Parent: proto.RootIno, Name: fmt.Sprint("f", i), Mode: syscall.S_IFREG | 0o644}, proto.AccessReadWrite)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Release(ctx); err != nil {
			t.Fatal(err)
		}
		inos = append(inos, f.Ino())
	}
	waitUntil(t, "all releases", func() bool { return srv.handles.Load() == n })
	if calls := srv.calls.Load(); calls > n/2 {
		t.Errorf("%d closes took %d ReleaseMany calls; want them batched", n, calls)
	}
	for _, ino := range inos {
		if c := srv.OpenCount(ino); c != 0 {
			t.Fatalf("ino %d: open count %d", ino, c)
		}
	}

	// Close, then unlink at once: the unlink finds no open handle.
	f, a, _, err := c.CreateOpen(ctx, proto.CreateIn{Parent: proto.RootIno, Name: "g", Mode: syscall.S_IFREG | 0o644}, proto.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.UnlinkAt(ctx, proto.RootIno, "g"); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.GetAttr(ctx, a.Ino); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("file closed before its unlink still exists (%v): the release waited", err)
	}

	// Close, then rename over it: likewise.
	f, a, _, err = c.CreateOpen(ctx, proto.CreateIn{Parent: proto.RootIno, Name: "h", Mode: syscall.S_IFREG | 0o644}, proto.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Rename(ctx, proto.RootIno, "f0", proto.RootIno, "h", 0); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the replaced file is reclaimed", func() bool {
		_, err := srv.GetAttr(ctx, a.Ino)
		return errors.Is(err, syscall.ENOENT)
	})
	if c := srv.OpenCount(a.Ino); c != 0 {
		t.Fatalf("replaced file: open count %d", c)
	}
}
