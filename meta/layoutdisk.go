package meta

import (
	"github.com/weft-fs/weft/layout"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/wire"
)

// The store's encodings of attributes and layouts, apart from the RPC's
// (proto.Attr.Encode): each record that holds a layout says by its own
// version which layout format it holds, so a new layout kind or a change of
// the wire never changes how stored bytes read.
//
//	inode record  v1: layout format 1, no generation
//	              v2: layout format 1, generation
//	              v3: layout format 2 (kinds, stale slots)
//	command       v1..v4: layout format 1; v5: layout format 2
//	stored reply  v1: attributes as inode v2; v2: as inode v3

// diskLayoutFormat is the layout format new records are written with.
const diskLayoutFormat = 2

func encodeLayoutDisk(e *wire.Encoder, l layout.Layout) { l.EncodeV2(e) }

// layoutDecoder returns the decoder of a layout format.
func layoutDecoder(format int) func(*wire.Decoder) layout.Layout {
	if format == 1 {
		return layout.DecodeV1
	}
	return layout.DecodeV2
}

// encodeAttrDisk appends a as the store keeps it (current formats).
func encodeAttrDisk(e *wire.Encoder, a *proto.Attr) { a.EncodeFields(e, encodeLayoutDisk) }

// decodeAttrDisk reads attributes stored with the given layout format and,
// if withGen, a generation, and then, if withBlocks, the allocated blocks.
// Records of every format this version writes have both.
func decodeAttrDisk(d *wire.Decoder, a *proto.Attr, layoutFormat int, withGen, withBlocks bool) {
	a.DecodeFields(d, layoutDecoder(layoutFormat), withGen, withBlocks)
}
