package storagerpc

import (
	"context"
	"fmt"
	"syscall"

	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/wire"
)

// Scrub ops (the range 170..174 is the scrub's).
const (
	// OpScrubStart asks the server of a target to begin a scrub pass of
	// it now (proto.ScrubStarter): `weft scrub --now`, relayed by the
	// metadata service. Only metadata servers may send it.
	OpScrubStart uint16 = 170
)

// scrubVersion is the format of a scrub start request:
//
//	u8 version, u32 target
//
// The response is empty.
const scrubVersion = 1

// EncodeScrubStart encodes a scrub start request.
func EncodeScrubStart(t proto.TargetID) []byte {
	e := wire.NewEncoder(5)
	e.U8(scrubVersion)
	e.U32(uint32(t))
	return e.B
}

// DecodeScrubStart decodes a scrub start request; it never panics.
func DecodeScrubStart(b []byte) (proto.TargetID, error) {
	d := wire.NewDecoder(b)
	if v := d.U8(); d.Err() == nil && v != scrubVersion {
		return 0, fmt.Errorf("storagerpc: scrub request version %d not supported (this server reads %d)", v, scrubVersion)
	}
	t := proto.TargetID(d.U32())
	if err := d.Done(); err != nil {
		return 0, fmt.Errorf("storagerpc: scrub request: %w", err)
	}
	return t, nil
}

// StartScrub implements proto.ScrubStarter: the request goes to the
// server of the target.
func (c *Client) StartScrub(ctx context.Context, t proto.TargetID) error {
	_, err := c.call(ctx, t, OpScrubStart, EncodeScrubStart(t))
	return err
}

var _ proto.ScrubStarter = (*Client)(nil)

// serveScrub serves the scrub ops; ok is false for another op.
func (h *Handler) serveScrub(ctx context.Context, op uint16, req []byte) (_ []byte, _ error, ok bool) {
	if op != OpScrubStart {
		return nil, nil, false
	}
	t, err := DecodeScrubStart(req)
	if err != nil {
		resp, err := h.bad(op, req, err)
		return resp, err, true
	}
	if err := h.guard.metaOnly(ctx, op); err != nil {
		return nil, err, true
	}
	sc, ok := h.svc.(proto.ScrubStarter)
	if !ok {
		return nil, fmt.Errorf("storagerpc: this storage has no scrub: %w", syscall.ENOSYS), true
	}
	return nil, sc.StartScrub(ctx, t), true
}
