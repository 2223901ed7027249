package storagerpc_test

import (
	"bytes"
	"context"
	"errors"
	"syscall"
	"testing"

	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/storage/storagerpc"
	"github.com/weft-fs/weft/transport"
)

// TestRowVersionsOverRPC runs versioned reads and writes through the
// client, the wire encoding and the handler: a conflict reaches the
// caller as EAGAIN and changes nothing.
func TestRowVersionsOverRPC(t *testing.T) {
	pool := transport.NewPool(loopback{storagerpc.NewHandler(newServer(t), storagerpc.Options{})}, transport.PoolOptions{})
	defer pool.Close()
	c := storagerpc.NewClient(pool, func(context.Context, proto.TargetID) (string, error) { return "loopback", nil })
	obj := proto.ObjectID{Ino: 4, Gen: 1}
	const unit = 1 << 20
	if _, err := c.WriteRow(ctx, 1, obj, proto.RowWrite{Off: unit + 5, Unit: unit, Data: []byte("abc"), Cond: true, Tag: 40}); err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 10)
	n, v, err := c.ReadRow(ctx, 1, obj, unit+4, unit, p)
	if err != nil || !bytes.Equal(p[:n], []byte("\x00abc")) || v != (proto.RowVersion{Tag: 40}) {
		t.Fatalf("read row: %q %+v %v", p[:n], v, err)
	}
	_, err = c.WriteRow(ctx, 1, obj, proto.RowWrite{Off: unit, Unit: unit, Data: []byte("x"), Cond: true, Expect: proto.RowVersion{Tag: 39}, Tag: 41})
	if !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("conflicting write: %v, want EAGAIN", err)
	}
	if n, v, err = c.ReadRow(ctx, 1, obj, unit, unit, p); err != nil || p[0] != 0 || v.Tag != 40 {
		t.Fatalf("after a refused write: %q %+v %v", p[:n], v, err)
	}
	if _, _, err := c.ReadRow(ctx, 1, obj, unit-1, unit, p); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("read over two units: %v, want EINVAL", err)
	}
	if err := c.Fence(ctx, 1, obj); err != nil {
		t.Fatalf("fence from a trusted peer without a capability: %v", err)
	}
	if storagerpc.OpName(storagerpc.OpWriteRow) != "write_row" {
		t.Fatal("no name for OpWriteRow")
	}
}

func FuzzDecodeWriteRow(f *testing.F) {
	f.Add(storagerpc.WriteRowReq{Cap: []byte("c"), RowWrite: proto.RowWrite{Off: 1, Unit: 2, Cond: true, Tag: 3}}.EncodeHeader())
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := storagerpc.DecodeWriteRow(b)
		if err != nil {
			return
		}
		r2, err := storagerpc.DecodeWriteRow(append(r.EncodeHeader(), r.Data...))
		if err != nil || r2.Off != r.Off || r2.Unit != r.Unit || r2.Tag != r.Tag || r2.Expect != r.Expect || !bytes.Equal(r2.Data, r.Data) {
			t.Fatalf("round trip of %+v: %+v, %v", r, r2, err)
		}
	})
}

func FuzzDecodeReadRow(f *testing.F) {
	f.Add(storagerpc.ReadRowReq{ReadReq: storagerpc.ReadReq{Off: 1, Len: 2}, Unit: 3}.Encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := storagerpc.DecodeReadRow(b)
		if err != nil {
			return
		}
		if r2, err := storagerpc.DecodeReadRow(r.Encode()); err != nil || r2.Off != r.Off || r2.Len != r.Len || r2.Unit != r.Unit {
			t.Fatalf("round trip of %+v: %+v, %v", r, r2, err)
		}
	})
}
