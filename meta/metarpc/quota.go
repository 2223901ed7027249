package metarpc

import (
	"context"
	"fmt"
	"syscall"

	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/wire"
)

// Quota op codes (QuotaService). 86..89 are the quotas'.
const (
	OpSetQuota   uint16 = 86 // set the limits of one account (root only)
	OpGetQuota   uint16 = 87 // usage and limits of one account
	OpSetProject uint16 = 88 // tag an inode (and, recursively, its tree) with a project id (root only)
	OpCheckQuota uint16 = 89 // recount usage from the inodes and compare (root only)
)

// QuotaKind says whose account a quota is: a user's, a group's or a
// project's (a directory tree tagged with a project id).
type QuotaKind uint8

// Quota kinds. The numbers are part of the store's keys and the wire.
const (
	QuotaUser    QuotaKind = 1
	QuotaGroup   QuotaKind = 2
	QuotaProject QuotaKind = 3
)

func (k QuotaKind) String() string {
	switch k {
	case QuotaUser:
		return "user"
	case QuotaGroup:
		return "group"
	case QuotaProject:
		return "project"
	}
	return fmt.Sprintf("quota-kind(%d)", uint8(k))
}

// Valid reports whether k is one of the kinds.
func (k QuotaKind) Valid() bool { return k >= QuotaUser && k <= QuotaProject }

// QuotaAmounts counts inodes and bytes: usage, or limits (0 = no limit).
type QuotaAmounts struct {
	Inodes uint64
	Bytes  uint64
}

// Quota is one account: whose it is, what it uses, what it may use.
type Quota struct {
	Kind   QuotaKind
	ID     uint32
	Usage  QuotaAmounts
	Limits QuotaAmounts
}

// QuotaCheck compares one account's recorded usage with a recount from
// the inodes (OpCheckQuota).
type QuotaCheck struct {
	Kind     QuotaKind
	ID       uint32
	Recorded QuotaAmounts
	Counted  QuotaAmounts
}

// QuotaService is what `weft quota` and `weft project` ask of the
// metadata service; meta.Server implements it, and so does Client.
type QuotaService interface {
	SetQuota(ctx context.Context, kind QuotaKind, id uint32, limits QuotaAmounts) error
	GetQuota(ctx context.Context, kind QuotaKind, id uint32) (Quota, error)
	// SetProject tags ino with project id; with recursive, every inode
	// below it too. It returns how many inodes it tagged.
	SetProject(ctx context.Context, ino proto.Ino, id uint32, recursive bool) (uint64, error)
	// CheckQuota recounts usage and returns it beside the recorded usage;
	// with repair the recorded usage is first set to a recount.
	CheckQuota(ctx context.Context, repair bool) ([]QuotaCheck, error)
}

// quotaVersion is the format of the quota messages (their first byte).
const quotaVersion = 1

func checkQuotaVersion(d *wire.Decoder) bool {
	if v := d.U8(); d.Err() == nil && v != quotaVersion {
		d.Fail(fmt.Errorf("quota message version %d not supported (this side reads %d)", v, quotaVersion))
		return false
	}
	return d.Err() == nil
}

func encodeAmounts(e *wire.Encoder, a QuotaAmounts) { e.U64(a.Inodes); e.U64(a.Bytes) }
func decodeAmounts(d *wire.Decoder) QuotaAmounts {
	return QuotaAmounts{Inodes: d.U64(), Bytes: d.U64()}
}

func decodeKind(d *wire.Decoder) QuotaKind {
	k := QuotaKind(d.U8())
	if d.Err() == nil && !k.Valid() {
		d.Fail(fmt.Errorf("quota kind %d", k))
	}
	return k
}

// quotaReq is the request of OpSetQuota (with Limits) and OpGetQuota.
type quotaReq struct {
	Kind   QuotaKind
	ID     uint32
	Limits QuotaAmounts
}

func (m *quotaReq) encode(e *wire.Encoder) {
	e.U8(quotaVersion)
	e.U8(uint8(m.Kind))
	e.U32(m.ID)
	encodeAmounts(e, m.Limits)
}

func (m *quotaReq) decode(d *wire.Decoder) {
	if !checkQuotaVersion(d) {
		return
	}
	m.Kind = decodeKind(d)
	m.ID = d.U32()
	m.Limits = decodeAmounts(d)
}

type quotaResp struct{ Quota Quota }

func (m *quotaResp) encode(e *wire.Encoder) {
	e.U8(quotaVersion)
	e.U8(uint8(m.Quota.Kind))
	e.U32(m.Quota.ID)
	encodeAmounts(e, m.Quota.Usage)
	encodeAmounts(e, m.Quota.Limits)
}

func (m *quotaResp) decode(d *wire.Decoder) {
	if !checkQuotaVersion(d) {
		return
	}
	m.Quota.Kind = decodeKind(d)
	m.Quota.ID = d.U32()
	m.Quota.Usage = decodeAmounts(d)
	m.Quota.Limits = decodeAmounts(d)
}

type projectReq struct {
	Ino       proto.Ino
	ID        uint32
	Recursive bool
}

func (m *projectReq) encode(e *wire.Encoder) {
	e.U8(quotaVersion)
	e.U64(uint64(m.Ino))
	e.U32(m.ID)
	e.Bool(m.Recursive)
}

func (m *projectReq) decode(d *wire.Decoder) {
	if !checkQuotaVersion(d) {
		return
	}
	m.Ino = proto.Ino(d.U64())
	m.ID = d.U32()
	m.Recursive = d.Bool()
}

type countResp struct{ N uint64 }

func (m *countResp) encode(e *wire.Encoder) { e.U64(m.N) }
func (m *countResp) decode(d *wire.Decoder) { m.N = d.U64() }

type checkReq struct{ Repair bool }

func (m *checkReq) encode(e *wire.Encoder) { e.U8(quotaVersion); e.Bool(m.Repair) }
func (m *checkReq) decode(d *wire.Decoder) {
	if checkQuotaVersion(d) {
		m.Repair = d.Bool()
	}
}

type quotaCheckResp struct{ Checks []QuotaCheck }

func (m *quotaCheckResp) encode(e *wire.Encoder) {
	e.U8(quotaVersion)
	e.U32(uint32(len(m.Checks)))
	for _, c := range m.Checks {
		e.U8(uint8(c.Kind))
		e.U32(c.ID)
		encodeAmounts(e, c.Recorded)
		encodeAmounts(e, c.Counted)
	}
}

func (m *quotaCheckResp) decode(d *wire.Decoder) {
	if !checkQuotaVersion(d) {
		return
	}
	if n := d.Count(1<<24, 37); n > 0 {
		m.Checks = make([]QuotaCheck, n)
		for i := range m.Checks {
			c := &m.Checks[i]
			c.Kind = decodeKind(d)
			c.ID = d.U32()
			c.Recorded = decodeAmounts(d)
			c.Counted = decodeAmounts(d)
		}
	}
}

func (h *handler) callQuota(ctx context.Context, op uint16, req message) (message, error) {
	if h.quota == nil {
		return nil, fmt.Errorf("metarpc: the service has no quotas: %w", syscall.ENOSYS)
	}
	switch op {
	case OpSetQuota:
		r := req.(*quotaReq)
		return &emptyMsg{}, h.quota.SetQuota(ctx, r.Kind, r.ID, r.Limits)
	case OpGetQuota:
		r := req.(*quotaReq)
		q, err := h.quota.GetQuota(ctx, r.Kind, r.ID)
		return &quotaResp{q}, err
	case OpSetProject:
		r := req.(*projectReq)
		n, err := h.quota.SetProject(ctx, r.Ino, r.ID, r.Recursive)
		return &countResp{n}, err
	default:
		cs, err := h.quota.CheckQuota(ctx, req.(*checkReq).Repair)
		return &quotaCheckResp{cs}, err
	}
}

// SetQuota implements QuotaService.
func (c *Client) SetQuota(ctx context.Context, kind QuotaKind, id uint32, limits QuotaAmounts) error {
	return c.do(ctx, OpSetQuota, &quotaReq{Kind: kind, ID: id, Limits: limits}, &emptyMsg{})
}

// GetQuota implements QuotaService.
func (c *Client) GetQuota(ctx context.Context, kind QuotaKind, id uint32) (Quota, error) {
	var r quotaResp
	err := c.do(ctx, OpGetQuota, &quotaReq{Kind: kind, ID: id}, &r)
	return r.Quota, err
}

// SetProject implements QuotaService.
func (c *Client) SetProject(ctx context.Context, ino proto.Ino, id uint32, recursive bool) (uint64, error) {
	var r countResp
	err := c.do(ctx, OpSetProject, &projectReq{Ino: ino, ID: id, Recursive: recursive}, &r)
	return r.N, err
}

// CheckQuota implements QuotaService.
func (c *Client) CheckQuota(ctx context.Context, repair bool) ([]QuotaCheck, error) {
	var r quotaCheckResp
	err := c.do(ctx, OpCheckQuota, &checkReq{Repair: repair}, &r)
	return r.Checks, err
}
