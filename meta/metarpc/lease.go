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
	// OpLeasePin counts read-only opens a session made from its lease
	// cache (proto.LeasePinner).
	OpLeasePin uint16 = 97
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

// pinVersion is the first byte of OpLeasePin's messages:
//
//	request: u8 version, u32 n, n x (u64 ino, u32 count)
//	answer:  u8 version, u32 n, n x u8 (1: counted, 0: not)
const pinVersion = 1

func checkPinVersion(d *wire.Decoder, what string) {
	if v := d.U8(); d.Err() == nil && v != pinVersion {
		d.Fail(fmt.Errorf("metarpc: %s of version %d not supported (this side reads %d)", what, v, pinVersion))
	}
}

type leasePinReq struct{ Pins []proto.OpenHandle }

func (m *leasePinReq) encode(e *wire.Encoder) {
	e.U8(pinVersion)
	e.U32(uint32(len(m.Pins)))
	for _, p := range m.Pins {
		e.U64(uint64(p.Ino))
		e.U32(p.Count)
	}
}

func (m *leasePinReq) decode(d *wire.Decoder) {
	checkPinVersion(d, "lease pin")
	n := d.Count(maxList, 12)
	m.Pins = make([]proto.OpenHandle, n)
	for i := range m.Pins {
		m.Pins[i].Ino = proto.Ino(d.U64())
		m.Pins[i].Count = d.U32()
	}
}

type leasePinResp struct{ Done []bool }

func (m *leasePinResp) encode(e *wire.Encoder) {
	e.U8(pinVersion)
	e.U32(uint32(len(m.Done)))
	for _, ok := range m.Done {
		e.Bool(ok)
	}
}

func (m *leasePinResp) decode(d *wire.Decoder) {
	checkPinVersion(d, "lease pin answer")
	n := d.Count(maxList, 1)
	m.Done = make([]bool, n)
	for i := range m.Done {
		m.Done[i] = d.Bool()
	}
}

// leaseMessages returns the request and response of a lease op.
func leaseMessages(op uint16) (req, resp message, ok bool) {
	switch op {
	case OpLeasePoll:
		return &leasePollReq{}, &leasePollResp{}, true
	case OpLeasePin:
		return &leasePinReq{}, &leasePinResp{}, true
	}
	return nil, nil, false
}

func (h *handler) callLease(ctx context.Context, req message) (message, error) {
	if r, ok := req.(*leasePinReq); ok {
		lp, ok := h.svc.(proto.LeasePinner)
		if !ok {
			return nil, fmt.Errorf("metarpc: the service takes no pins of opens from lease caches: %w", syscall.ENOSYS)
		}
		done, err := lp.PinOpens(ctx, r.Pins)
		if err == nil && len(done) != len(r.Pins) {
			return nil, fmt.Errorf("metarpc: %d pin results for %d pins: %w", len(done), len(r.Pins), syscall.EIO)
		}
		return &leasePinResp{done}, err
	}
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

// PinOpens implements proto.LeasePinner. It is numbered like Open (a
// retry is not counted twice).
func (c *Client) PinOpens(ctx context.Context, pins []proto.OpenHandle) ([]bool, error) {
	var r leasePinResp
	if err := c.mutate(ctx, OpLeasePin, &leasePinReq{pins}, &r); err != nil {
		return nil, err
	}
	if len(r.Done) != len(pins) {
		return nil, fmt.Errorf("metarpc: %d pin results for %d pins: %w", len(r.Done), len(pins), syscall.EIO)
	}
	return r.Done, nil
}
