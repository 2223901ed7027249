package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/weft-fs/weft/internal/bufpool"
)

// Frame header layout; see doc.go for the format and its invariants.
const (
	// HeaderSize is the fixed size of every frame header.
	HeaderSize = 32

	// Magic is the first four bytes of every frame ("WEFT" on the wire).
	Magic uint32 = 'W' | 'E'<<8 | 'F'<<16 | 'T'<<24

	// Version is the frame format version this package speaks.
	Version uint8 = 1

	// MaxBody is the largest body a frame may carry. A header announcing a
	// larger body is a protocol error: the connection is closed and nothing
	// is allocated for it.
	MaxBody = 72 << 20

	// maxErrMsg bounds the message of an error response.
	maxErrMsg = 64 << 10
)

// Frame kinds.
const (
	kindRequest  uint8 = 1
	kindResponse uint8 = 2
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Header decoding errors. They describe a broken or hostile peer; the
// connection that produced one is closed.
var (
	errShortHeader = errors.New("transport: short frame header")
	errBadMagic    = errors.New("transport: bad frame magic")
	errBadCRC      = errors.New("transport: bad frame header checksum")
	errBadVersion  = errors.New("transport: unsupported frame version")
	errBadKind     = errors.New("transport: bad frame kind")
	errBadReserved = errors.New("transport: nonzero reserved header field")
	errBadStatus   = errors.New("transport: request frame with nonzero status")
	errTooLarge    = errors.New("transport: frame body too large")
)

// header is a decoded frame header.
type header struct {
	kind   uint8
	op     uint16
	id     uint64
	status uint32 // errno of a response; 0 = ok, always 0 in requests
	length uint32 // body bytes following the header
}

// encodeHeader writes h into b[:HeaderSize] and seals it with its CRC.
func encodeHeader(b []byte, h header) {
	_ = b[HeaderSize-1]
	binary.LittleEndian.PutUint32(b[0:], Magic)
	b[4] = Version
	b[5] = h.kind
	binary.LittleEndian.PutUint16(b[6:], h.op)
	binary.LittleEndian.PutUint64(b[8:], h.id)
	binary.LittleEndian.PutUint32(b[16:], h.status)
	binary.LittleEndian.PutUint32(b[20:], h.length)
	binary.LittleEndian.PutUint32(b[24:], 0)
	binary.LittleEndian.PutUint32(b[28:], crc32.Checksum(b[:28], castagnoli))
}

// decodeHeader parses and validates the first HeaderSize bytes of b. It never
// panics; any header it accepts re-encodes to the same bytes.
func decodeHeader(b []byte) (header, error) {
	if len(b) < HeaderSize {
		return header{}, fmt.Errorf("%w: %d bytes", errShortHeader, len(b))
	}
	b = b[:HeaderSize]
	if m := binary.LittleEndian.Uint32(b[0:]); m != Magic {
		return header{}, fmt.Errorf("%w: %#08x", errBadMagic, m)
	}
	if got, want := binary.LittleEndian.Uint32(b[28:]), crc32.Checksum(b[:28], castagnoli); got != want {
		return header{}, fmt.Errorf("%w: %#08x, computed %#08x", errBadCRC, got, want)
	}
	if b[4] != Version {
		return header{}, fmt.Errorf("%w: %d", errBadVersion, b[4])
	}
	h := header{
		kind:   b[5],
		op:     binary.LittleEndian.Uint16(b[6:]),
		id:     binary.LittleEndian.Uint64(b[8:]),
		status: binary.LittleEndian.Uint32(b[16:]),
		length: binary.LittleEndian.Uint32(b[20:]),
	}
	if h.kind != kindRequest && h.kind != kindResponse {
		return header{}, fmt.Errorf("%w: %d", errBadKind, h.kind)
	}
	if r := binary.LittleEndian.Uint32(b[24:]); r != 0 {
		return header{}, fmt.Errorf("%w: %#08x", errBadReserved, r)
	}
	if h.kind == kindRequest && h.status != 0 {
		return header{}, fmt.Errorf("%w: %d", errBadStatus, h.status)
	}
	if h.length > MaxBody {
		return header{}, fmt.Errorf("%w: %d > %d", errTooLarge, h.length, MaxBody)
	}
	return h, nil
}

// Request bodies of at least minPooledBody bytes are recycled (in
// power-of-two classes up to 128 MiB, above MaxBody); smaller ones are
// plain allocations.
const minPooledBody = 64 << 10

func newBodyPool() *bufpool.Pool { return bufpool.New(minPooledBody, 128<<20) }
