package metarpc_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/weft-fs/weft/meta"
	"github.com/weft-fs/weft/meta/metarpc"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/transport"
)

// startRun runs meta.Run on a temporary directory until the test ends.
func startRun(t *testing.T, allowUnauth bool) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- meta.Run(ctx, meta.Config{DataDir: t.TempDir(), ListenAddr: "127.0.0.1:0",
			AllowUnauthenticated: allowUnauth, Ready: func(a string) { ready <- a }})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	select {
	case a := <-ready:
		return a
	case err := <-done:
		t.Fatal(err)
	}
	return ""
}

// TestRegisterOverTCP: through a real transport, an unauthenticated peer
// may not register unless the server allows it, and a target is accepted
// only at an address that answers the transport's probe.
func TestRegisterOverTCP(t *testing.T) {
	ctx := context.Background()
	tr := transport.NewTCP()
	pool := transport.NewPool(tr, transport.PoolOptions{})
	defer pool.Close()
	// A live storage-like server: the transport answers probes itself.
	live, err := tr.Listen("127.0.0.1:0", func(context.Context, uint16, []byte) ([]byte, error) { return nil, nil })
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	// An address nobody serves: a port that was just freed.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	info := func(addr string) proto.TargetInfo {
		return proto.TargetInfo{Addr: addr, Total: 1 << 40, Free: 1 << 40}
	}

	strict := metarpc.NewClient(pool, startRun(t, false))
	if _, err := strict.RegisterTarget(ctx, "u1", info(live.Addr())); !errors.Is(err, syscall.EACCES) {
		t.Fatalf("unauthenticated registration: %v, want EACCES", err)
	}
	if ts, err := strict.Targets(ctx); !errors.Is(err, syscall.EACCES) {
		t.Fatalf("unauthenticated Targets: %+v %v, want EACCES", ts, err)
	}

	c := metarpc.NewClient(pool, startRun(t, true))
	_, err = c.RegisterTarget(ctx, "u1", info(dead))
	if !errors.Is(err, syscall.EHOSTUNREACH) || !strings.Contains(err.Error(), "did not answer") {
		t.Fatalf("registration at a dead address: %v, want EHOSTUNREACH", err)
	}
	if _, err := c.RegisterTarget(ctx, "u1", info(live.Addr())); err != nil {
		t.Fatalf("registration at a live address: %v", err)
	}
	if _, err := c.RegisterTarget(ctx, "u1", proto.TargetInfo{Addr: live.Addr(), Total: 1 << 40, Free: 1 << 60}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("implausible heartbeat: %v, want EINVAL", err)
	}
	if _, err := c.RegisterTarget(ctx, "u1", info(dead)); !errors.Is(err, syscall.EHOSTUNREACH) {
		t.Fatalf("move to a dead address: %v, want EHOSTUNREACH", err)
	}
	if ts, err := c.Targets(ctx); err != nil || len(ts) != 1 || ts[0].Addr != live.Addr() {
		t.Fatalf("targets: %+v %v", ts, err)
	}
}
