package metarpc

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/wire"
)

// Target lifecycle and rebuild (proto.TargetAdmin, `weft target`; ops
// 73..79 of the data-protection range).
const (
	// OpTargetList: every target with its state, and the rebuild's
	// progress.
	OpTargetList uint16 = 73
	// OpTargetState sets a target's state.
	OpTargetState uint16 = 74
	// OpRebuildRate reads, or sets, the rebuild's rate limit.
	OpRebuildRate uint16 = 75
)

// targetAdminVersion is the first byte of every message of these ops:
//
//	list answer: u8 version, u32 n, n × (target as in targetsResp, str state,
//	  bool auto, u64 pending), then the rebuild: bool active, u64 passes,
//	  objects, done, bytes, bytes done, deferred, failed, lost, rate,
//	  measured, i64 eta (ns), i64 rebuild after (ns)
//	state request: u8 version, u32 target, str state
//	rate request: u8 version, bool set, u64 rate; answer: u8 version, u64 rate
const targetAdminVersion = 1

func checkVersion(d *wire.Decoder, what string) {
	if v := d.U8(); d.Err() == nil && v != targetAdminVersion {
		d.Fail(fmt.Errorf("%s of version %d not supported (this side reads %d)", what, v, targetAdminVersion))
	}
}

type targetListResp struct {
	T []proto.TargetStatus
	R proto.RebuildStatus
}

func (m *targetListResp) encode(e *wire.Encoder) {
	e.U8(targetAdminVersion)
	e.U32(uint32(len(m.T)))
	for i := range m.T {
		t := &m.T[i]
		encodeTarget(e, &t.TargetInfo)
		e.String(t.State)
		e.Bool(t.Auto)
		e.U64(t.Pending)
	}
	r := &m.R
	e.Bool(r.Active)
	for _, v := range []uint64{r.Passes, r.Objects, r.Done, r.Bytes, r.BytesDone, r.Deferred, r.Failed, r.Lost, r.Rate, r.Measured} {
		e.U64(v)
	}
	e.I64(int64(r.ETA))
	e.I64(int64(r.RebuildAfter))
}

func (m *targetListResp) decode(d *wire.Decoder) {
	checkVersion(d, "target list")
	if n := d.Count(maxList, 4+4+3*8+1+2*8+4+4*8+4+4+1+8); n > 0 {
		m.T = make([]proto.TargetStatus, n)
		for i := range m.T {
			t := &m.T[i]
			decodeTarget(d, &t.TargetInfo)
			t.State = d.StringMax(32)
			t.Auto = d.Bool()
			t.Pending = d.U64()
		}
	}
	r := &m.R
	r.Active = d.Bool()
	for _, p := range []*uint64{&r.Passes, &r.Objects, &r.Done, &r.Bytes, &r.BytesDone, &r.Deferred, &r.Failed, &r.Lost, &r.Rate, &r.Measured} {
		*p = d.U64()
	}
	r.ETA = time.Duration(d.I64())
	r.RebuildAfter = time.Duration(d.I64())
}

type targetStateReq struct {
	ID    proto.TargetID
	State string
}

func (m *targetStateReq) encode(e *wire.Encoder) {
	e.U8(targetAdminVersion)
	e.U32(uint32(m.ID))
	e.String(m.State)
}

func (m *targetStateReq) decode(d *wire.Decoder) {
	checkVersion(d, "target state request")
	m.ID = proto.TargetID(d.U32())
	m.State = d.StringMax(32)
}

type rebuildRateMsg struct {
	Set  bool
	Rate uint64
}

func (m *rebuildRateMsg) encode(e *wire.Encoder) {
	e.U8(targetAdminVersion)
	e.Bool(m.Set)
	e.U64(m.Rate)
}

func (m *rebuildRateMsg) decode(d *wire.Decoder) {
	checkVersion(d, "rebuild rate")
	m.Set = d.Bool()
	m.Rate = d.U64()
}

// targetMessages returns the request and response of a target admin op.
func targetMessages(op uint16) (req, resp message, ok bool) {
	switch op {
	case OpTargetList:
		return &emptyMsg{}, &targetListResp{}, true
	case OpTargetState:
		return &targetStateReq{}, &emptyMsg{}, true
	case OpRebuildRate:
		return &rebuildRateMsg{}, &rebuildRateMsg{}, true
	}
	return nil, nil, false
}

func (h *handler) callTarget(ctx context.Context, op uint16, req message) (message, error) {
	ta, ok := h.svc.(proto.TargetAdmin)
	if !ok {
		return nil, fmt.Errorf("metarpc: the service has no target lifecycle: %w", syscall.ENOSYS)
	}
	switch op {
	case OpTargetList:
		ts, rs, err := ta.TargetList(ctx)
		return &targetListResp{ts, rs}, err
	case OpTargetState:
		r := req.(*targetStateReq)
		return &emptyMsg{}, ta.SetTargetState(ctx, r.ID, r.State)
	default:
		r := req.(*rebuildRateMsg)
		var set *uint64
		if r.Set {
			set = &r.Rate
		}
		rate, err := ta.RebuildRate(ctx, set)
		return &rebuildRateMsg{Rate: rate}, err
	}
}

// TargetList implements proto.TargetAdmin.
func (c *Client) TargetList(ctx context.Context) ([]proto.TargetStatus, proto.RebuildStatus, error) {
	var r targetListResp
	err := c.do(ctx, OpTargetList, &emptyMsg{}, &r)
	return r.T, r.R, err
}

// SetTargetState implements proto.TargetAdmin.
func (c *Client) SetTargetState(ctx context.Context, id proto.TargetID, state string) error {
	return c.do(ctx, OpTargetState, &targetStateReq{id, state}, &emptyMsg{})
}

// RebuildRate implements proto.TargetAdmin.
func (c *Client) RebuildRate(ctx context.Context, rate *uint64) (uint64, error) {
	req := &rebuildRateMsg{}
	if rate != nil {
		req.Set, req.Rate = true, *rate
	}
	var r rebuildRateMsg
	err := c.do(ctx, OpRebuildRate, req, &r)
	return r.Rate, err
}

var _ proto.TargetAdmin = (*Client)(nil)
