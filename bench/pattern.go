package bench

import "encoding/binary"

// The data pattern: the 8-byte little-endian word with index k = off/8 in
// the data written by rank r is (k ^ seed(r)) * patternMul. Multiplying by an
// odd constant is a bijection, so a word read from the wrong offset or
// written by the wrong rank differs from the expected one, and generating it
// costs one xor and one multiply per word (tens of GiB/s), which keeps the
// benchmark measuring the file system, not the pattern.
const patternMul = 0x9E3779B97F4A7C15

// patternSeed gives each rank a seed whose top 12 bits differ from every
// other rank's below 4096 ranks; word indexes stay below 2^52 (32 PiB), so
// two (rank, index) pairs never produce the same xor.
func patternSeed(rank int) uint64 {
	z := uint64(rank) + 1
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	z ^= z >> 31
	return uint64(rank)<<52 ^ (z & (1<<52 - 1))
}

func patternWord(seed, k uint64) uint64 { return (k ^ seed) * patternMul }

// Fill writes into buf the bytes that rank writes at file offset off.
func Fill(buf []byte, rank int, off int64) {
	seed := patternSeed(rank)
	pos := uint64(off)
	i := 0
	for i < len(buf) && pos%8 != 0 {
		buf[i] = byte(patternWord(seed, pos/8) >> (8 * (pos % 8)))
		i++
		pos++
	}
	for ; i+8 <= len(buf); i += 8 {
		binary.LittleEndian.PutUint64(buf[i:], patternWord(seed, pos/8))
		pos += 8
	}
	for ; i < len(buf); i++ {
		buf[i] = byte(patternWord(seed, pos/8) >> (8 * (pos % 8)))
		pos++
	}
}

// Check returns the index in buf of the first byte that differs from what
// rank wrote at file offset off, or -1 if all of buf matches.
func Check(buf []byte, rank int, off int64) int {
	seed := patternSeed(rank)
	pos := uint64(off)
	i := 0
	for i < len(buf) && pos%8 != 0 {
		if buf[i] != byte(patternWord(seed, pos/8)>>(8*(pos%8))) {
			return i
		}
		i++
		pos++
	}
	for ; i+8 <= len(buf); i += 8 {
		if binary.LittleEndian.Uint64(buf[i:]) != patternWord(seed, pos/8) {
			for j := i; ; j++ { // locate the byte within the word
				p := uint64(off) + uint64(j)
				if buf[j] != byte(patternWord(seed, p/8)>>(8*(p%8))) {
					return j
				}
			}
		}
		pos += 8
	}
	for ; i < len(buf); i++ {
		if buf[i] != byte(patternWord(seed, pos/8)>>(8*(pos%8))) {
			return i
		}
		pos++
	}
	return -1
}
