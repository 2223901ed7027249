package storagerpc

import (
	"context"
	"fmt"
	"syscall"

	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/transport"
	"github.com/weft-fs/weft/wire"
)

// Operation codes of versioned object access (proto.RowVersioner; the
// range 130..139 is theirs).
const (
	// OpReadRow reads a range of one unit of an object with the unit's
	// version. Response: tag u64, dirty u8, then the bytes read.
	OpReadRow uint16 = 130
	// OpWriteRow is a versioned (maybe conditional) write of one unit.
	// Response: the object's write version (u64). A version other than
	// the one expected: EAGAIN.
	OpWriteRow uint16 = 131
	// OpFence makes an object refuse writes whose capability was issued
	// before the request's (storage.Target.Fence). Body: SyncReq's.
	OpFence uint16 = 132
)

// rowVersionFormat is the first byte of a ReadRow and a WriteRow request,
// so that their layout can change without new op codes.
const rowVersionFormat = 1

// ReadRowReq asks for Len bytes at Off, in one unit of Unit bytes.
type ReadRowReq struct {
	ReadReq
	Unit uint64
}

func (r ReadRowReq) Encode() []byte {
	e := wire.NewEncoder(48 + len(r.Cap))
	e.U8(rowVersionFormat)
	e.Bytes(r.Cap)
	r.encode(e)
	e.U64(r.Off)
	e.U32(r.Len)
	e.U64(r.Unit)
	return e.B
}

func DecodeReadRow(b []byte) (ReadRowReq, error) {
	d := wire.NewDecoder(b)
	if f := d.U8(); d.Err() == nil && f != rowVersionFormat {
		return ReadRowReq{}, fmt.Errorf("storagerpc: read-row request of format %d (want %d)", f, rowVersionFormat)
	}
	r := ReadRowReq{ReadReq: ReadReq{Cap: decodeCap(d), ObjectReq: decodeObject(d), Off: d.U64(), Len: d.U32()}, Unit: d.U64()}
	if err := d.Done(); err != nil {
		return ReadRowReq{}, fmt.Errorf("storagerpc: read-row request: %w", err)
	}
	if r.Len > MaxIO {
		return ReadRowReq{}, fmt.Errorf("storagerpc: read-row of %d bytes (max %d)", r.Len, MaxIO)
	}
	return r, nil
}

// WriteRowReq is a versioned write (proto.RowWrite) of one object.
type WriteRowReq struct {
	Cap []byte
	ObjectReq
	proto.RowWrite
}

// EncodeHeader returns the request without its data (sent as a second
// part, as WriteReq's).
func (r WriteRowReq) EncodeHeader() []byte {
	e := wire.NewEncoder(80 + len(r.Cap))
	e.U8(rowVersionFormat)
	e.Bytes(r.Cap)
	r.encode(e)
	e.U64(r.Off)
	e.U64(r.Unit)
	e.Bool(r.Cond)
	e.U64(r.Expect.Tag)
	e.Bool(r.Expect.Dirty)
	e.U64(r.Tag)
	e.U32(uint32(len(r.Data)))
	return e.B
}

// DecodeWriteRow decodes a versioned write; Data aliases b.
func DecodeWriteRow(b []byte) (WriteRowReq, error) {
	d := wire.NewDecoder(b)
	if f := d.U8(); d.Err() == nil && f != rowVersionFormat {
		return WriteRowReq{}, fmt.Errorf("storagerpc: write-row request of format %d (want %d)", f, rowVersionFormat)
	}
	r := WriteRowReq{Cap: decodeCap(d), ObjectReq: decodeObject(d)}
	r.Off, r.Unit, r.Cond = d.U64(), d.U64(), d.Bool()
	r.Expect = proto.RowVersion{Tag: d.U64(), Dirty: d.Bool()}
	r.Tag = d.U64()
	r.Data = d.BytesMax(MaxIO)
	if err := d.Done(); err != nil {
		return WriteRowReq{}, fmt.Errorf("storagerpc: write-row request: %w", err)
	}
	return r, nil
}

// serveRow serves the ops above; ok is false for any other op.
func (h *Handler) serveRow(ctx context.Context, op uint16, req []byte) (resp []byte, ok bool, err error) {
	rv, isRV := h.svc.(proto.RowVersioner)
	switch op {
	case OpReadRow:
		r, err := DecodeReadRow(req)
		if err != nil {
			resp, err = h.bad(op, req, err)
			return resp, true, err
		}
		if err := h.guard.object(ctx, op, r.Cap, r.Obj, proto.AccessRead); err != nil {
			return nil, true, err
		}
		if !isRV {
			return nil, true, fmt.Errorf("storagerpc: this storage has no object versions: %w", syscall.ENOSYS)
		}
		g, err := h.acquire(ctx, readCost(r.Len)) // (and 9 bytes of version, not counted)
		if err != nil {
			return nil, true, err
		}
		buf := make([]byte, 9+int(r.Len))
		n, v, err := rv.ReadRow(ctx, r.Target, r.Obj, r.Off, r.Unit, buf[9:])
		if err != nil {
			g.release()
			return nil, true, err
		}
		e := wire.Encoder{B: buf[:0]}
		e.U64(v.Tag)
		e.Bool(v.Dirty)
		if !transport.AfterResponse(ctx, g.release) {
			g.release()
		}
		return buf[:9+n], true, nil
	case OpWriteRow:
		r, err := DecodeWriteRow(req)
		if err != nil {
			resp, err = h.bad(op, req, err)
			return resp, true, err
		}
		if err := h.guard.object(ctx, op, r.Cap, r.Obj, proto.AccessWrite); err != nil {
			transport.DoneWithRequest(ctx)
			return nil, true, err
		}
		if !isRV {
			transport.DoneWithRequest(ctx)
			return nil, true, fmt.Errorf("storagerpc: this storage has no object versions: %w", syscall.ENOSYS)
		}
		v, err := rv.WriteRow(proto.WithCapability(ctx, r.Cap), r.Target, r.Obj, r.RowWrite)
		transport.DoneWithRequest(ctx)
		if err != nil {
			return nil, true, err
		}
		return EncodeVersion(v), true, nil
	case OpFence:
		r, err := DecodeSync(req)
		if err != nil {
			resp, err = h.bad(op, req, err)
			return resp, true, err
		}
		if err := h.guard.object(ctx, op, r.Cap, r.Obj, proto.AccessWrite); err != nil {
			return nil, true, err
		}
		if !isRV {
			return nil, true, fmt.Errorf("storagerpc: this storage has no object versions: %w", syscall.ENOSYS)
		}
		return nil, true, rv.Fence(proto.WithCapability(ctx, r.Cap), r.Target, r.Obj)
	}
	return nil, false, nil
}

func rowOpName(op uint16) string {
	switch op {
	case OpReadRow:
		return "read_row"
	case OpWriteRow:
		return "write_row"
	case OpFence:
		return "fence"
	}
	return ""
}

var _ proto.RowVersioner = (*Client)(nil)

// ReadRow implements proto.RowVersioner.
func (c *Client) ReadRow(ctx context.Context, t proto.TargetID, obj proto.ObjectID, off, unit uint64, p []byte) (int, proto.RowVersion, error) {
	if len(p) > MaxIO {
		return 0, proto.RowVersion{}, fmt.Errorf("storagerpc: read-row of %d bytes (max %d): %w", len(p), MaxIO, syscall.EINVAL)
	}
	req := ReadRowReq{ReadReq: ReadReq{Cap: proto.CapabilityFrom(ctx), ObjectReq: ObjectReq{Target: t, Obj: obj}, Off: off, Len: uint32(len(p))}, Unit: unit}
	if c.bufs != nil {
		// The answer (version, then data) lands in a pooled buffer; the
		// transport is done with it when call returns.
		buf := c.bufs.Get(9 + len(p))
		defer c.bufs.Put(buf)
		ctx = transport.WithResponseBuffer(ctx, buf)
	}
	resp, err := c.call(ctx, t, OpReadRow, req.Encode())
	if err != nil {
		return 0, proto.RowVersion{}, err
	}
	if len(resp) < 9 || len(resp)-9 > len(p) {
		return 0, proto.RowVersion{}, fmt.Errorf("storagerpc: read-row answered %d bytes for %d: %w", len(resp), len(p), syscall.EIO)
	}
	d := wire.NewDecoder(resp[:9])
	v := proto.RowVersion{Tag: d.U64(), Dirty: d.Bool()}
	return copy(p, resp[9:]), v, nil
}

// WriteRow implements proto.RowVersioner. Data is at most MaxIO bytes
// (a unit is written whole or not at all).
func (c *Client) WriteRow(ctx context.Context, t proto.TargetID, obj proto.ObjectID, w proto.RowWrite) (uint64, error) {
	if len(w.Data) > MaxIO {
		return 0, fmt.Errorf("storagerpc: write-row of %d bytes (max %d): %w", len(w.Data), MaxIO, syscall.EINVAL)
	}
	req := WriteRowReq{Cap: proto.CapabilityFrom(ctx), ObjectReq: ObjectReq{Target: t, Obj: obj}, RowWrite: w}
	resp, err := c.call(ctx, t, OpWriteRow, req.EncodeHeader(), w.Data)
	if err != nil {
		return 0, err
	}
	v, err := DecodeVersion(resp)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", err, syscall.EIO)
	}
	return v, nil
}

// Fence implements proto.RowVersioner.
func (c *Client) Fence(ctx context.Context, t proto.TargetID, obj proto.ObjectID) error {
	_, err := c.call(ctx, t, OpFence, SyncReq{Cap: proto.CapabilityFrom(ctx), ObjectReq: ObjectReq{Target: t, Obj: obj}}.Encode())
	return err
}
