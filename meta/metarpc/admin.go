package metarpc

import (
	"context"
	"fmt"
	"syscall"

	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/wire"
)

// Membership of a replicated metadata service (`weft admin meta`): list
// the members, add one, remove one. Served only to peers authenticated as
// metadata servers (an operator runs `weft admin` on a metadata host,
// with its certificate; see meta.Server.AddMember).
const (
	OpMembers      uint16 = 45
	OpMemberAdd    uint16 = 46
	OpMemberRemove uint16 = 47
)

// Member is one member of the group as the answering server knows it.
type Member struct {
	ID      uint64
	Addr    string // "" when the server does not know it
	Learner bool   // receives the log, does not vote yet
	Leader  bool
	// The leader's view (zero from a follower): the last log index known
	// replicated on the member, whether it was heard from within an
	// election timeout, whether it is being sent a snapshot.
	Match    uint64
	Active   bool
	Snapshot bool
}

// MemberAdmin is the membership service; meta.Server implements it, and
// so does Client.
type MemberAdmin interface {
	Members(ctx context.Context) ([]Member, error)
	// AddMember adds a new, empty member at addr: as a learner first,
	// promoted to voter once it caught up.
	AddMember(ctx context.Context, id uint64, addr string) error
	RemoveMember(ctx context.Context, id uint64) error
}

const maxMembers = 1 << 10

type memberReq struct {
	ID   uint64
	Addr string
}

func (m *memberReq) encode(e *wire.Encoder) { e.U64(m.ID); e.String(m.Addr) }
func (m *memberReq) decode(d *wire.Decoder) { m.ID = d.U64(); m.Addr = d.StringMax(1024) }

type membersResp struct{ Members []Member }

func (m *membersResp) encode(e *wire.Encoder) {
	e.U32(uint32(len(m.Members)))
	for _, x := range m.Members {
		encodeMember(e, proto.ReplicaMember(x))
	}
}

// encodeMember and decodeMember are the wire form of a member, shared by
// the member list (OpMembers) and the status of a replica (OpStatus,
// OpMemberStatus): id, address, flags (learner, leader, active,
// snapshot), match.
func encodeMember(e *wire.Encoder, x proto.ReplicaMember) {
	e.U64(x.ID)
	e.String(x.Addr)
	var flags uint8
	for i, b := range []bool{x.Learner, x.Leader, x.Active, x.Snapshot} {
		if b {
			flags |= 1 << i
		}
	}
	e.U8(flags)
	e.U64(x.Match)
}

func decodeMember(d *wire.Decoder) proto.ReplicaMember {
	x := proto.ReplicaMember{ID: d.U64(), Addr: d.StringMax(1024)}
	flags := d.U8()
	x.Learner, x.Leader, x.Active, x.Snapshot = flags&1 != 0, flags&2 != 0, flags&4 != 0, flags&8 != 0
	x.Match = d.U64()
	return x
}

func (m *membersResp) decode(d *wire.Decoder) {
	n := d.Count(maxMembers, 8+4+1+8)
	m.Members = make([]Member, 0, n)
	for i := 0; i < n && d.Err() == nil; i++ {
		m.Members = append(m.Members, Member(decodeMember(d)))
	}
}

var errNoAdmin = fmt.Errorf("metarpc: this server has no membership service: %w", syscall.ENOSYS)

func (h *handler) callAdmin(ctx context.Context, op uint16, req message) (message, error) {
	if h.admin == nil {
		return nil, errNoAdmin
	}
	switch op {
	case OpMembers:
		ms, err := h.admin.Members(ctx)
		return &membersResp{ms}, err
	case OpMemberAdd:
		r := req.(*memberReq)
		return &emptyMsg{}, h.admin.AddMember(ctx, r.ID, r.Addr)
	case OpMemberRemove:
		r := req.(*memberReq)
		return &emptyMsg{}, h.admin.RemoveMember(ctx, r.ID)
	}
	return nil, fmt.Errorf("metarpc: op %d has no handler: %w", op, syscall.ENOSYS)
}

// Members implements MemberAdmin.
func (c *Client) Members(ctx context.Context) ([]Member, error) {
	var r membersResp
	err := c.do(ctx, OpMembers, &emptyMsg{}, &r)
	return r.Members, err
}

// AddMember implements MemberAdmin.
func (c *Client) AddMember(ctx context.Context, id uint64, addr string) error {
	return c.do(ctx, OpMemberAdd, &memberReq{ID: id, Addr: addr}, &emptyMsg{})
}

// RemoveMember implements MemberAdmin.
func (c *Client) RemoveMember(ctx context.Context, id uint64) error {
	return c.do(ctx, OpMemberRemove, &memberReq{ID: id}, &emptyMsg{})
}
