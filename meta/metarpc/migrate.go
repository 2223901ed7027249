package metarpc

import (
	"context"
	"fmt"
	"syscall"

	"github.com/weft-fs/weft/layout"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/wire"
)

// Online restripe (proto.Migrator, `weft migrate`; ops 64..68 are this
// file's; until protocol version 2 they were 100..102 and 120..121, codes
// of storage ops).
const (
	// OpMigrateBegin places a new layout for a file and answers a ticket.
	OpMigrateBegin uint16 = 64
	// OpMigrateCommit swaps the file's layout for the ticket's.
	OpMigrateCommit uint16 = 65
	// OpMigrateAbort drops a ticket's new objects.
	OpMigrateAbort uint16 = 66
)

// Ops 67..68: a handle's follow of a restripe, the ticket's renewal.
const (
	// OpMigrateFollow answers a handle opened at an earlier generation
	// with the file's current attributes and a capability
	// (proto.MigrateFollower).
	OpMigrateFollow uint16 = 67
	// OpMigrateRenew extends a ticket's life while its copy runs.
	OpMigrateRenew uint16 = 68
)

// migrateVersion is the first byte of every message of these ops:
//
//	begin request: u8 version, u64 ino, layout (the policy)
//	ticket (begin answer, commit and abort requests): u8 version, u64 ino,
//	  u64 gen, u64 new gen, layout, i64 mtime, i64 ctime, u64 size,
//	  i64 until, bytes capability, u64 blocks
//	follow request: u8 version, u64 ino, u64 gen, u8 access (its answer
//	  is Open's: attributes and capability)
//	renew: a ticket, answered with the ticket renewed
const migrateVersion = 1

func checkMigrateVersion(d *wire.Decoder, what string) {
	if v := d.U8(); d.Err() == nil && v != migrateVersion {
		d.Fail(fmt.Errorf("metarpc: %s of version %d not supported (this side reads %d)", what, v, migrateVersion))
	}
}

type migrateBeginReq struct {
	Ino    proto.Ino
	Policy layout.Layout
}

func (m *migrateBeginReq) encode(e *wire.Encoder) {
	e.U8(migrateVersion)
	e.U64(uint64(m.Ino))
	proto.EncodeLayout(e, m.Policy)
}

func (m *migrateBeginReq) decode(d *wire.Decoder) {
	checkMigrateVersion(d, "migrate request")
	m.Ino = proto.Ino(d.U64())
	m.Policy = proto.DecodeLayout(d)
}

type followReq struct {
	Ino  proto.Ino
	Gen  uint64
	Want proto.Access
}

func (m *followReq) encode(e *wire.Encoder) {
	e.U8(migrateVersion)
	e.U64(uint64(m.Ino))
	e.U64(m.Gen)
	e.U8(uint8(m.Want))
}

func (m *followReq) decode(d *wire.Decoder) {
	checkMigrateVersion(d, "follow request")
	m.Ino = proto.Ino(d.U64())
	m.Gen = d.U64()
	m.Want = proto.Access(d.U8())
}

// maxCapLen bounds a capability on the wire (the decoder's bound).
const maxCapLen = 4096

type ticketMsg struct{ T proto.MigrateTicket }

func (m *ticketMsg) encode(e *wire.Encoder) {
	t := &m.T
	e.U8(migrateVersion)
	e.U64(uint64(t.Ino))
	e.U64(t.Gen)
	e.U64(t.NewGen)
	proto.EncodeLayout(e, t.Layout)
	e.I64(t.Mtime)
	e.I64(t.Ctime)
	e.U64(t.Size)
	e.I64(t.Until)
	e.Bytes(t.Cap)
	e.U64(t.Blocks)
}

func (m *ticketMsg) decode(d *wire.Decoder) {
	checkMigrateVersion(d, "migrate ticket")
	t := &m.T
	t.Ino = proto.Ino(d.U64())
	t.Gen = d.U64()
	t.NewGen = d.U64()
	t.Layout = proto.DecodeLayout(d)
	t.Mtime = d.I64()
	t.Ctime = d.I64()
	t.Size = d.U64()
	t.Until = d.I64()
	if b := d.BytesMax(maxCapLen); len(b) > 0 {
		t.Cap = append([]byte(nil), b...)
	}
	t.Blocks = d.U64()
}

// migrateMessages returns the request and response of a restripe op.
func migrateMessages(op uint16) (req, resp message, ok bool) {
	switch op {
	case OpMigrateBegin:
		return &migrateBeginReq{}, &ticketMsg{}, true
	case OpMigrateCommit:
		return &ticketMsg{}, &attrResp{}, true
	case OpMigrateAbort:
		return &ticketMsg{}, &emptyMsg{}, true
	case OpMigrateFollow:
		return &followReq{}, &openResp{}, true
	case OpMigrateRenew:
		return &ticketMsg{}, &ticketMsg{}, true
	}
	return nil, nil, false
}

func (h *handler) callMigrate(ctx context.Context, op uint16, req message) (message, error) {
	if op == OpMigrateFollow {
		fw, ok := h.svc.(proto.MigrateFollower)
		if !ok {
			return nil, fmt.Errorf("metarpc: the service cannot follow restripes: %w", syscall.ENOSYS)
		}
		r := req.(*followReq)
		a, cap, err := fw.Follow(ctx, r.Ino, r.Gen, r.Want)
		return &openResp{a, cap}, err
	}
	mg, ok := h.svc.(proto.Migrator)
	if !ok {
		return nil, fmt.Errorf("metarpc: the service cannot restripe files: %w", syscall.ENOSYS)
	}
	switch op {
	case OpMigrateBegin:
		r := req.(*migrateBeginReq)
		t, err := mg.MigrateBegin(ctx, r.Ino, r.Policy)
		return &ticketMsg{t}, err
	case OpMigrateCommit:
		return attrOut(mg.MigrateCommit(ctx, req.(*ticketMsg).T))
	case OpMigrateRenew:
		t, err := mg.MigrateRenew(ctx, req.(*ticketMsg).T)
		return &ticketMsg{t}, err
	default:
		return &emptyMsg{}, mg.MigrateAbort(ctx, req.(*ticketMsg).T)
	}
}

// MigrateBegin implements proto.Migrator. It is never sent twice: a
// second begin would place a second set of objects.
func (c *Client) MigrateBegin(ctx context.Context, ino proto.Ino, policy layout.Layout) (proto.MigrateTicket, error) {
	var r ticketMsg
	err := c.send(ctx, OpMigrateBegin, false, &migrateBeginReq{ino, policy}, &r)
	return r.T, err
}

// MigrateCommit implements proto.Migrator. A commit applied before
// succeeds again, so it may be sent again after a failover.
func (c *Client) MigrateCommit(ctx context.Context, t proto.MigrateTicket) (proto.Attr, error) {
	var r attrResp
	err := c.do(ctx, OpMigrateCommit, &ticketMsg{t}, &r)
	return r.Attr, err
}

// MigrateAbort implements proto.Migrator; it is idempotent.
func (c *Client) MigrateAbort(ctx context.Context, t proto.MigrateTicket) error {
	return c.do(ctx, OpMigrateAbort, &ticketMsg{t}, &emptyMsg{})
}

// MigrateRenew implements proto.Migrator. A renewal applied twice only
// extends the ticket again.
func (c *Client) MigrateRenew(ctx context.Context, t proto.MigrateTicket) (proto.MigrateTicket, error) {
	var r ticketMsg
	err := c.do(ctx, OpMigrateRenew, &ticketMsg{t}, &r)
	return r.T, err
}

// Follow implements proto.MigrateFollower.
func (c *Client) Follow(ctx context.Context, ino proto.Ino, gen uint64, want proto.Access) (proto.Attr, []byte, error) {
	var r openResp
	err := c.do(ctx, OpMigrateFollow, &followReq{ino, gen, want}, &r)
	return r.Attr, r.Cap, err
}
