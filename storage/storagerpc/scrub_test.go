package storagerpc

import (
	"context"
	"errors"
	"syscall"
	"testing"

	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/transport"
)

func TestScrubStartCodec(t *testing.T) {
	b := EncodeScrubStart(42)
	if got, err := DecodeScrubStart(b); err != nil || got != 42 {
		t.Fatalf("round trip: %d, %v", got, err)
	}
	for name, bad := range map[string][]byte{
		"empty":    nil,
		"version":  {2, 42, 0, 0, 0},
		"short":    b[:3],
		"trailing": append(append([]byte(nil), b...), 0),
	} {
		if _, err := DecodeScrubStart(bad); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

// TestScrubStartOnlyMeta: only a metadata server may start a scrub pass.
func TestScrubStartOnlyMeta(t *testing.T) {
	svc := &scrubSvc{}
	h := New(svc, Options{})
	req := EncodeScrubStart(7)
	for _, role := range []transport.Role{transport.RoleClient, transport.RoleStorage, transport.RoleNone} {
		ctx := transport.WithPeer(context.Background(), transport.Peer{Role: role, Addr: "x:1"})
		if _, err := h.Serve(ctx, OpScrubStart, req); !errors.Is(err, syscall.EACCES) {
			t.Errorf("scrub start from %q: %v, want EACCES", role, err)
		}
	}
	if svc.started != 0 {
		t.Fatalf("a refused request started target %d", svc.started)
	}
	ctx := transport.WithPeer(context.Background(), transport.Peer{Role: transport.RoleMeta, Addr: "m:1"})
	if _, err := h.Serve(ctx, OpScrubStart, req); err != nil || svc.started != 7 {
		t.Fatalf("scrub start from meta: %v, started %d", err, svc.started)
	}
	if _, err := h.Serve(ctx, OpScrubStart, req[:2]); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("malformed request: %v", err)
	}
}

type scrubSvc struct {
	proto.StorageService
	started proto.TargetID
}

func (s *scrubSvc) StartScrub(_ context.Context, t proto.TargetID) error {
	s.started = t
	return nil
}

func FuzzDecodeScrubStart(f *testing.F) {
	f.Add(EncodeScrubStart(3))
	f.Fuzz(func(t *testing.T, b []byte) {
		if id, err := DecodeScrubStart(b); err == nil {
			if again, err := DecodeScrubStart(EncodeScrubStart(id)); err != nil || again != id {
				t.Fatalf("re-encoded %d: %d, %v", id, again, err)
			}
		}
	})
}
