package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/weft-fs/weft/internal/fake"
	"github.com/weft-fs/weft/meta"
	"github.com/weft-fs/weft/meta/metarpc"
	"github.com/weft-fs/weft/meta/store"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/transport"
)

// remoteConn calls a metadata handler in-process as a remote client peer
// would reach it (so the server enforces sessions). While cut is set,
// every call fails as a broken connection would: a stopped or cut-off
// mount. The handler can be swapped (a server restart).
type remoteConn struct {
	mu     sync.Mutex
	h      transport.Handler
	cut    atomic.Bool
	renews atomic.Int64 // renewals the server granted
}

func (c *remoteConn) handler() transport.Handler {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.h
}

func (c *remoteConn) setHandler(h transport.Handler) {
	c.mu.Lock()
	c.h = h
	c.mu.Unlock()
}

func (c *remoteConn) Call(ctx context.Context, op uint16, parts ...[]byte) ([]byte, error) {
	if c.cut.Load() {
		return nil, fmt.Errorf("test: connection cut: %w", syscall.EIO)
	}
	ctx = transport.WithPeer(ctx, transport.Peer{Addr: "10.0.0.1:1", Role: transport.RoleClient, Name: "mount-1"})
	resp, err := c.handler()(ctx, op, bytes.Join(parts, nil))
	if err != nil {
		var errno syscall.Errno
		if !errors.As(err, &errno) {
			errno = syscall.EIO
		}
		return nil, &transport.RemoteError{Addr: "remote", Op: op, Errno: errno, Msg: err.Error()}
	}
	if op == metarpc.OpSessionRenew {
		c.renews.Add(1)
	}
	return resp, nil
}

func (*remoteConn) Close() error { return nil }

type sessionEnv struct {
	st   store.Store
	srv  *meta.Server
	opts meta.Options
	conn *remoteConn
	c    *Client
}

func newSessionEnv(t *testing.T, lease time.Duration) *sessionEnv {
	t.Helper()
	e := &sessionEnv{st: store.NewMem()}
	e.opts = meta.Options{Store: e.st, Seed: 1, OrphanGrace: time.Hour, SessionLease: lease, AllowUnauthenticated: true}
	e.start(t)
	e.conn = &remoteConn{h: metarpc.NewHandler(e.srv, e.srv, nil)}
	e.c = NewWithServices(metarpc.NewConnClient(e.conn), fake.NewStorage(), Config{Timeout: 5 * time.Second})
	t.Cleanup(func() {
		e.conn.cut.Store(false)
		e.c.Close()
		e.srv.Close()
		e.st.Close()
	})
	return e
}

func (e *sessionEnv) start(t *testing.T) {
	t.Helper()
	srv, err := meta.New(e.opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.RegisterTarget(context.Background(), "u1", proto.TargetInfo{Addr: "h:1", Total: 1 << 30, Free: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	e.srv = srv
}

// TestSessionKeptAlive: the client renews its session, so an unlinked
// file it holds open outlives many leases; a clean Close ends the session.
func TestSessionKeptAlive(t *testing.T) {
	ctx := context.Background()
	e := newSessionEnv(t, time.Second)
	f, a, _, err := e.c.CreateOpen(ctx, proto.CreateIn{Parent: proto.RootIno, Name: "f", Mode: syscall.S_IFREG | 0o644}, proto.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.c.Unlink(ctx, proto.RootIno, "f"); err != nil {
		t.Fatal(err)
	}
	// Six renewals (every third of the lease: two leases) keep the
	// session and the file.
	gen := e.c.sessGen()
	waitUntil(t, "six renewals", func() bool {
		if n := e.srv.OpenCount(a.Ino); n != 1 {
			t.Fatalf("open count %d while the client lives", n)
		}
		return e.conn.renews.Load() >= 6
	})
	if e.c.sessGen() != gen {
		t.Fatal("a live client lost its session")
	}
	if _, err := e.srv.GetAttr(ctx, a.Ino); err != nil {
		t.Fatalf("a live client's open unlinked file: %v", err)
	}
	mustWrite(t, f, []byte("x"), 0)
	if err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Close(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the session to end with Close", func() bool { return e.srv.Sessions() == 0 })
	waitUntil(t, "the orphan to be reclaimed", func() bool {
		_, err := e.srv.GetAttr(ctx, a.Ino)
		return errors.Is(err, syscall.ENOENT)
	})
}

// TestSessionExpiredHandlesStale: a client cut off for longer than its
// lease may not use its handles (EIO) and loses its session; once back,
// its old handles fail with ESTALE
// (reads, writes, flush, truncate), their release sends nothing, and a new
// open works in a new session.
func TestSessionExpiredHandlesStale(t *testing.T) {
	ctx := context.Background()
	e := newSessionEnv(t, 60*time.Millisecond)
	f, a, _, err := e.c.CreateOpen(ctx, proto.CreateIn{Parent: proto.RootIno, Name: "f", Mode: syscall.S_IFREG | 0o644}, proto.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	gen := e.c.sessGen()
	e.conn.cut.Store(true)
	waitUntil(t, "the server to expire the session", func() bool { return e.srv.Sessions() == 0 })
	// Cut off for longer than the lease, the client may not use its
	// handles: the server may have reclaimed their files.
	if _, err := f.Write(ctx, []byte("x"), 0); !errors.Is(err, syscall.EIO) {
		t.Fatalf("write through a handle whose session was not renewed within the lease: %v, want EIO", err)
	}
	e.conn.cut.Store(false)
	waitUntil(t, "the client to start a new session", func() bool { return e.c.sessGen() != gen && e.srv.Sessions() == 1 })
	if n := e.srv.OpenCount(a.Ino); n != 0 {
		t.Fatalf("open count %d after the session expired", n)
	}
	for what, err := range map[string]error{
		"write":    func() error { _, err := f.Write(ctx, []byte("x"), 0); return err }(),
		"read":     func() error { _, err := f.Read(ctx, make([]byte, 1), 0); return err }(),
		"flush":    f.Flush(ctx),
		"fsync":    f.Fsync(ctx),
		"truncate": func() error { _, err := f.Truncate(ctx, 0); return err }(),
	} {
		if !errors.Is(err, syscall.ESTALE) {
			t.Errorf("%s through a stale handle: %v, want ESTALE", what, err)
		}
	}
	g, _, err := e.c.Open(ctx, a.Ino, proto.AccessRead)
	if err != nil {
		t.Fatalf("open in the new session: %v", err)
	}
	if err := f.Release(ctx); !errors.Is(err, syscall.ESTALE) {
		t.Fatalf("release of a stale handle: %v (its flush must say ESTALE)", err)
	}
	e.c.rel.flush()
	if n := e.srv.OpenCount(a.Ino); n != 1 {
		t.Fatalf("open count %d: the stale release dropped the new session's handle", n)
	}
	if err := g.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestSessionReclaimedAfterRestart: after a server restart, the client
// re-registers its session with its open handles within the grace period;
// the handles stay valid and are counted again.
func TestSessionReclaimedAfterRestart(t *testing.T) {
	ctx := context.Background()
	e := newSessionEnv(t, 60*time.Millisecond)
	f, a, _, err := e.c.CreateOpen(ctx, proto.CreateIn{Parent: proto.RootIno, Name: "f", Mode: syscall.S_IFREG | 0o644}, proto.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.c.Unlink(ctx, proto.RootIno, "f"); err != nil {
		t.Fatal(err)
	}
	gen := e.c.sessGen()
	e.srv.Close()
	e.start(t)
	e.conn.setHandler(metarpc.NewHandler(e.srv, e.srv, nil))
	waitUntil(t, "the client to re-register its handle", func() bool { return e.srv.OpenCount(a.Ino) == 1 })
	if e.c.sessGen() != gen {
		t.Fatal("the client started a new session instead of re-registering")
	}
	mustWrite(t, f, []byte("still here"), 0)
	if err := f.Flush(ctx); err != nil {
		t.Fatalf("flush through a re-registered handle: %v", err)
	}
	if err := f.Release(ctx); err != nil {
		t.Fatal(err)
	}
	e.c.rel.flush()
	if n := e.srv.OpenCount(a.Ino); n != 0 {
		t.Fatalf("open count %d after the release", n)
	}
}
