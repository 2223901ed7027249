package storagerpc

import (
	"context"
	"fmt"
	"syscall"

	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/transport"
	"github.com/weft-fs/weft/wire"
)

// Rebuild ops (the range 120..129 is the rebuild's).
const (
	// OpRebuild asks the server of a target to write a range of one of
	// its objects from other storage servers' copies or shards
	// (proto.ObjectRebuilder): the metadata service's rebuild. Only
	// metadata servers may send it; it carries no capability.
	OpRebuild uint16 = 120
)

// rebuildVersion is the format of a RebuildReq:
//
//	u8 version, object (u32 target, u64 ino, u32 slot, u64 gen),
//	u64 off, u64 len, u64 size, u8 flags, u8 ec data, u8 ec parity, u8 shard,
//	u64 unit, u32 n, n × (u32 target, u32 slot, u8 shard), i64 fence
//
// The response is a u64: the bytes written. Version 2 added unit (the
// rows of an EC shard carry versions: package storage, "Object versions");
// version 3 the fence (proto.RebuildRequest.Fence). A version 2 request
// (an older metadata server) is read as unfenced.
const rebuildVersion = 3

// EncodeRebuild encodes a rebuild request.
func EncodeRebuild(r proto.RebuildRequest) []byte {
	e := wire.NewEncoder(64 + 9*len(r.Sources))
	e.U8(rebuildVersion)
	ObjectReq{Target: r.Target, Obj: r.Obj}.encode(e)
	e.U64(r.Off)
	e.U64(r.Len)
	e.U64(r.Size)
	e.U8(r.Flags)
	e.U8(r.ECData)
	e.U8(r.ECParity)
	e.U8(r.Shard)
	e.U64(r.Unit)
	e.U32(uint32(len(r.Sources)))
	for _, s := range r.Sources {
		e.U32(uint32(s.Target))
		e.U32(s.Slot)
		e.U8(s.Shard)
	}
	e.U64(uint64(r.Fence))
	return e.B
}

// DecodeRebuild decodes a rebuild request; it never panics.
func DecodeRebuild(b []byte) (proto.RebuildRequest, error) {
	d := wire.NewDecoder(b)
	v := d.U8()
	if d.Err() == nil && v != rebuildVersion && v != 2 {
		return proto.RebuildRequest{}, fmt.Errorf("storagerpc: rebuild request version %d not supported (this server reads 2 and %d)", v, rebuildVersion)
	}
	o := decodeObject(d)
	r := proto.RebuildRequest{Target: o.Target, Obj: o.Obj, Off: d.U64(), Len: d.U64(), Size: d.U64(),
		Flags: d.U8(), ECData: d.U8(), ECParity: d.U8(), Shard: d.U8(), Unit: d.U64()}
	if n := d.Count(proto.MaxRebuildSources, 9); n > 0 {
		r.Sources = make([]proto.RebuildSource, n)
		for i := range r.Sources {
			r.Sources[i] = proto.RebuildSource{Target: proto.TargetID(d.U32()), Slot: d.U32(), Shard: d.U8()}
		}
	}
	if v >= 3 {
		r.Fence = int64(d.U64())
	}
	if err := d.Done(); err != nil {
		return proto.RebuildRequest{}, fmt.Errorf("storagerpc: rebuild request: %w", err)
	}
	if r.Flags&^(proto.RebuildStart|proto.RebuildFinish) != 0 {
		return proto.RebuildRequest{}, fmt.Errorf("storagerpc: rebuild request: unknown flags %#x", r.Flags)
	}
	if r.Fence < 0 {
		return proto.RebuildRequest{}, fmt.Errorf("storagerpc: rebuild request: fence %d", r.Fence)
	}
	if r.Len > MaxCopy {
		return proto.RebuildRequest{}, fmt.Errorf("storagerpc: rebuild request of %d bytes (at most %d)", r.Len, MaxCopy)
	}
	if r.ECData > 0 && r.Unit == 0 {
		return proto.RebuildRequest{}, fmt.Errorf("storagerpc: rebuild request: an ec shard without its unit")
	}
	if (r.ECData == 0) != (r.ECParity == 0) {
		return proto.RebuildRequest{}, fmt.Errorf("storagerpc: rebuild request: ec %d+%d", r.ECData, r.ECParity)
	}
	return r, nil
}

// RebuildObject implements proto.ObjectRebuilder: the request goes to the
// server of its target.
func (c *Client) RebuildObject(ctx context.Context, r proto.RebuildRequest) (uint64, error) {
	resp, err := c.call(ctx, r.Target, OpRebuild, EncodeRebuild(r))
	if err != nil {
		return 0, err
	}
	return DecodeVersion(resp)
}

var _ proto.ObjectRebuilder = (*Client)(nil)

// serveRebuild serves the rebuild ops; ok is false for another op.
func (h *Handler) serveRebuild(ctx context.Context, op uint16, req []byte) (_ []byte, _ error, ok bool) {
	if op != OpRebuild {
		return nil, nil, false
	}
	r, err := DecodeRebuild(req)
	if err != nil {
		resp, err := h.bad(op, req, err)
		return resp, err, true
	}
	if err := h.guard.metaOnly(ctx, op); err != nil {
		return nil, err, true
	}
	rb, ok := h.svc.(proto.ObjectRebuilder)
	if !ok {
		return nil, fmt.Errorf("storagerpc: this storage cannot rebuild objects: %w", syscall.ENOSYS), true
	}
	n, err := rb.RebuildObject(ctx, r)
	if err != nil {
		return nil, err, true
	}
	return EncodeVersion(n), nil, true
}

// metaOnly admits metadata servers (and in-process callers, and
// unauthenticated peers where those are trusted): the rebuild is the
// metadata service's to ask for; a storage server or a client may not
// make a server write objects from others'.
func (g *guard) metaOnly(ctx context.Context, op uint16) error {
	p, ok := transport.PeerFrom(ctx)
	switch {
	case !ok, p.Role == transport.RoleMeta:
		return nil
	case p.Role == transport.RoleNone && g.allowUnauth:
		return nil
	}
	return g.refuse(p, op, "only metadata servers may ask for a rebuild")
}
