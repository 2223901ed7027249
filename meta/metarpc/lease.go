package metarpc

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/wire"
)

// Metadata leases (ops 122..129 are this file's; docs/caching.md).
const (
	// OpLeasePoll acknowledges a session's lease invalidations and waits
	// (about a fifth of the lease term) for new ones (proto.LeaseService).
	OpLeasePoll uint16 = 122
)

// leaseVersion is the first byte of every message of these ops:
//
//	poll request: u8 version, u64 ack
//	poll answer:  u8 version, u64 epoch, i64 term (ns), u32 n,
//	              n x (u64 seq, u64 ino, str name)
const leaseVersion = 1

// maxLeaseInvals bounds the invalidations one answer may carry (the
// decoder's bound; the server sends at most 4096).
const maxLeaseInvals = 1 << 16

func checkLeaseVersion(d *wire.Decoder, what string) {
	if v := d.U8(); d.Err() == nil && v != leaseVersion {
		d.Fail(fmt.Errorf("metarpc: %s of version %d not supported (this side reads %d)", what, v, leaseVersion))
	}
}

type leasePollReq struct{ Ack uint64 }

func (m *leasePollReq) encode(e *wire.Encoder) {
	e.U8(leaseVersion)
	e.U64(m.Ack)
}

func (m *leasePollReq) decode(d *wire.Decoder) {
	checkLeaseVersion(d, "lease poll")
	m.Ack = d.U64()
}

type leasePollResp struct{ P proto.LeasePoll }

func (m *leasePollResp) encode(e *wire.Encoder) {
	e.U8(leaseVersion)
	e.U64(m.P.Epoch)
	e.I64(int64(m.P.Term))
	e.U32(uint32(len(m.P.Invals)))
	for _, iv := range m.P.Invals {
		e.U64(iv.Seq)
		e.U64(uint64(iv.Ino))
		e.String(iv.Name)
	}
}

func (m *leasePollResp) decode(d *wire.Decoder) {
	checkLeaseVersion(d, "lease poll answer")
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
	p, err := ls.LeasePoll(ctx, req.(*leasePollReq).Ack)
	return &leasePollResp{p}, err
}

// LeasePoll implements proto.LeaseService. It is sent like a read: an ack
// sent twice acknowledges nothing more.
func (c *Client) LeasePoll(ctx context.Context, ack uint64) (proto.LeasePoll, error) {
	var r leasePollResp
	err := c.do(ctx, OpLeasePoll, &leasePollReq{ack}, &r)
	return r.P, err
}
