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
}

// Decode reads what Encode wrote into a; errors are left in d.
func (a *Attr) Decode(d *wire.Decoder) {
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
