// Package wire holds the primitive binary encoding that every weft message
// is built from: fixed-width little-endian integers and length-prefixed byte
// strings.
//
// Invariants:
//   - Decoding never panics, whatever the input: a Decoder records the first
//     error (truncated input, a length over its limit) and every later read
//     returns a zero value, so a message decoder can read all its fields and
//     check Err once at the end.
//   - A decoded []byte aliases the input buffer; callers that keep it past the
//     life of the buffer copy it.
//   - Lengths are bounded by MaxBytes so a hostile length prefix cannot make
//     a server allocate gigabytes.
package wire
