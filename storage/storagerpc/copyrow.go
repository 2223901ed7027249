package storagerpc

import (
	"context"
	"fmt"
	"syscall"

	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/wire"
)

// Operation codes of the versioned copy (the range 150..154 is theirs).
const (
	// OpCopyRow copies one unit of a source object into one unit of a
	// destination object with a new version (proto.RowCopier): a shard of
	// an erasure-coded row, for copy_file_range between EC files. Sent to
	// the destination's server, which reads the source itself. Response:
	// empty; EAGAIN if the source unit's version is not the one expected,
	// EREMOTEIO if the source could not be read (dst unchanged either way).
	OpCopyRow uint16 = 150
)

// copyRowFormat is the first byte of a CopyRow request:
//
//	u8 format (1), cap, dst (target u32, ino u64, stripe u32, gen u64),
//	off u64, unit u64, tag u64,
//	srcCap, src (target u32, ino u64, stripe u32, gen u64), srcOff u64,
//	len u32, expect tag u64, expect dirty u8
const copyRowFormat = 1

// CopyRowReq is a versioned copy of one unit into Dst (proto.RowCopy). Cap
// must grant write on Dst, RowCopy.SrcCap read on the source.
type CopyRowReq struct {
	Cap []byte
	Dst ObjectReq
	proto.RowCopy
}

func (r CopyRowReq) Encode() []byte {
	e := wire.NewEncoder(128 + len(r.Cap) + len(r.SrcCap))
	e.U8(copyRowFormat)
	e.Bytes(r.Cap)
	r.Dst.encode(e)
	e.U64(r.Off)
	e.U64(r.Unit)
	e.U64(r.Tag)
	e.Bytes(r.SrcCap)
	ObjectReq{Target: r.SrcTarget, Obj: r.Src}.encode(e)
	e.U64(r.SrcOff)
	e.U32(uint32(r.Len))
	e.U64(r.Expect.Tag)
	e.Bool(r.Expect.Dirty)
	return e.B
}

// DecodeCopyRow decodes a CopyRow request. It never panics; a range over
// MaxIO bytes or across units is an error.
func DecodeCopyRow(b []byte) (CopyRowReq, error) {
	d := wire.NewDecoder(b)
	if f := d.U8(); d.Err() == nil && f != copyRowFormat {
		return CopyRowReq{}, fmt.Errorf("storagerpc: copy-row request of format %d (want %d)", f, copyRowFormat)
	}
	r := CopyRowReq{Cap: decodeCap(d), Dst: decodeObject(d)}
	r.Off, r.Unit, r.Tag = d.U64(), d.U64(), d.U64()
	r.SrcCap = decodeCap(d)
	src := decodeObject(d)
	r.SrcTarget, r.Src = src.Target, src.Obj
	r.SrcOff, r.Len = d.U64(), uint64(d.U32())
	r.Expect = proto.RowVersion{Tag: d.U64(), Dirty: d.Bool()}
	if err := d.Done(); err != nil {
		return CopyRowReq{}, fmt.Errorf("storagerpc: copy-row request: %w", err)
	}
	if r.Len > MaxIO {
		return CopyRowReq{}, fmt.Errorf("storagerpc: copy-row of %d bytes (max %d)", r.Len, MaxIO)
	}
	if r.Unit == 0 {
		return CopyRowReq{}, fmt.Errorf("storagerpc: copy-row request: unit of 0 bytes")
	}
	if r.Len > 0 && (r.Off/r.Unit != (r.Off+r.Len-1)/r.Unit || r.SrcOff/r.Unit != (r.SrcOff+r.Len-1)/r.Unit) {
		return CopyRowReq{}, fmt.Errorf("storagerpc: copy-row request: %d bytes at %d (source %d) span units of %d", r.Len, r.Off, r.SrcOff, r.Unit)
	}
	return r, nil
}

// serveCopyRow serves OpCopyRow; ok is false for any other op.
func (h *Handler) serveCopyRow(ctx context.Context, op uint16, req []byte) (resp []byte, ok bool, err error) {
	if op != OpCopyRow {
		return nil, false, nil
	}
	r, err := DecodeCopyRow(req)
	if err != nil {
		resp, err = h.bad(op, req, err)
		return resp, true, err
	}
	if err := h.guard.object(ctx, op, r.Cap, r.Dst.Obj, proto.AccessWrite); err != nil {
		return nil, true, err
	}
	if err := h.guard.object(ctx, op, r.SrcCap, r.Src, proto.AccessRead); err != nil {
		return nil, true, err
	}
	rc, isRC := h.svc.(proto.RowCopier)
	if !isRC {
		return nil, true, fmt.Errorf("storagerpc: this storage cannot copy versioned rows: %w", syscall.ENOSYS)
	}
	// The server holds the unit's bytes between its read and its write:
	// they count against the read budgets, as a read's buffer does.
	g, err := h.acquire(ctx, readCost(uint32(r.Len)))
	if err != nil {
		return nil, true, err
	}
	defer g.release()
	// The destination's capability goes with the write, so that a fenced
	// object refuses a copy from before its repair as it refuses a write.
	return nil, true, rc.CopyRow(proto.WithCapability(ctx, r.Cap), r.Dst.Target, r.Dst.Obj, r.RowCopy)
}

var _ proto.RowCopier = (*Client)(nil)

// CopyRow implements proto.RowCopier: the request goes to dst's server.
func (c *Client) CopyRow(ctx context.Context, t proto.TargetID, dst proto.ObjectID, rc proto.RowCopy) error {
	if rc.Len > MaxIO {
		return fmt.Errorf("storagerpc: copy-row of %d bytes (max %d): %w", rc.Len, MaxIO, syscall.EINVAL)
	}
	req := CopyRowReq{Cap: proto.CapabilityFrom(ctx), Dst: ObjectReq{Target: t, Obj: dst}, RowCopy: rc}
	_, err := c.call(ctx, t, OpCopyRow, req.Encode())
	return err
}
