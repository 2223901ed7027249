package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// MaxBytes bounds any single length-prefixed field. It is larger than the
// biggest data payload (a few MiB) and small enough that a corrupt prefix
// cannot exhaust memory.
const MaxBytes = 64 << 20

// ErrTruncated is returned when the input ends in the middle of a field.
var ErrTruncated = errors.New("wire: truncated message")

// ErrTooLong is returned when a length prefix exceeds its limit.
var ErrTooLong = errors.New("wire: field too long")

// Encoder appends fields to a byte slice. The zero value is ready to use.
type Encoder struct {
	B []byte
}

// NewEncoder returns an encoder whose buffer has room for n bytes.
func NewEncoder(n int) *Encoder { return &Encoder{B: make([]byte, 0, n)} }

func (e *Encoder) U8(v uint8)   { e.B = append(e.B, v) }
func (e *Encoder) U16(v uint16) { e.B = binary.LittleEndian.AppendUint16(e.B, v) }
func (e *Encoder) U32(v uint32) { e.B = binary.LittleEndian.AppendUint32(e.B, v) }
func (e *Encoder) U64(v uint64) { e.B = binary.LittleEndian.AppendUint64(e.B, v) }
func (e *Encoder) I64(v int64)  { e.U64(uint64(v)) }
func (e *Encoder) Bool(v bool) {
	if v {
		e.U8(1)
	} else {
		e.U8(0)
	}
}

// Bytes appends a uint32 length prefix and the bytes.
func (e *Encoder) Bytes(b []byte) {
	e.U32(uint32(len(b)))
	e.B = append(e.B, b...)
}

// String appends a string like Bytes.
func (e *Encoder) String(s string) {
	e.U32(uint32(len(s)))
	e.B = append(e.B, s...)
}

// Decoder reads fields from a byte slice. See the package invariants.
type Decoder struct {
	b   []byte
	err error
}

// NewDecoder returns a decoder over b.
func NewDecoder(b []byte) *Decoder { return &Decoder{b: b} }

// Err returns the first error met, or nil.
func (d *Decoder) Err() error { return d.err }

// Remaining returns the bytes not yet read.
func (d *Decoder) Remaining() []byte { return d.b }

// Done returns the first error met, or an error if unread bytes remain.
// Message decoders call it last so that trailing garbage is rejected.
func (d *Decoder) Done() error {
	if d.err != nil {
		return d.err
	}
	if len(d.b) != 0 {
		return fmt.Errorf("wire: %d unexpected trailing bytes", len(d.b))
	}
	return nil
}

// Fail records err (if no earlier error) so that message decoders can report
// semantic problems, such as an unknown enum value, the same way.
func (d *Decoder) Fail(err error) {
	if d.err == nil {
		d.err = err
	}
	d.b = nil
}

func (d *Decoder) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n > len(d.b) {
		d.Fail(ErrTruncated)
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *Decoder) U8() uint8 {
	if b := d.take(1); b != nil {
		return b[0]
	}
	return 0
}

func (d *Decoder) U16() uint16 {
	if b := d.take(2); b != nil {
		return binary.LittleEndian.Uint16(b)
	}
	return 0
}

func (d *Decoder) U32() uint32 {
	if b := d.take(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (d *Decoder) U64() uint64 {
	if b := d.take(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

func (d *Decoder) I64() int64 { return int64(d.U64()) }

func (d *Decoder) Bool() bool { return d.U8() != 0 }

// BytesMax reads a length-prefixed byte string of at most max bytes.
// The result aliases the input.
func (d *Decoder) BytesMax(max int) []byte {
	n := d.U32()
	if d.err != nil {
		return nil
	}
	if int64(n) > int64(max) {
		d.Fail(fmt.Errorf("%w: %d > %d", ErrTooLong, n, max))
		return nil
	}
	return d.take(int(n))
}

// Bytes reads a length-prefixed byte string of at most MaxBytes.
func (d *Decoder) Bytes() []byte { return d.BytesMax(MaxBytes) }

// StringMax reads a length-prefixed string of at most max bytes.
func (d *Decoder) StringMax(max int) string { return string(d.BytesMax(max)) }

// String reads a length-prefixed string of at most 64 KiB, the longest
// name, path or xattr key any message carries.
func (d *Decoder) String() string { return d.StringMax(64 << 10) }

// Count reads a uint32 element count and checks it against max and against
// the bytes left (each element needs at least minSize bytes), so a hostile
// count cannot make the caller preallocate a huge slice.
func (d *Decoder) Count(max, minSize int) int {
	n := d.U32()
	if d.err != nil {
		return 0
	}
	if int64(n) > int64(max) || (minSize > 0 && int64(n)*int64(minSize) > int64(len(d.b))) {
		d.Fail(fmt.Errorf("%w: count %d", ErrTooLong, n))
		return 0
	}
	return int(n)
}
