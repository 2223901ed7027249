package metarpc

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"

	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/wire"
)

// HeaderVersion is the version of the request header that starts every
// request body. A server refuses (EINVAL) a version it does not know.
// Version 2 appended the request's sequence number, version 3 the job id;
// version 1 and 2 headers are still read (sequence number 0: no dedupe;
// no job).
const HeaderVersion = 3

// header is what every request says besides its operation: for whom it is
// made and in which session.
//
//	u8      version (HeaderVersion)
//	u32     uid
//	u32     gid
//	u32     n, the number of supplementary groups (at most proto.MaxGroups)
//	n × u32 supplementary groups
//	16 B    session id
//	u64     seq: a mutation's sequence number in the session (0: none)
//	str     job id (u32 length, at most proto.MaxJobID bytes; "": none),
//	        see proto.ValidJobID
//
// The server trusts the credentials only as far as it trusts the peer:
// root squash and the client allow-list apply (meta.Access), and every
// operation is checked against them.
type header struct {
	Cred    proto.Cred
	Session proto.SessionID
	Seq     uint64
	Job     string
}

func (h *header) encode(e *wire.Encoder) {
	e.U8(HeaderVersion)
	e.U32(h.Cred.Uid)
	e.U32(h.Cred.Gid)
	e.U32(uint32(len(h.Cred.Groups)))
	for _, g := range h.Cred.Groups {
		e.U32(g)
	}
	e.U64(binary.LittleEndian.Uint64(h.Session[:8]))
	e.U64(binary.LittleEndian.Uint64(h.Session[8:]))
	e.U64(h.Seq)
	e.String(h.Job)
}

// decodeHeader reads the header off the front of a request body and
// returns the rest (the operation's message).
func decodeHeader(b []byte) (header, []byte, error) {
	var h header
	d := wire.NewDecoder(b)
	v := d.U8()
	if d.Err() == nil && (v < 1 || v > HeaderVersion) {
		return h, nil, fmt.Errorf("metarpc: request header version %d not supported (this server reads 1 to %d)", v, HeaderVersion)
	}
	h.Cred.Uid = d.U32()
	h.Cred.Gid = d.U32()
	if n := d.Count(proto.MaxGroups, 4); n > 0 {
		h.Cred.Groups = make([]uint32, n)
		for i := range h.Cred.Groups {
			h.Cred.Groups[i] = d.U32()
		}
	}
	binary.LittleEndian.PutUint64(h.Session[:8], d.U64())
	binary.LittleEndian.PutUint64(h.Session[8:], d.U64())
	if v >= 2 {
		h.Seq = d.U64()
	}
	if v >= 3 {
		h.Job = d.StringMax(proto.MaxJobID)
		if d.Err() == nil {
			if err := proto.ValidJobID(h.Job); err != nil {
				return h, nil, fmt.Errorf("metarpc: request header: %w", err)
			}
		}
	}
	if err := d.Err(); err != nil {
		return h, nil, fmt.Errorf("metarpc: decode request header: %w", err)
	}
	return h, d.Remaining(), nil
}

// processCred is the credentials of this process: what a request carries
// when its ctx names none (background work of a mount, an admin tool).
func processCred() proto.Cred {
	c := proto.Cred{Uid: uint32(os.Geteuid()), Gid: uint32(os.Getegid())}
	if gs, err := os.Getgroups(); err == nil {
		for _, g := range gs {
			c.Groups = append(c.Groups, uint32(g))
		}
	}
	if len(c.Groups) > proto.MaxGroups {
		c.Groups = c.Groups[:proto.MaxGroups]
	}
	return c
}

// Option configures a Client.
type Option func(*Client)

// WithSession sets the session id the client's requests carry. The server
// counts open handles per session, and a remote client may hold handles
// only in a session it registered (SessionService.OpenSession) and keeps
// renewing. Default: none (the zero id): such a client cannot open files,
// which admin tools and storage servers do not need.
func WithSession(id proto.SessionID) Option { return func(c *Client) { c.SetSession(id) } }

// WithCred sets the credentials of requests whose ctx carries none
// (default: this process's effective uid, gid and groups).
func WithCred(cr proto.Cred) Option {
	return func(c *Client) { c.cred = cr; c.SetSession(c.Session()) }
}

// header returns the encoded request header for a call made with ctx in
// session sess as request seq (0: no dedupe).
func (c *Client) header(ctx context.Context, sess *clientSession, seq uint64) []byte {
	cr, ok := proto.CredFrom(ctx)
	job := proto.JobFrom(ctx)
	if !ok {
		if seq == 0 && job == "" {
			return sess.defHeader
		}
		cr = c.cred
	}
	if len(cr.Groups) > proto.MaxGroups {
		cr.Groups = cr.Groups[:proto.MaxGroups]
	}
	e := wire.NewEncoder(41 + len(job) + 4*len(cr.Groups))
	(&header{Cred: cr, Session: sess.id, Seq: seq, Job: job}).encode(e)
	return e.B
}
