package storage

import (
	"testing"

	"github.com/weft-fs/weft/proto"
)

// TestPresence: every object added is reported present (a Bloom filter
// has no false negatives, and the target relies on it), and at the size
// the filter was made for about 1 % of the others are (false positives
// cost the system calls the filter saves, nothing else).
func TestPresence(t *testing.T) {
	const n = minPresenceObjects
	p := newPresence(n / 2) // made for n objects (twice the count found)
	added := func(i int) proto.ObjectID {
		return proto.ObjectID{Ino: proto.Ino(1000 + i), Gen: uint64(i%7 + 1), Stripe: uint32(i % 4)}
	}
	for i := range n {
		p.add(added(i))
	}
	for i := range n {
		if !p.mayHold(added(i)) {
			t.Fatalf("object %v added but not reported present", added(i))
		}
	}
	fp := 0
	for i := range n {
		// Other generations and stripes of the same inode numbers, and
		// other inode numbers: what a removal of a file's never-made
		// objects asks.
		if p.mayHold(proto.ObjectID{Ino: proto.Ino(1000 + i), Gen: uint64(i%7 + 1), Stripe: uint32(i%4) + 4}) {
			fp++
		}
	}
	rate := float64(fp) / n
	t.Logf("%d objects, %d bits: %.2f %% false positives", n, len(p.words)*64, 100*rate)
	if rate > 0.03 {
		t.Errorf("false positives: %.2f %% of absent objects reported present, want about 1 %%", 100*rate)
	}
}
