package metarpc

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/wire"
)

// Admin operations (80..99).
const (
	// OpStatus returns the cluster's status (StatusService).
	OpStatus uint16 = 80
	// OpMemberStatus returns the answering member's own raft state
	// (MemberStatusService): any member answers, a follower too.
	OpMemberStatus uint16 = 54
)

// StatusService is what `weft status` asks of the metadata service.
// meta.Server implements it, and so does Client.
type StatusService interface {
	Status(ctx context.Context) (proto.ClusterStatus, error)
}

// statusVersion is the format of a statusResp:
//
//	u8   version
//	str  fsid, str version, i64 uptime (ns), u64 files, u64 requests
//	bool replicated [u64 id, leader, term, commit, applied, last index, snapshot
//	                 (version 2:) u32 n members: u64 id, str addr,
//	                 u8 flags (1 learner, 2 leader, 4 active, 8 snapshot), u64 match]
//	u32  n targets, each as in targetsResp
//	u32  n clients: str name, 16 bytes session, str addr, str version,
//	     i64 age (ns), i64 lease left (ns), u64 handles
//
// Version 1 (no members) is still read.
const statusVersion = 2

type statusResp struct{ S proto.ClusterStatus }

func (m *statusResp) encode(e *wire.Encoder) {
	s := &m.S
	e.U8(statusVersion)
	e.String(s.FSID)
	e.String(s.Version)
	e.I64(int64(s.Uptime))
	e.U64(s.Files)
	e.U64(s.Requests)
	e.Bool(s.Replica != nil)
	if s.Replica != nil {
		encodeReplica(e, s.Replica)
	}
	e.U32(uint32(len(s.Targets)))
	for i := range s.Targets {
		encodeTarget(e, &s.Targets[i])
	}
	e.U32(uint32(len(s.Clients)))
	for _, c := range s.Clients {
		e.String(c.Name)
		e.U64(binary.LittleEndian.Uint64(c.Session[:8]))
		e.U64(binary.LittleEndian.Uint64(c.Session[8:]))
		e.String(c.Addr)
		e.String(c.Version)
		e.I64(int64(c.Age))
		e.I64(int64(c.LeaseLeft))
		e.U64(c.Handles)
	}
}

func (m *statusResp) decode(d *wire.Decoder) {
	s := &m.S
	v := d.U8()
	if d.Err() == nil && (v < 1 || v > statusVersion) {
		d.Fail(fmt.Errorf("status format version %d not supported (this client reads 1 to %d)", v, statusVersion))
		return
	}
	s.FSID = d.StringMax(256)
	s.Version = d.StringMax(256)
	s.Uptime = time.Duration(d.I64())
	s.Files = d.U64()
	s.Requests = d.U64()
	if d.Bool() {
		r := &proto.ReplicaStatus{}
		decodeReplica(d, r, v)
		s.Replica = r
	}
	if n := d.Count(maxList, 4+4+3*8+1+2*8+4+4*8+4); n > 0 {
		s.Targets = make([]proto.TargetInfo, n)
		for i := range s.Targets {
			decodeTarget(d, &s.Targets[i])
		}
	}
	if n := d.Count(maxList, 4+16+4+4+3*8); n > 0 {
		s.Clients = make([]proto.ClientStatus, n)
		for i := range s.Clients {
			c := &s.Clients[i]
			c.Name = d.StringMax(1024)
			binary.LittleEndian.PutUint64(c.Session[:8], d.U64())
			binary.LittleEndian.PutUint64(c.Session[8:], d.U64())
			c.Addr = d.StringMax(1024)
			c.Version = d.StringMax(256)
			c.Age = time.Duration(d.I64())
			c.LeaseLeft = time.Duration(d.I64())
			c.Handles = d.U64()
		}
	}
}

// MemberStatusService is how `weft status` asks each member of a
// replicated metadata group for its own raft state (OpMemberStatus);
// meta.Server implements it, and so does Client.
type MemberStatusService interface {
	// MemberStatus returns this member's state (Members: the group as it
	// applied it, with the leader's view of each one's progress when it
	// leads); ENOTSUP from a single, unreplicated server.
	MemberStatus(ctx context.Context) (proto.ReplicaStatus, error)
}

// memberStatusResp is version(1) then a replica as in statusResp
// (version 2).
type memberStatusResp struct{ R proto.ReplicaStatus }

func (m *memberStatusResp) encode(e *wire.Encoder) {
	e.U8(statusVersion)
	encodeReplica(e, &m.R)
}

func (m *memberStatusResp) decode(d *wire.Decoder) {
	if v := d.U8(); d.Err() == nil && v != statusVersion {
		d.Fail(fmt.Errorf("member status format version %d not supported (this client reads %d)", v, statusVersion))
		return
	}
	decodeReplica(d, &m.R, statusVersion)
}

// MemberStatus implements MemberStatusService. The request goes to the
// member at this client's first address and no further (any member
// answers).
func (c *Client) MemberStatus(ctx context.Context) (proto.ReplicaStatus, error) {
	var r memberStatusResp
	err := c.do(ctx, OpMemberStatus, &emptyMsg{}, &r)
	return r.R, err
}

// Status implements StatusService.
func (c *Client) Status(ctx context.Context) (proto.ClusterStatus, error) {
	var r statusResp
	err := c.do(ctx, OpStatus, &emptyMsg{}, &r)
	return r.S, err
}

func encodeReplica(e *wire.Encoder, r *proto.ReplicaStatus) {
	for _, v := range []uint64{r.ID, r.Leader, r.Term, r.Commit, r.Applied, r.LastIndex, r.Snapshot} {
		e.U64(v)
	}
	e.U32(uint32(len(r.Members)))
	for _, x := range r.Members {
		encodeMember(e, x)
	}
}

// decodeReplica reads a replica of status format version v (1: no
// members).
func decodeReplica(d *wire.Decoder, r *proto.ReplicaStatus, v uint8) {
	for _, p := range []*uint64{&r.ID, &r.Leader, &r.Term, &r.Commit, &r.Applied, &r.LastIndex, &r.Snapshot} {
		*p = d.U64()
	}
	if v < 2 {
		return
	}
	if n := d.Count(maxMembers, 8+4+1+8); n > 0 {
		r.Members = make([]proto.ReplicaMember, 0, n)
		for i := 0; i < n && d.Err() == nil; i++ {
			r.Members = append(r.Members, decodeMember(d))
		}
	}
}
