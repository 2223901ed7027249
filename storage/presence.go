package storage

import (
	"log/slog"
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/weft-fs/weft/proto"
)

// objectSet knows, without a system call, which objects a target does not
// hold: a Bloom filter (presence) of every object that has a file on the
// target (its data, sidecar or version file). Removing or opening an object
// the filter calls absent touches no file. Objects that were never made are
// common: every unlink queues the removal of all the file's objects, and a
// file shorter than a stripe, or empty, never had some or any of them (four
// of four for mdtest-easy's empty files, two of four for small files, at
// mirror 2 with two stripes). Each cost an open and two removals that fail
// before (docs/performance.md, "Removing objects that were never made,
// without a system call").
//
// Invariants: the scan at OpenTarget adds every object that has a file
// (leftovers of an interrupted creation or removal included), and a
// creation adds its object before the object's first file is created
// (openHandle, under the object's lock), so mayHold(obj) is false only for
// an object with no file on the target: no false negatives. A Bloom filter
// cannot take an object out, so a removed object stays "maybe" until the
// filter is renewed: the caller then does what it did without the filter.
//
// Renewal: a filter is made for twice the objects the target held when it
// was made (at least minPresenceObjects), presenceBitsPerObject bits each
// rounded up to a power of two (under 1 % false positives up to that many).
// Once as many objects were added since, creates and removals having
// churned it, a new filter is made in the background from a listing of the
// fan-out directories, and replaces it. The listing cannot miss an object
// created meanwhile: from before the listing begins, creations add to both
// filters (next), and the renewal first waits out the creations that began
// before next was published (creating, held shared by each creation from
// its add until its first file exists), whose files the listing then sees.
type objectSet struct {
	cur, next atomic.Pointer[presence]
	creating  sync.RWMutex
	renewing  atomic.Bool
	// list calls add for every object with a file on the target; count
	// is how many objects the target holds.
	list  func(add func(proto.ObjectID)) error
	count func() int64
	log   func() *slog.Logger
}

// presence is one Bloom filter.
type presence struct {
	words []atomic.Uint64
	mask  uint64 // the filter's length in bits, less one (a power of two)
	// capacity is the number of objects it was made for; added counts
	// the adds since it was made.
	capacity uint64
	added    atomic.Uint64
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
	capacity := uint64(max(2*n, minPresenceObjects))
	want := capacity * presenceBitsPerObject
	size := min(uint64(1)<<bits.Len64(want-1), maxPresenceBits)
	return &presence{words: make([]atomic.Uint64, size/64), mask: size - 1, capacity: capacity}
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
	p.added.Add(1)
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

// mayHold reports whether obj may have files on the target; false means
// it has none.
func (s *objectSet) mayHold(obj proto.ObjectID) bool { return s.cur.Load().mayHold(obj) }

// creatingObject records that obj's first file is about to be created; the
// caller calls done once it exists, or its creation failed.
func (s *objectSet) creatingObject(obj proto.ObjectID) (done func()) {
	s.creating.RLock()
	// next before cur: a renewal publishes cur before it clears next, so
	// whichever this sees, the filter that will be current gets obj.
	if n := s.next.Load(); n != nil {
		n.add(obj)
	}
	c := s.cur.Load()
	c.add(obj)
	if c.added.Load() > c.capacity && s.renewing.CompareAndSwap(false, true) {
		go s.renew()
	}
	return s.creating.RUnlock
}

// renew replaces the filter with one made from a listing of the target.
func (s *objectSet) renew() {
	defer s.renewing.Store(false)
	next := newPresence(int(s.count()))
	s.next.Store(next)
	// Creations that added to cur only have their files by now.
	s.creating.Lock()
	s.creating.Unlock() //nolint:staticcheck // an empty critical section: the wait is the point
	if err := s.list(next.add); err != nil {
		s.next.Store(nil)
		s.log().Warn("storage: renewing the presence filter failed; keeping the old one", "err", err)
		return
	}
	s.cur.Store(next)
	s.next.Store(nil)
}
