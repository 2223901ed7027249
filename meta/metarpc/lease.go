package metarpc

import (
	"cmp"
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/wire"
)

// Metadata leases (op 96 is this file's, 122 until protocol version 2; docs/caching.md).
const (
	// OpLeasePoll acknowledges a session's lease invalidations and waits
	// (about a fifth of the lease term) for new ones (proto.LeaseService).
	OpLeasePoll uint16 = 96
)

// leaseVersion is the first byte of every message of these ops:
//
//	poll request: u8 version, u64 ack
//	poll answer:  u8 version, u64 epoch, i64 term (ns), u32 n,
//	              n x (u64 seq, u64 ino, str name), and from version 2
//	              i64 valid (ns)
//
// A server answers in the version of the request (1 or 2); clients send
// 2. An answer of version 1 (an older server) has no valid: it is the
// term.
const leaseVersion = 2

// leaseVersionNoValid is the version of answers without valid.
const leaseVersionNoValid = 1

// maxLeaseInvals bounds the invalidations one answer may carry (the
// decoder's bound; the server sends at most 4096).
const maxLeaseInvals = 1 << 16

// checkLeaseVersion reads a message's version: 1 or 2.
func checkLeaseVersion(d *wire.Decoder, what string) uint8 {
	v := d.U8()
	if d.Err() == nil && v != leaseVersion && v != leaseVersionNoValid {
		d.Fail(fmt.Errorf("metarpc: %s of version %d not supported (this side reads %d and %d)", what, v, leaseVersionNoValid, leaseVersion))
	}
	return v
}

type leasePollReq struct {
	Ack uint64
	v   uint8 // the version it came in (the answer's)
}

func (m *leasePollReq) encode(e *wire.Encoder) {
	e.U8(leaseVersion)
	e.U64(m.Ack)
}

func (m *leasePollReq) decode(d *wire.Decoder) {
	m.v = checkLeaseVersion(d, "lease poll")
	m.Ack = d.U64()
}

type leasePollResp struct {
	P proto.LeasePoll
	v uint8 // version to encode in (0: leaseVersion)
}

func (m *leasePollResp) encode(e *wire.Encoder) {
	v := cmp.Or(m.v, leaseVersion)
	e.U8(v)
	e.U64(m.P.Epoch)
	e.I64(int64(m.P.Term))
	e.U32(uint32(len(m.P.Invals)))
	for _, iv := range m.P.Invals {
		e.U64(iv.Seq)
		e.U64(uint64(iv.Ino))
		e.String(iv.Name)
	}
	if v >= 2 {
		e.I64(int64(m.P.Valid))
	}
}

func (m *leasePollResp) decode(d *wire.Decoder) {
	v := checkLeaseVersion(d, "lease poll answer")
	m.P.Epoch = d.U64()
	m.P.Term = time.Duration(d.I64())
	n := d.U32()
	if d.Err() != nil {
		return
	}
	if n > maxLeaseInvals {
		d.Fail(fmt.Errorf("metarpc: lease poll answer with %d invalidations (at most %d)", n, maxLeaseInvals))
		return
	}
	m.P.Invals = make([]proto.LeaseInval, 0, min(n, 1024))
	for i := uint32(0); i < n && d.Err() == nil; i++ {
		var iv proto.LeaseInval
		iv.Seq = d.U64()
		iv.Ino = proto.Ino(d.U64())
		iv.Name = d.StringMax(4096) // a name (the server refuses longer than 255 bytes)
		m.P.Invals = append(m.P.Invals, iv)
	}
	m.P.Valid = m.P.Term
	if v >= 2 {
		m.P.Valid = time.Duration(d.I64())
	}
}

// leaseMessages returns the request and response of a lease op.
func leaseMessages(op uint16) (req, resp message, ok bool) {
	switch op {
	case OpLeasePoll:
		return &leasePollReq{}, &leasePollResp{}, true
	}
	return nil, nil, false
}

func (h *handler) callLease(ctx context.Context, req message) (message, error) {
	ls, ok := h.svc.(proto.LeaseService)
	if !ok {
		return nil, fmt.Errorf("metarpc: the service grants no metadata leases: %w", syscall.ENOSYS)
	}
	r := req.(*leasePollReq)
	p, err := ls.LeasePoll(ctx, r.Ack)
	return &leasePollResp{P: p, v: r.v}, err
}

// LeasePoll implements proto.LeaseService. It is sent like a read: an ack
// sent twice acknowledges nothing more.
func (c *Client) LeasePoll(ctx context.Context, ack uint64) (proto.LeasePoll, error) {
	var r leasePollResp
	err := c.do(ctx, OpLeasePoll, &leasePollReq{Ack: ack}, &r)
	return r.P, err
}
