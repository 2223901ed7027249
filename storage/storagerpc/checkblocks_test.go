package storagerpc

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"
)

// TestCheckBlocks: a block matches cur or prev; a short last block counts
// as padded with zeros; a hole entry matches only zeros; a block without an
// entry or with the wrong bytes fails with ErrChecksum.
func TestCheckBlocks(t *testing.T) {
	sum := func(b []byte) uint32 {
		full := make([]byte, SumBlock)
		copy(full, b)
		return crc32.Checksum(full, crc32.MakeTable(crc32.Castagnoli))
	}
	entries := func(es ...[2]uint32) []byte {
		var b []byte
		for _, e := range es {
			b = binary.LittleEndian.AppendUint32(b, e[0])
			b = binary.LittleEndian.AppendUint32(b, e[1])
		}
		return b
	}
	a := make([]byte, SumBlock)
	for i := range a {
		a[i] = byte(i)
	}
	tail := []byte("the end of an object")
	two := append(append([]byte{}, a...), tail...)
	zeros := make([]byte, SumBlock)
	for _, tc := range []struct {
		name string
		data []byte
		sums []byte
		ok   bool
	}{
		{"cur", a, entries([2]uint32{sum(a), 1}), true},
		{"prev", a, entries([2]uint32{1, sum(a)}), true},
		{"neither", a, entries([2]uint32{1, 2}), false},
		{"short last block", two, entries([2]uint32{sum(a), sum(a)}, [2]uint32{sum(tail), sum(tail)}), true},
		{"short block checked unpadded", tail, entries([2]uint32{crc32.Checksum(tail, crc32.MakeTable(crc32.Castagnoli)), 0}), false},
		{"hole reads zeros", zeros, entries([2]uint32{0, 0}), true},
		{"hole with bytes", a, entries([2]uint32{0, 0}), false},
		{"no entry for a block", two, entries([2]uint32{sum(a), sum(a)}), false},
		{"nothing", nil, nil, true},
	} {
		err := CheckBlocks(tc.data, tc.sums)
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrChecksum)) {
			t.Errorf("%s: %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}
