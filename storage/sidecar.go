package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/weft-fs/weft/storage/storagerpc"
)

// BlockSize is the unit of integrity checking: every object is checked in
// 4 KiB blocks, each with its own CRC32C in the sidecar (clients check
// reads against those checksums in the same blocks: storagerpc.SumBlock).
const BlockSize = storagerpc.SumBlock

// Sidecar layout (all integers little-endian):
//
//	offset 0   magic      u32  "WFTC"
//	offset 4   format     u32  sidecarFormat
//	offset 8   version    u64  the object's write version
//	offset 16  blocks     u64  blocks holding data (entries with cur != 0)
//	offset 24  reserved   u32  zero
//	offset 28  headerCRC  u32  CRC32C of bytes 0..28
//	offset 32  entries: block i at 32+8*i: cur u32, prev u32
const (
	sidecarMagic  = 0x43544657 // "WFTC" read as little-endian
	sidecarFormat = 1
	headerSize    = 32
	entrySize     = 8
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// zeroBlockCRC is the CRC32C of a block of zeros: what a hole reads as.
var zeroBlockCRC = storagerpc.ZeroBlockCRC

// errBadSidecar is wrapped by decode errors; the target turns them into EIO.
var errBadSidecar = errors.New("storage: bad sidecar")

// header is the sidecar header.
type header struct {
	Version uint64 // +1 per write or truncate
	Blocks  uint64 // allocated blocks, for capacity accounting
}

func (h header) encode() []byte {
	b := make([]byte, headerSize)
	binary.LittleEndian.PutUint32(b[0:], sidecarMagic)
	binary.LittleEndian.PutUint32(b[4:], sidecarFormat)
	binary.LittleEndian.PutUint64(b[8:], h.Version)
	binary.LittleEndian.PutUint64(b[16:], h.Blocks)
	binary.LittleEndian.PutUint32(b[28:], crc32.Checksum(b[:28], castagnoli))
	return b
}

// decodeHeader parses a sidecar header. It never panics.
func decodeHeader(b []byte) (header, error) {
	if len(b) < headerSize {
		return header{}, fmt.Errorf("%w: header of %d bytes", errBadSidecar, len(b))
	}
	if m := binary.LittleEndian.Uint32(b[0:]); m != sidecarMagic {
		return header{}, fmt.Errorf("%w: magic %#x", errBadSidecar, m)
	}
	if f := binary.LittleEndian.Uint32(b[4:]); f != sidecarFormat {
		return header{}, fmt.Errorf("%w: format version %d (want %d)", errBadSidecar, f, sidecarFormat)
	}
	if got, want := crc32.Checksum(b[:28], castagnoli), binary.LittleEndian.Uint32(b[28:]); got != want {
		return header{}, fmt.Errorf("%w: header checksum %#x, stored %#x", errBadSidecar, got, want)
	}
	return header{Version: binary.LittleEndian.Uint64(b[8:]), Blocks: binary.LittleEndian.Uint64(b[16:])}, nil
}

// entry is one block's checksums. Cur is the CRC of the block's newest
// content, Prev the CRC of what was there before the write that set Cur. The
// value 0 stands for "a hole": a block of zeros that was never written. When
// no write is in flight, Cur == Prev; Cur != Prev means the write that set
// Cur may not have reached the data file (it was in flight at a crash, or
// failed), so the data matches one of the two.
type entry struct{ Cur, Prev uint32 }

func (e entry) allocated() bool { return e.Cur != 0 }

// match reports which of the entry's two CRCs a block whose CRC is c
// satisfies, and whether one does.
func (e entry) match(c uint32) (uint32, bool) {
	switch {
	case crcMatches(c, e.Cur):
		return e.Cur, true
	case crcMatches(c, e.Prev):
		return e.Prev, true
	}
	return 0, false
}

// crcMatches: stored value 0 (hole) accepts a block of zeros. The rule
// is the one clients check reads by (storagerpc.CheckBlocks).
func crcMatches(c, stored uint32) bool { return storagerpc.SumMatches(c, stored) }

// decodeEntries fills out from b (8 bytes each). Missing bytes (a short
// sidecar) decode as zero entries, that is holes. It never panics.
func decodeEntries(b []byte, out []entry) {
	for i := range out {
		if len(b) < entrySize {
			out[i] = entry{}
			continue
		}
		out[i] = entry{Cur: binary.LittleEndian.Uint32(b), Prev: binary.LittleEndian.Uint32(b[4:])}
		b = b[entrySize:]
	}
}

func encodeEntries(dst []byte, es []entry) []byte {
	for _, e := range es {
		dst = binary.LittleEndian.AppendUint32(dst, e.Cur)
		dst = binary.LittleEndian.AppendUint32(dst, e.Prev)
	}
	return dst
}

// entryOff is where block's entry lives in the sidecar.
func entryOff(block uint64) int64 { return headerSize + int64(block)*entrySize }

// blockCRC is the CRC32C of a block whose first len(b) bytes are b and whose
// remaining bytes (past the end of the object) are zero.
func blockCRC(b []byte) uint32 { return storagerpc.BlockCRC(b) }

// blocksFor is the number of blocks an object of size bytes spans.
func blocksFor(size uint64) uint64 { return (size + BlockSize - 1) / BlockSize }

// Readers of sidecars outside this package (the client's short-circuit
// local reads, package storage/localread, given the sidecar's descriptor)
// use the format through these: SidecarHeaderSize bytes of header, which
// CheckSidecarHeader checks (magic, format version, header CRC), then the
// 8-byte entry {cur, prev} of block i at SidecarEntryOff(i).
const SidecarHeaderSize = headerSize

// SidecarEntryOff is where block's entry lives in a sidecar.
func SidecarEntryOff(block uint64) int64 { return entryOff(block) }

// CheckSidecarHeader checks a sidecar's header, b its first
// SidecarHeaderSize bytes; the error wraps errBadSidecar's message.
func CheckSidecarHeader(b []byte) error {
	_, err := decodeHeader(b)
	return err
}
