package storage

import (
	"math/bits"
	"sync/atomic"

	"github.com/weft-fs/weft/proto"
)

// presence is a Bloom filter of the objects a target may hold: every object
// with a file on the target (its data, sidecar or version file) is in it,
// so an object it says is absent has no file at all, and removing or
// opening it needs no system call. Objects that were never made are common:
// every unlink queues the removal of all the file's objects, and a file
// shorter than a stripe, or empty, never had some or any of them (four of
// four for mdtest-easy's empty files, two of four for small files, at
// mirror 2 with two stripes). Each costs three failing system calls
// otherwise (docs/performance.md, "Removing objects that were never made,
// without a system call").
//
// Invariants: an object is added before its first file is created (under
// the object's lock, openHandle), and the scan at OpenTarget adds every
// object that has any file, so mayHold(obj) is false only for an object
// with no file on the target (no false negatives); removals do not take
// objects out (a Bloom filter cannot), so a removed object may still be
// reported as present: the caller then does what it did without the filter.
//
// The filter is sized when the target opens, for twice the files found
// there (an object has two or three; at least minPresenceObjects), at presenceBitsPerObject bits each,
// rounded up to a power of two: under 1 % false positives up to that many
// objects. A target that grows
// past it while serving sees more false positives (more system calls, as
// without the filter), never a wrong answer; the next open sizes it again.
type presence struct {
	words []atomic.Uint64
	mask  uint64 // the filter's length in bits, less one (a power of two)
}

const (
	presenceBitsPerObject = 10
	presenceHashes        = 7
	minPresenceObjects    = 1 << 20
	// maxPresenceBits caps a target's filter at 256 MiB of memory.
	maxPresenceBits = 1 << 31
)

// newPresence returns an empty filter for twice n objects.
func newPresence(n int) *presence {
	want := uint64(max(2*n, minPresenceObjects)) * presenceBitsPerObject
	size := min(uint64(1)<<bits.Len64(want-1), maxPresenceBits)
	return &presence{words: make([]atomic.Uint64, size/64), mask: size - 1}
}

// probes returns the two hashes the filter's probes derive from
// (Kirsch-Mitzenmacher double hashing).
func probes(obj proto.ObjectID) (h1, h2 uint64) {
	h1 = mix64(uint64(obj.Ino) ^ mix64(obj.Gen^uint64(obj.Stripe)<<48))
	h2 = mix64(h1^0x9e3779b97f4a7c15) | 1
	return h1, h2
}

// mix64 is splitmix64's finalizer.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// add records that obj may have files on the target.
func (p *presence) add(obj proto.ObjectID) {
	h1, h2 := probes(obj)
	for i := uint64(0); i < presenceHashes; i++ {
		b := (h1 + i*h2) & p.mask
		p.words[b/64].Or(1 << (b % 64))
	}
}

// mayHold reports whether obj may have files on the target; false means
// it has none.
func (p *presence) mayHold(obj proto.ObjectID) bool {
	h1, h2 := probes(obj)
	for i := uint64(0); i < presenceHashes; i++ {
		b := (h1 + i*h2) & p.mask
		if p.words[b/64].Load()&(1<<(b%64)) == 0 {
			return false
		}
	}
	return true
}
