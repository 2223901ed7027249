package transport

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"
)

func TestHeaderRoundTrip(t *testing.T) {
	for _, h := range []header{
		{kind: kindRequest, op: 1, id: 1, length: 0},
		{kind: kindRequest, op: 65535, id: 1<<64 - 1, length: MaxBody},
		{kind: kindResponse, op: 100, id: 42, status: 2, length: 17},
		{kind: kindResponse, op: 200, id: 7, status: 0, length: 1 << 20},
	} {
		var b [HeaderSize]byte
		encodeHeader(b[:], h)
		got, err := decodeHeader(b[:])
		if err != nil {
			t.Fatalf("%+v: %v", h, err)
		}
		if got != h {
			t.Fatalf("decoded %+v, want %+v", got, h)
		}
	}
}

// reseal recomputes the header CRC after a test modified a field.
func reseal(b []byte) {
	binary.LittleEndian.PutUint32(b[28:], crc32.Checksum(b[:28], castagnoli))
}

func TestDecodeHeaderErrors(t *testing.T) {
	good := func() []byte {
		b := make([]byte, HeaderSize)
		encodeHeader(b, header{kind: kindRequest, op: 3, id: 9, length: 10})
		return b
	}
	for _, tc := range []struct {
		name   string
		mutate func(b []byte) []byte
		want   error
	}{
		{"short", func(b []byte) []byte { return b[:HeaderSize-1] }, errShortHeader},
		{"empty", func(b []byte) []byte { return nil }, errShortHeader},
		{"magic", func(b []byte) []byte { b[0] ^= 1; reseal(b); return b }, errBadMagic},
		{"crc", func(b []byte) []byte { b[12] ^= 0x80; return b }, errBadCRC},
		{"crc field", func(b []byte) []byte { b[30] ^= 1; return b }, errBadCRC},
		{"version", func(b []byte) []byte { b[4] = 2; reseal(b); return b }, errBadVersion},
		{"kind 0", func(b []byte) []byte { b[5] = 0; reseal(b); return b }, errBadKind},
		{"kind 3", func(b []byte) []byte { b[5] = 3; reseal(b); return b }, errBadKind},
		{"reserved", func(b []byte) []byte { b[25] = 1; reseal(b); return b }, errBadReserved},
		{"request status", func(b []byte) []byte { b[16] = 5; reseal(b); return b }, errBadStatus},
		{"too large", func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[20:], MaxBody+1)
			reseal(b)
			return b
		}, errTooLarge},
		{"huge", func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[20:], 1<<32-1)
			reseal(b)
			return b
		}, errTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeHeader(tc.mutate(good()))
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func FuzzDecodeHeader(f *testing.F) {
	for _, h := range []header{
		{kind: kindRequest, op: 1, id: 1},
		{kind: kindResponse, op: 100, id: 2, status: 5, length: 12},
		{kind: kindRequest, op: 7, id: 3, length: MaxBody},
	} {
		b := make([]byte, HeaderSize)
		encodeHeader(b, h)
		f.Add(b)
	}
	f.Add([]byte("WEFT"))
	f.Add(make([]byte, HeaderSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeHeader(b)
		if err != nil {
			return
		}
		if h.length > MaxBody || (h.kind != kindRequest && h.kind != kindResponse) {
			t.Fatalf("accepted invalid header %+v", h)
		}
		var re [HeaderSize]byte
		encodeHeader(re[:], h)
		if !bytes.Equal(re[:], b[:HeaderSize]) {
			t.Fatalf("accepted header does not re-encode to its input:\n%x\n%x", b[:HeaderSize], re)
		}
	})
}
