package metarpc

import (
	"context"
	"fmt"

	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/wire"
)

// OpFind walks a tree on the metadata server (FindService).
const OpFind uint16 = 82

// FindService is what `weft find` asks of the metadata service: a walk of
// the tree below start, in pages (see meta.Server.Find). meta.Server
// implements it, and so does Client.
type FindService interface {
	Find(ctx context.Context, start proto.Ino, f proto.FindFilter, cursor []byte, max int) ([]proto.Found, []byte, error)
}

// findVersion is the format of findReq and findResp (their first byte).
const findVersion = 1

// maxCursor bounds a find cursor on the wire.
const maxCursor = 1 << 20

type findReq struct {
	Start  proto.Ino
	Filter proto.FindFilter
	Cursor []byte
	Max    uint32
}

func encodeCmp(e *wire.Encoder, c proto.Cmp) { e.U8(c.Op); e.I64(c.Value) }
func decodeCmp(d *wire.Decoder) proto.Cmp {
	c := proto.Cmp{Op: d.U8(), Value: d.I64()}
	switch c.Op {
	case 0, '<', '=', '>':
	default:
		d.Fail(fmt.Errorf("find: comparison %q", c.Op))
	}
	return c
}

func encodeOpt32(e *wire.Encoder, v *uint32) {
	e.Bool(v != nil)
	if v != nil {
		e.U32(*v)
	}
}

func decodeOpt32(d *wire.Decoder) *uint32 {
	if !d.Bool() {
		return nil
	}
	v := d.U32()
	return &v
}

func (m *findReq) encode(e *wire.Encoder) {
	f := &m.Filter
	e.U8(findVersion)
	e.U64(uint64(m.Start))
	e.String(f.Name)
	e.U8(f.Type)
	encodeCmp(e, f.Size)
	encodeCmp(e, f.Mtime)
	encodeOpt32(e, f.Uid)
	encodeOpt32(e, f.Gid)
	encodeCmp(e, f.StripeCount)
	var target *uint32
	if f.Target != nil {
		t := uint32(*f.Target)
		target = &t
	}
	encodeOpt32(e, target)
	e.U32(uint32(f.MaxDepth))
	e.Bytes(m.Cursor)
	e.U32(m.Max)
}

func (m *findReq) decode(d *wire.Decoder) {
	f := &m.Filter
	if v := d.U8(); d.Err() == nil && v != findVersion {
		d.Fail(fmt.Errorf("find request version %d not supported (this server reads %d)", v, findVersion))
		return
	}
	m.Start = proto.Ino(d.U64())
	f.Name = d.StringMax(4096)
	f.Type = d.U8()
	f.Size = decodeCmp(d)
	f.Mtime = decodeCmp(d)
	f.Uid = decodeOpt32(d)
	f.Gid = decodeOpt32(d)
	f.StripeCount = decodeCmp(d)
	if t := decodeOpt32(d); t != nil {
		id := proto.TargetID(*t)
		f.Target = &id
	}
	f.MaxDepth = int32(d.U32())
	m.Cursor = d.BytesMax(maxCursor)
	if len(m.Cursor) == 0 {
		m.Cursor = nil
	}
	m.Max = d.U32()
}

type findResp struct {
	Found  []proto.Found
	Cursor []byte
}

func (m *findResp) encode(e *wire.Encoder) {
	e.U8(findVersion)
	e.U32(uint32(len(m.Found)))
	for i := range m.Found {
		e.String(m.Found[i].Path)
		m.Found[i].Attr.Encode(e)
	}
	e.Bytes(m.Cursor)
}

func (m *findResp) decode(d *wire.Decoder) {
	if v := d.U8(); d.Err() == nil && v != findVersion {
		d.Fail(fmt.Errorf("find response version %d not supported (this client reads %d)", v, findVersion))
		return
	}
	if n := d.Count(maxList, 4+attrBytes); n > 0 {
		m.Found = make([]proto.Found, n)
		for i := range m.Found {
			m.Found[i].Path = d.StringMax(1 << 20)
			m.Found[i].Attr.Decode(d)
		}
	}
	m.Cursor = d.BytesMax(maxCursor)
	if len(m.Cursor) == 0 {
		m.Cursor = nil
	}
}

// Find implements FindService.
func (c *Client) Find(ctx context.Context, start proto.Ino, f proto.FindFilter, cursor []byte, max int) ([]proto.Found, []byte, error) {
	var r findResp
	err := c.do(ctx, OpFind, &findReq{Start: start, Filter: f, Cursor: cursor, Max: uint32(max)}, &r)
	return r.Found, r.Cursor, err
}
