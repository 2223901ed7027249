package storage

import (
	"bytes"
	"hash/crc32"
	"testing"
)

func TestBlockCRC(t *testing.T) {
	full := bytes.Repeat([]byte{7}, BlockSize)
	tests := []struct {
		name string
		in   []byte
		want []byte // the zero-padded block whose plain CRC must equal blockCRC(in)
	}{
		{"empty", nil, make([]byte, BlockSize)},
		{"one byte", []byte{1}, append([]byte{1}, make([]byte, BlockSize-1)...)},
		{"partial", full[:100], append(bytes.Clone(full[:100]), make([]byte, BlockSize-100)...)},
		{"full", full, full},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got, want := blockCRC(tc.in), crc32.Checksum(tc.want, castagnoli); got != want {
				t.Fatalf("blockCRC = %#x, want %#x", got, want)
			}
		})
	}
	if zeroBlockCRC == 0 {
		t.Fatal("the CRC of a zero block must not be the hole marker")
	}
}

func TestEntryMatch(t *testing.T) {
	a, b := blockCRC([]byte("a")), blockCRC([]byte("b"))
	tests := []struct {
		name  string
		e     entry
		c     uint32
		want  uint32
		match bool
	}{
		{"cur", entry{a, b}, a, a, true},
		{"prev", entry{a, b}, b, b, true},
		{"neither", entry{a, a}, b, 0, false},
		{"hole reads zeros", entry{0, 0}, zeroBlockCRC, 0, true},
		{"hole with data", entry{0, 0}, a, 0, false},
		{"first write in flight", entry{a, 0}, zeroBlockCRC, 0, true},
		{"first write done", entry{a, 0}, a, a, true},
		{"written zeros", entry{zeroBlockCRC, zeroBlockCRC}, zeroBlockCRC, zeroBlockCRC, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := tc.e.match(tc.c)
			if ok != tc.match || (ok && got != tc.want) {
				t.Fatalf("match = %#x, %v; want %#x, %v", got, ok, tc.want, tc.match)
			}
		})
	}
}

func TestBlockMath(t *testing.T) {
	tests := []struct{ size, blocks uint64 }{
		{0, 0}, {1, 1}, {4095, 1}, {4096, 1}, {4097, 2}, {47008, 12}, {1 << 20, 256},
	}
	for _, tc := range tests {
		if got := blocksFor(tc.size); got != tc.blocks {
			t.Errorf("blocksFor(%d) = %d, want %d", tc.size, got, tc.blocks)
		}
	}
	if entryOff(0) != headerSize || entryOff(3) != headerSize+24 {
		t.Fatal("entryOff")
	}
}

func TestHeaderRoundTrip(t *testing.T) {
	h := header{Version: 12345, Blocks: 99}
	b := h.encode()
	got, err := decodeHeader(b)
	if err != nil || got != h {
		t.Fatalf("decode = %+v, %v", got, err)
	}
	for i := range b {
		c := bytes.Clone(b)
		c[i] ^= 0x10
		if _, err := decodeHeader(c); err == nil {
			t.Fatalf("flipped byte %d accepted", i)
		}
	}
	if _, err := decodeHeader(b[:31]); err == nil {
		t.Fatal("short header accepted")
	}
}

func TestEntriesRoundTrip(t *testing.T) {
	es := []entry{{1, 2}, {0, 0}, {0xffffffff, 7}}
	b := encodeEntries(nil, es)
	got := make([]entry, 4)
	decodeEntries(b, got) // one more than encoded: a hole
	for i, e := range es {
		if got[i] != e {
			t.Fatalf("entry %d = %v, want %v", i, got[i], e)
		}
	}
	if got[3] != (entry{}) {
		t.Fatalf("missing entry = %v, want hole", got[3])
	}
}

func FuzzDecodeSidecar(f *testing.F) {
	f.Add(header{Version: 1, Blocks: 2}.encode())
	f.Add(append(header{}.encode(), encodeEntries(nil, []entry{{1, 2}, {3, 4}})...))
	f.Add([]byte{})
	f.Add([]byte("WFTC"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeHeader(b)
		if err == nil {
			if !bytes.Equal(h.encode(), b[:headerSize]) {
				t.Fatalf("header %+v does not re-encode to its input", h)
			}
		}
		if len(b) > headerSize {
			rest := b[headerSize:]
			es := make([]entry, (len(rest)+entrySize-1)/entrySize)
			decodeEntries(rest, es)
			re := encodeEntries(nil, es[:len(rest)/entrySize])
			if !bytes.Equal(re, rest[:len(re)]) {
				t.Fatal("entries do not re-encode to their input")
			}
		}
	})
}
