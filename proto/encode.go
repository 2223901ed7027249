package proto

import (
	"github.com/weft-fs/weft/layout"
	"github.com/weft-fs/weft/wire"
)

// Encode appends a to e. The metadata server stores inodes in this form and
// sends attributes in it, so the two never drift apart; a change here is a
// change of the on-disk format and needs a version bump where it is stored.
func (a *Attr) Encode(e *wire.Encoder) {
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
	a.Layout.Encode(e)
	e.U64(a.Gen)
	e.U64(a.Blocks)
}

// Decode reads what Encode wrote into a; errors are left in d.
func (a *Attr) Decode(d *wire.Decoder) {
	a.DecodeNoBlocks(d)
	a.Blocks = d.U64()
}

// DecodeNoBlocks reads the encoding of Attr from before Blocks (which
// ended with the generation): for meta's version 2 inode records and
// version 1 stored replies.
func (a *Attr) DecodeNoBlocks(d *wire.Decoder) {
	a.DecodeNoGen(d)
	a.Gen = d.U64()
}

// DecodeNoGen reads the encoding of Attr from before generations (which
// ended with the layout): for meta's version 1 inode records.
func (a *Attr) DecodeNoGen(d *wire.Decoder) {
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
	a.Layout = layout.Decode(d)
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
