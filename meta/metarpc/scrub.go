package metarpc

import (
	"context"
	"fmt"
	"syscall"

	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/wire"
)

// Scrub (`weft scrub`, issue 9 point 6; ops 93..95 are the scrub's; 110..112 until protocol version 2).
const (
	// OpScrubReport: a storage server reports a target's scrub state and
	// the objects it found corrupt (proto.ScrubReceiver). Storage
	// servers only, on their own targets.
	OpScrubReport uint16 = 93
	// OpScrubStart begins a scrub pass on every target that is up (root
	// only); the answer lists them.
	OpScrubStart uint16 = 94
	// OpScrubStatus returns every target's scrub state and the lost
	// objects.
	OpScrubStatus uint16 = 95
)

// scrubVersion is the first byte of every message of these ops:
//
//	report:  u8 version, state, u32 n, n × object
//	start answer: u8 version, u32 n, n × u32 target
//	status answer: u8 version, u32 n, n × (state, u64 reported, repaired,
//	  lost, i64 heard), u32 m, m × (u32 target, object)
//
// where state is u32 target, bool running, i64 start, i64 end, u64 bytes,
// objects, passes, corrupt, total; and object is u64 ino, u32 stripe,
// u64 gen. Start and status requests are empty.
const scrubVersion = 1

const (
	scrubStateBytes  = 4 + 1 + 2*8 + 5*8
	scrubObjectBytes = 8 + 4 + 8
)

func encodeScrubState(e *wire.Encoder, s *proto.ScrubTarget) {
	e.U32(uint32(s.Target))
	e.Bool(s.Running)
	e.I64(s.Start)
	e.I64(s.End)
	for _, v := range []uint64{s.Bytes, s.Objects, s.Passes, s.Corrupt, s.Total} {
		e.U64(v)
	}
}

func decodeScrubState(d *wire.Decoder, s *proto.ScrubTarget) {
	s.Target = proto.TargetID(d.U32())
	s.Running = d.Bool()
	s.Start = d.I64()
	s.End = d.I64()
	for _, p := range []*uint64{&s.Bytes, &s.Objects, &s.Passes, &s.Corrupt, &s.Total} {
		*p = d.U64()
	}
}

func encodeScrubObject(e *wire.Encoder, o proto.ObjectID) {
	e.U64(uint64(o.Ino))
	e.U32(o.Stripe)
	e.U64(o.Gen)
}

func decodeScrubObject(d *wire.Decoder) proto.ObjectID {
	return proto.ObjectID{Ino: proto.Ino(d.U64()), Stripe: d.U32(), Gen: d.U64()}
}

func checkScrubVersion(d *wire.Decoder, what string) {
	if v := d.U8(); d.Err() == nil && v != scrubVersion {
		d.Fail(fmt.Errorf("%s of version %d not supported (this side reads %d)", what, v, scrubVersion))
	}
}

type scrubReportReq struct{ R proto.ScrubReport }

func (m *scrubReportReq) encode(e *wire.Encoder) {
	e.U8(scrubVersion)
	encodeScrubState(e, &m.R.ScrubTarget)
	e.U32(uint32(len(m.R.Found)))
	for _, o := range m.R.Found {
		encodeScrubObject(e, o)
	}
}

func (m *scrubReportReq) decode(d *wire.Decoder) {
	checkScrubVersion(d, "scrub report")
	decodeScrubState(d, &m.R.ScrubTarget)
	if n := d.Count(proto.MaxScrubFound, scrubObjectBytes); n > 0 {
		m.R.Found = make([]proto.ObjectID, n)
		for i := range m.R.Found {
			m.R.Found[i] = decodeScrubObject(d)
		}
	}
}

type scrubStartResp struct{ T []proto.TargetID }

func (m *scrubStartResp) encode(e *wire.Encoder) {
	e.U8(scrubVersion)
	e.U32(uint32(len(m.T)))
	for _, t := range m.T {
		e.U32(uint32(t))
	}
}

func (m *scrubStartResp) decode(d *wire.Decoder) {
	checkScrubVersion(d, "scrub start answer")
	if n := d.Count(maxList, 4); n > 0 {
		m.T = make([]proto.TargetID, n)
		for i := range m.T {
			m.T[i] = proto.TargetID(d.U32())
		}
	}
}

type scrubStatusResp struct{ S proto.ScrubStatus }

func (m *scrubStatusResp) encode(e *wire.Encoder) {
	e.U8(scrubVersion)
	e.U32(uint32(len(m.S.Targets)))
	for i := range m.S.Targets {
		t := &m.S.Targets[i]
		encodeScrubState(e, &t.ScrubTarget)
		e.U64(t.Reported)
		e.U64(t.Repaired)
		e.U64(t.Lost)
		e.I64(t.Heard)
	}
	e.U32(uint32(len(m.S.Lost)))
	for _, l := range m.S.Lost {
		e.U32(uint32(l.Target))
		encodeScrubObject(e, l.Obj)
	}
}

func (m *scrubStatusResp) decode(d *wire.Decoder) {
	checkScrubVersion(d, "scrub status")
	if n := d.Count(maxList, scrubStateBytes+4*8); n > 0 {
		m.S.Targets = make([]proto.ScrubTargetStatus, n)
		for i := range m.S.Targets {
			t := &m.S.Targets[i]
			decodeScrubState(d, &t.ScrubTarget)
			t.Reported, t.Repaired, t.Lost, t.Heard = d.U64(), d.U64(), d.U64(), d.I64()
		}
	}
	if n := d.Count(proto.MaxScrubLost, 4+scrubObjectBytes); n > 0 {
		m.S.Lost = make([]proto.LostObject, n)
		for i := range m.S.Lost {
			m.S.Lost[i] = proto.LostObject{Target: proto.TargetID(d.U32()), Obj: decodeScrubObject(d)}
		}
	}
}

// scrubMessages returns the request and response of a scrub op.
func scrubMessages(op uint16) (req, resp message, ok bool) {
	switch op {
	case OpScrubReport:
		return &scrubReportReq{}, &emptyMsg{}, true
	case OpScrubStart:
		return &emptyMsg{}, &scrubStartResp{}, true
	case OpScrubStatus:
		return &emptyMsg{}, &scrubStatusResp{}, true
	}
	return nil, nil, false
}

// ScrubService is what the metadata service offers for the scrub;
// meta.Server implements it, and so does Client.
type ScrubService interface {
	proto.ScrubReceiver
	proto.ScrubAdmin
}

func (h *handler) callScrub(ctx context.Context, op uint16, req message) (message, error) {
	sc, ok := h.svc.(ScrubService)
	if !ok {
		return nil, fmt.Errorf("metarpc: the service has no scrub: %w", syscall.ENOSYS)
	}
	switch op {
	case OpScrubReport:
		return &emptyMsg{}, sc.ReportScrub(ctx, req.(*scrubReportReq).R)
	case OpScrubStart:
		ts, err := sc.StartScrub(ctx)
		return &scrubStartResp{ts}, err
	default:
		st, err := sc.ScrubStatus(ctx)
		return &scrubStatusResp{st}, err
	}
}

// ReportScrub implements proto.ScrubReceiver. A report only replaces
// state and asks for repairs that are asked for once, so it may be sent
// again after a failover.
func (c *Client) ReportScrub(ctx context.Context, r proto.ScrubReport) error {
	return c.do(ctx, OpScrubReport, &scrubReportReq{r}, &emptyMsg{})
}

// StartScrub implements proto.ScrubAdmin.
func (c *Client) StartScrub(ctx context.Context) ([]proto.TargetID, error) {
	var r scrubStartResp
	err := c.do(ctx, OpScrubStart, &emptyMsg{}, &r)
	return r.T, err
}

// ScrubStatus implements proto.ScrubAdmin.
func (c *Client) ScrubStatus(ctx context.Context) (proto.ScrubStatus, error) {
	var r scrubStatusResp
	err := c.do(ctx, OpScrubStatus, &emptyMsg{}, &r)
	return r.S, err
}

var _ ScrubService = (*Client)(nil)
