package storagerpc_test

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"syscall"
	"testing"

	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/storage/storagerpc"
	"github.com/weft-fs/weft/transport"
)

// TestCopyRowOverRPC copies a versioned unit from an object on target 1
// to one on target 2 through the client, the wire encoding and the
// handler: the destination gets the bytes (zeros past the source's end)
// and the new tag; a source of another version than expected is EAGAIN
// and leaves the destination as it was.
func TestCopyRowOverRPC(t *testing.T) {
	pool := transport.NewPool(loopback{storagerpc.NewHandler(newServer(t), storagerpc.Options{})}, transport.PoolOptions{})
	defer pool.Close()
	c := storagerpc.NewClient(pool, func(context.Context, proto.TargetID) (string, error) { return "loopback", nil })
	src := proto.ObjectID{Ino: 4, Stripe: 1, Gen: 1}
	dst := proto.ObjectID{Ino: 5, Stripe: 2, Gen: 1}
	const unit = 64 << 10
	data := bytes.Repeat([]byte("weft"), 1000) // 4000 bytes: the rest of the unit reads as zeros
	if _, err := c.WriteRow(ctx, 1, src, proto.RowWrite{Off: unit, Unit: unit, Data: data, Tag: 40}); err != nil {
		t.Fatal(err)
	}
	rc := proto.RowCopy{SrcTarget: 1, Src: src, SrcOff: unit, Expect: proto.RowVersion{Tag: 40},
		Off: 3 * unit, Unit: unit, Len: unit, Tag: 77}
	if err := c.CopyRow(ctx, 2, dst, rc); err != nil {
		t.Fatal(err)
	}
	p := make([]byte, unit)
	n, v, err := c.ReadRow(ctx, 2, dst, 3*unit, unit, p)
	want := append(bytes.Clone(data), make([]byte, unit-len(data))...)
	if err != nil || n != unit || !bytes.Equal(p, want) || v != (proto.RowVersion{Tag: 77}) {
		t.Fatalf("copied unit: %d bytes, version %+v, %v (equal: %v)", n, v, err, bytes.Equal(p, want))
	}

	// The source moved on: the copy is refused and changes nothing.
	rc.Expect, rc.Tag = proto.RowVersion{Tag: 39}, 78
	if err := c.CopyRow(ctx, 2, dst, rc); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("copy of another version: %v, want EAGAIN", err)
	}
	if _, v, err := c.ReadRow(ctx, 2, dst, 3*unit, unit, p); err != nil || v.Tag != 77 || !bytes.Equal(p, want) {
		t.Fatalf("after a refused copy: version %+v, %v", v, err)
	}

	// A range over two units is malformed.
	rc.Expect, rc.SrcOff = proto.RowVersion{Tag: 40}, unit+1
	if err := c.CopyRow(ctx, 2, dst, rc); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("copy across units: %v, want EINVAL", err)
	}
	if storagerpc.OpName(storagerpc.OpCopyRow) != "copy_row" {
		t.Fatal("no name for OpCopyRow")
	}
}

func TestDecodeCopyRowRefuses(t *testing.T) {
	good := storagerpc.CopyRowReq{Cap: []byte("c"), RowCopy: proto.RowCopy{SrcCap: []byte("s"), Off: 8, Unit: 16, Len: 8, Tag: 1}}
	if _, err := storagerpc.DecodeCopyRow(good.Encode()); err != nil {
		t.Fatalf("good request: %v", err)
	}
	for name, r := range map[string]storagerpc.CopyRowReq{
		"no unit":       {RowCopy: proto.RowCopy{Len: 1}},
		"across units":  {RowCopy: proto.RowCopy{Off: 9, Unit: 16, Len: 8}},
		"source across": {RowCopy: proto.RowCopy{SrcOff: 15, Unit: 16, Len: 2}},
		"over MaxIO":    {RowCopy: proto.RowCopy{Unit: 1 << 30, Len: storagerpc.MaxIO + 1}},
	} {
		if _, err := storagerpc.DecodeCopyRow(r.Encode()); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
	b := good.Encode()
	b[0] = 2
	if _, err := storagerpc.DecodeCopyRow(b); err == nil {
		t.Error("format 2: decoded")
	}
	if _, err := storagerpc.DecodeCopyRow(append(good.Encode(), 0)); err == nil {
		t.Error("trailing byte: decoded")
	}
}

func FuzzDecodeCopyRow(f *testing.F) {
	f.Add(storagerpc.CopyRowReq{Cap: []byte("c"), Dst: storagerpc.ObjectReq{Target: 2, Obj: proto.ObjectID{Ino: 9, Stripe: 1, Gen: 5}},
		RowCopy: proto.RowCopy{SrcTarget: 3, Src: proto.ObjectID{Ino: 8, Stripe: 4, Gen: 2}, SrcOff: 1 << 20, SrcCap: []byte("s"),
			Expect: proto.RowVersion{Tag: 7, Dirty: true}, Off: 2 << 20, Unit: 1 << 20, Len: 1 << 20, Tag: 9}}.Encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := storagerpc.DecodeCopyRow(b)
		if err != nil {
			return
		}
		// (A flag byte other than 0 or 1 reads as true: compare the
		// decoded requests, not the bytes.)
		r2, err := storagerpc.DecodeCopyRow(r.Encode())
		if err != nil || !reflect.DeepEqual(r2, r) {
			t.Fatalf("round trip of %+v: %+v, %v", r, r2, err)
		}
	})
}
