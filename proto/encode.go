package proto

import (
	"fmt"

	"github.com/weft-fs/weft/layout"
	"github.com/weft-fs/weft/wire"
)

// LayoutWireFormat is the version byte before every layout in an RPC
// message: 2, layout format 2 (layout.EncodeV2: kinds and stale slots).
// RPC messages before it carried layout format 1 with no version byte. The
// metadata server's store has formats of its own (package meta), so a
// change here never changes what is on disk, nor the reverse.
const LayoutWireFormat = 2

// EncodeLayout appends l in the wire form.
func EncodeLayout(e *wire.Encoder, l layout.Layout) {
	e.U8(LayoutWireFormat)
	l.EncodeV2(e)
}

// DecodeLayout reads a layout written by EncodeLayout; a version it does
// not know is an error left in d.
func DecodeLayout(d *wire.Decoder) layout.Layout {
	if v := d.U8(); d.Err() == nil && v != LayoutWireFormat {
		d.Fail(fmt.Errorf("proto: layout wire format %d not supported", v))
		return layout.Layout{}
	}
	return layout.DecodeV2(d)
}

// Encode appends a to e in the wire form (RPC messages). The metadata
// server's store keeps inodes in a format of its own (meta/inode.go).
func (a *Attr) Encode(e *wire.Encoder) {
	a.EncodeFields(e, EncodeLayout)
}

// EncodeFields appends a's fields in order, the layout written by enc: the
// shared body of the wire form and of meta's disk form.
func (a *Attr) EncodeFields(e *wire.Encoder, enc func(*wire.Encoder, layout.Layout)) {
	e.U64(uint64(a.Ino))
	e.U32(a.Mode)
	e.U32(a.Nlink)
	e.U32(a.Uid)
	e.U32(a.Gid)
	e.U32(a.Rdev)
	e.U64(a.Size)
	e.I64(a.Atime)
	e.I64(a.Mtime)
	e.I64(a.Ctime)
	enc(e, a.Layout)
	e.U64(a.Gen)
	e.U64(a.Blocks)
}

// Decode reads what Encode wrote into a; errors are left in d.
func (a *Attr) Decode(d *wire.Decoder) {
	a.DecodeFields(d, DecodeLayout, true, true)
}

// DecodeFields reads what EncodeFields wrote, the layout read by dec;
// withGen false reads the fields from before generations (ending with the
// layout), withBlocks false those from before Blocks (ending with the
// generation).
func (a *Attr) DecodeFields(d *wire.Decoder, dec func(*wire.Decoder) layout.Layout, withGen, withBlocks bool) {
	a.Ino = Ino(d.U64())
	a.Mode = d.U32()
	a.Nlink = d.U32()
	a.Uid = d.U32()
	a.Gid = d.U32()
	a.Rdev = d.U32()
	a.Size = d.U64()
	a.Atime = d.I64()
	a.Mtime = d.I64()
	a.Ctime = d.I64()
	a.Layout = dec(d)
	if withGen {
		a.Gen = d.U64()
	}
	if withGen && withBlocks {
		a.Blocks = d.U64()
	}
}

// Encode appends s to e. The metadata server's command log and its RPC
// both carry setattr requests in this form.
func (s *SetAttrIn) Encode(e *wire.Encoder) {
	e.U32(s.Valid)
	e.U32(s.Mode)
	e.U32(s.Uid)
	e.U32(s.Gid)
	e.U64(s.Size)
	e.I64(s.Atime)
	e.I64(s.Mtime)
	e.I64(s.Ctime)
}

// Decode reads what Encode wrote into s; errors are left in d.
func (s *SetAttrIn) Decode(d *wire.Decoder) {
	s.Valid = d.U32()
	s.Mode = d.U32()
	s.Uid = d.U32()
	s.Gid = d.U32()
	s.Size = d.U64()
	s.Atime = d.I64()
	s.Mtime = d.I64()
	s.Ctime = d.I64()
}
