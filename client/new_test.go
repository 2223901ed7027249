package client

import (
	"context"
	"errors"
	"syscall"
	"testing"

	"github.com/weft-fs/weft/internal/fake"
	"github.com/weft-fs/weft/proto"
)

func TestResolver(t *testing.T) {
	ctx := context.Background()
	r := &resolver{meta: fake.NewMeta([]proto.TargetID{3, 9}, nil)}
	for _, tc := range []struct {
		id   proto.TargetID
		addr string
		err  error
	}{
		{3, "fake:3", nil},
		{9, "fake:9", nil},
		{4, "", syscall.EIO},
	} {
		addr, err := r.resolve(ctx, tc.id)
		if addr != tc.addr || !errors.Is(err, tc.err) {
			t.Errorf("resolve(%d) = %q, %v; want %q, %v", tc.id, addr, err, tc.addr, tc.err)
		}
	}
	r.invalidate(syscall.ENOENT)
	if r.stale {
		t.Error("ENOENT marked the cache stale")
	}
	r.invalidate(syscall.ETIMEDOUT)
	if !r.stale {
		t.Error("ETIMEDOUT did not mark the cache stale")
	}
}

func TestNewNeedsAddress(t *testing.T) {
	if _, err := New(context.Background(), Config{}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("New without address: %v", err)
	}
	c, err := New(context.Background(), Config{MetaAddr: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	// Nothing listens there: an RPC fails quickly instead of hanging.
	if _, err := c.GetAttr(context.Background(), proto.RootIno); !errors.Is(err, syscall.EIO) && !errors.Is(err, syscall.ETIMEDOUT) && !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("GetAttr against nothing: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}
