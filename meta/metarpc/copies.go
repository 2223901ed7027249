package metarpc

import (
	"context"
	"fmt"
	"syscall"

	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/wire"
)

// Copies of small files' bytes (proto.FileCopies; ops 48..49, 98 and 99
// are this file's). A server without them answers ENOSYS, and the client then
// opens, records writes and looks names up without copies.
const (
	// OpOpenCopy is Open answering the file's copy too.
	OpOpenCopy uint16 = 48
	// OpWriteDoneCopy is WriteDone offering the file's whole content as
	// its copy.
	OpWriteDoneCopy uint16 = 49
	// OpLookupCopy is Lookup answering the file's copy too, where the
	// client may keep it in its lease cache (proto.LookupCopier).
	OpLookupCopy uint16 = 98
	// OpCopiesAfter answers the copies of the files numbered after one
	// that the client may keep in its lease cache
	// (proto.CopyPrefetcher).
	OpCopiesAfter uint16 = 99
)

// copiesVersion is the first byte of every message of these ops:
//
//	open request: u8 version, u64 ino, u8 access
//	open answer: u8 version, attributes, bytes capability, bool has copy,
//	  bytes copy (only if it has one)
//	write-done request: u8 version, u64 ino, u64 end, i64 mtime,
//	  u64 blocks, bytes copy (answered with attributes)
//	lookup request: u8 version, u64 parent, string name
//	lookup answer: u8 version, attributes, bool openable, bool has copy,
//	  bytes copy (only if it has one)
//	copies-after request: u8 version, u64 ino, u32 window
//	copies-after answer: u8 version, u64 through, u32 n (at most
//	  proto.MaxCopiesAfter), then n × (attributes, bytes copy)
//
// The frames' CRC32C covers the bytes on the wire; the server keeps the
// copy with a checksum of its own.
const copiesVersion = 1

func checkCopiesVersion(d *wire.Decoder, what string) {
	if v := d.U8(); d.Err() == nil && v != copiesVersion {
		d.Fail(fmt.Errorf("metarpc: %s of version %d not supported (this side reads %d)", what, v, copiesVersion))
	}
}

type openCopyReq struct {
	Ino  proto.Ino
	Want proto.Access
}

func (m *openCopyReq) encode(e *wire.Encoder) {
	e.U8(copiesVersion)
	e.U64(uint64(m.Ino))
	e.U8(uint8(m.Want))
}

func (m *openCopyReq) decode(d *wire.Decoder) {
	checkCopiesVersion(d, "open-copy request")
	m.Ino = proto.Ino(d.U64())
	m.Want = proto.Access(d.U8())
}

type openCopyResp struct {
	Attr proto.Attr
	Cap  []byte
	Data []byte // nil: no copy
}

func (m *openCopyResp) sizeHint() int { return 16 + attrSizeHint + len(m.Cap) + len(m.Data) }

func (m *openCopyResp) encode(e *wire.Encoder) {
	e.U8(copiesVersion)
	m.Attr.Encode(e)
	e.Bytes(m.Cap)
	encodeCopy(e, m.Data)
}

func (m *openCopyResp) decode(d *wire.Decoder) {
	checkCopiesVersion(d, "open-copy answer")
	m.Attr.Decode(d)
	m.Cap = decodeCap(d)
	m.Data = decodeCopy(d)
}

// encodeCopy writes an answer's copy: bool has copy, then the bytes if so
// (nil: none; an empty copy is never kept).
func encodeCopy(e *wire.Encoder, data []byte) {
	e.Bool(data != nil)
	if data != nil {
		e.Bytes(data)
	}
}

// decodeCopy reads what encodeCopy wrote, into memory of its own (not the
// frame's).
func decodeCopy(d *wire.Decoder) []byte {
	if !d.Bool() {
		return nil
	}
	return append([]byte{}, d.BytesMax(proto.MaxFileCopy)...)
}

type writeDoneCopyReq struct {
	Ino    proto.Ino
	End    uint64
	Mtime  int64
	Blocks uint64
	Data   []byte
}

func (m *writeDoneCopyReq) sizeHint() int { return 64 + len(m.Data) }

func (m *writeDoneCopyReq) encode(e *wire.Encoder) {
	e.U8(copiesVersion)
	e.U64(uint64(m.Ino))
	e.U64(m.End)
	e.I64(m.Mtime)
	e.U64(m.Blocks)
	e.Bytes(m.Data)
}

func (m *writeDoneCopyReq) decode(d *wire.Decoder) {
	checkCopiesVersion(d, "write-done-copy request")
	m.Ino = proto.Ino(d.U64())
	m.End = d.U64()
	m.Mtime = d.I64()
	m.Blocks = d.U64()
	m.Data = append([]byte(nil), d.BytesMax(proto.MaxFileCopy)...) // not the frame's memory
}

type lookupCopyReq struct {
	Parent proto.Ino
	Name   string
}

func (m *lookupCopyReq) encode(e *wire.Encoder) {
	e.U8(copiesVersion)
	e.U64(uint64(m.Parent))
	e.String(m.Name)
}

func (m *lookupCopyReq) decode(d *wire.Decoder) {
	checkCopiesVersion(d, "lookup-copy request")
	m.Parent = proto.Ino(d.U64())
	m.Name = d.String()
}

type lookupCopyResp struct {
	Attr     proto.Attr
	Openable bool
	Data     []byte // nil: no copy
}

func (m *lookupCopyResp) sizeHint() int { return 16 + attrSizeHint + len(m.Data) }

func (m *lookupCopyResp) encode(e *wire.Encoder) {
	e.U8(copiesVersion)
	m.Attr.Encode(e)
	e.Bool(m.Openable)
	encodeCopy(e, m.Data)
}

func (m *lookupCopyResp) decode(d *wire.Decoder) {
	checkCopiesVersion(d, "lookup-copy answer")
	m.Attr.Decode(d)
	m.Openable = d.Bool()
	m.Data = decodeCopy(d)
}

type copiesAfterReq struct {
	Ino    proto.Ino
	Window uint32
}

func (m *copiesAfterReq) encode(e *wire.Encoder) {
	e.U8(copiesVersion)
	e.U64(uint64(m.Ino))
	e.U32(m.Window)
}

func (m *copiesAfterReq) decode(d *wire.Decoder) {
	checkCopiesVersion(d, "copies-after request")
	m.Ino = proto.Ino(d.U64())
	m.Window = d.U32()
}

type copiesAfterResp struct {
	Through proto.Ino
	Copies  []proto.FileCopy
}

func (m *copiesAfterResp) sizeHint() int {
	n := 8
	for _, fc := range m.Copies {
		n += attrSizeHint + 4 + len(fc.Data)
	}
	return n
}

func (m *copiesAfterResp) encode(e *wire.Encoder) {
	e.U8(copiesVersion)
	e.U64(uint64(m.Through))
	e.U32(uint32(len(m.Copies)))
	for _, fc := range m.Copies {
		fc.Attr.Encode(e)
		e.Bytes(fc.Data)
	}
}

func (m *copiesAfterResp) decode(d *wire.Decoder) {
	checkCopiesVersion(d, "copies-after answer")
	m.Through = proto.Ino(d.U64())
	n := d.Count(proto.MaxCopiesAfter, 1)
	if n > 0 {
		m.Copies = make([]proto.FileCopy, n)
	}
	for i := range m.Copies {
		m.Copies[i].Attr.Decode(d)
		m.Copies[i].Data = append([]byte(nil), d.BytesMax(proto.MaxFileCopy)...) // not the frame's memory
	}
}

// copiesMessages returns the request and response of a copies op.
func copiesMessages(op uint16) (req, resp message, ok bool) {
	switch op {
	case OpOpenCopy:
		return &openCopyReq{}, &openCopyResp{}, true
	case OpWriteDoneCopy:
		return &writeDoneCopyReq{}, &attrResp{}, true
	case OpLookupCopy:
		return &lookupCopyReq{}, &lookupCopyResp{}, true
	case OpCopiesAfter:
		return &copiesAfterReq{}, &copiesAfterResp{}, true
	}
	return nil, nil, false
}

func (h *handler) callCopies(ctx context.Context, op uint16, req message) (message, error) {
	fc, ok := h.svc.(proto.FileCopies)
	if !ok {
		return nil, fmt.Errorf("metarpc: the service keeps no copies of small files: %w", syscall.ENOSYS)
	}
	switch r := req.(type) {
	case *openCopyReq:
		a, cap, data, err := fc.OpenCopy(ctx, r.Ino, r.Want)
		return &openCopyResp{a, cap, data}, err
	case *writeDoneCopyReq:
		return attrOut(fc.WriteDoneCopy(ctx, r.Ino, r.End, r.Mtime, r.Blocks, r.Data))
	case *lookupCopyReq:
		lc, ok := h.svc.(proto.LookupCopier)
		if !ok {
			return nil, fmt.Errorf("metarpc: the service answers no copies to lookups: %w", syscall.ENOSYS)
		}
		a, data, openable, err := lc.LookupCopy(ctx, r.Parent, r.Name)
		return &lookupCopyResp{a, openable, data}, err
	case *copiesAfterReq:
		cp, ok := h.svc.(proto.CopyPrefetcher)
		if !ok {
			return nil, fmt.Errorf("metarpc: the service answers no copies ahead: %w", syscall.ENOSYS)
		}
		fcs, through, err := cp.CopiesAfter(ctx, r.Ino, r.Window)
		if len(fcs) > proto.MaxCopiesAfter {
			return nil, fmt.Errorf("metarpc: %d copies answered, at most %d: %w", len(fcs), proto.MaxCopiesAfter, syscall.EIO)
		}
		return &copiesAfterResp{through, fcs}, err
	}
	return nil, fmt.Errorf("metarpc: op %d is not a copies op: %w", op, syscall.EINVAL)
}

// OpenCopy implements proto.FileCopies.
func (c *Client) OpenCopy(ctx context.Context, ino proto.Ino, want proto.Access) (proto.Attr, []byte, []byte, error) {
	var r openCopyResp
	err := c.mutate(ctx, OpOpenCopy, &openCopyReq{ino, want}, &r)
	return r.Attr, r.Cap, r.Data, err
}

// WriteDoneCopy implements proto.FileCopies.
func (c *Client) WriteDoneCopy(ctx context.Context, ino proto.Ino, end uint64, mtime int64, blocks uint64, data []byte) (proto.Attr, error) {
	return c.mutAttr(ctx, OpWriteDoneCopy, &writeDoneCopyReq{ino, end, mtime, blocks, data})
}

// LookupCopy implements proto.LookupCopier. Like Lookup, a read: any
// member that may answer reads does (a follower sends the client on to
// the leader, where leases live).
func (c *Client) LookupCopy(ctx context.Context, parent proto.Ino, name string) (proto.Attr, []byte, bool, error) {
	var r lookupCopyResp
	err := c.do(ctx, OpLookupCopy, &lookupCopyReq{parent, name}, &r)
	return r.Attr, r.Data, r.Openable, err
}

// CopiesAfter implements proto.CopyPrefetcher. A read, sent as Lookup is.
func (c *Client) CopiesAfter(ctx context.Context, ino proto.Ino, window uint32) ([]proto.FileCopy, proto.Ino, error) {
	var r copiesAfterResp
	err := c.do(ctx, OpCopiesAfter, &copiesAfterReq{ino, window}, &r)
	return r.Copies, r.Through, err
}
