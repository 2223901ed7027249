package storagerpc

import (
	"context"
	"errors"
	"reflect"
	"syscall"
	"testing"

	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/transport"
)

func sampleRebuild() proto.RebuildRequest {
	return proto.RebuildRequest{Target: 3, Obj: proto.ObjectID{Ino: 7, Gen: 9, Stripe: 2}, Off: 4 << 20, Len: 1 << 20,
		Size: 5 << 20, Flags: proto.RebuildFinish, ECData: 2, ECParity: 1, Shard: 2, Unit: 1 << 20,
		Sources: []proto.RebuildSource{{Target: 1, Slot: 0, Shard: 0}, {Target: 2, Slot: 1, Shard: 1}},
		Fence:   1_800_000_000_123_456_789}
}

func TestRebuildCodec(t *testing.T) {
	r := sampleRebuild()
	got, err := DecodeRebuild(EncodeRebuild(r))
	if err != nil || !reflect.DeepEqual(got, r) {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	for name, bad := range map[string]proto.RebuildRequest{
		"flags":   {Flags: 4},
		"ec half": {ECData: 2},
		"too big": {Len: MaxCopy + 1},
		"no unit": {ECData: 2, ECParity: 1},
		"fence":   {Fence: -1},
	} {
		if _, err := DecodeRebuild(EncodeRebuild(bad)); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
	b := EncodeRebuild(r)
	b[0] = 1
	if _, err := DecodeRebuild(b); err == nil {
		t.Error("version 1 (no unit) decoded")
	}
	// Version 2 (an older metadata server) has no fence: read as unfenced.
	b = EncodeRebuild(r)
	b = b[:len(b)-8]
	b[0] = 2
	want := r
	want.Fence = 0
	if got, err := DecodeRebuild(b); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("version 2: %+v, %v", got, err)
	}
	b[0] = 3
	if _, err := DecodeRebuild(b); err == nil {
		t.Error("version 3 without its fence decoded")
	}
}

// TestRebuildOnlyMeta: a client or a storage server may not ask for a
// rebuild; a metadata server may.
func TestRebuildOnlyMeta(t *testing.T) {
	h := New(rebuildSvc{}, Options{})
	req := EncodeRebuild(sampleRebuild())
	for _, role := range []transport.Role{transport.RoleClient, transport.RoleStorage, transport.RoleNone} {
		ctx := transport.WithPeer(context.Background(), transport.Peer{Role: role, Addr: "x:1"})
		if _, err := h.Serve(ctx, OpRebuild, req); !errors.Is(err, syscall.EACCES) {
			t.Errorf("rebuild from %q: %v, want EACCES", role, err)
		}
	}
	ctx := transport.WithPeer(context.Background(), transport.Peer{Role: transport.RoleMeta, Addr: "m:1"})
	resp, err := h.Serve(ctx, OpRebuild, req)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := DecodeVersion(resp); err != nil || n != 1<<20 {
		t.Fatalf("answer %d, %v", n, err)
	}
}

type rebuildSvc struct{ proto.StorageService }

func (rebuildSvc) RebuildObject(_ context.Context, r proto.RebuildRequest) (uint64, error) {
	return r.Len, nil
}

func FuzzDecodeRebuild(f *testing.F) {
	f.Add(EncodeRebuild(sampleRebuild()))
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRebuild(b)
		if err != nil {
			return
		}
		if again, err := DecodeRebuild(EncodeRebuild(r)); err != nil || !reflect.DeepEqual(again, r) {
			t.Fatalf("re-encoded %+v: %+v, %v", r, again, err)
		}
	})
}
