package proto

import (
	"context"
	"time"
)

// LeaseInval tells a lease holder that what it cached of Ino changed: its
// attributes and, if Name is set, the entry Name in the directory Ino
// (created, removed or replaced). Seq orders a holder's invalidations; the
// holder acknowledges by sending the highest Seq it processed in its next
// poll.
type LeaseInval struct {
	Seq  uint64
	Ino  Ino
	Name string
}

// LeasePoll is the answer to a lease poll: the holder's epoch (it changes
// when the leader forgot the holder's leases: a new leader, or the holder
// was dropped for not polling; 0: dropped now; either way the client must
// drop everything it cached), the term the leader keeps a silent holder's
// leases, and the invalidations not yet acknowledged.
type LeasePoll struct {
	Epoch uint64
	Term  time.Duration
	// Valid is how long after the poll arrived at the server the client
	// may trust what it caches, at most (a replicated leader's lease on
	// its leadership; see meta.Server.LeasePoll). The client counts it
	// from when it sent the poll. An older server does not send it: the
	// decoder then sets it to Term.
	Valid  time.Duration
	Invals []LeaseInval
}

// LeaseService is a metadata service that grants metadata leases to the
// sessions that poll it (see docs/caching.md). LeasePoll acknowledges the
// invalidations up to ack and waits (up to about a fifth of the term) for
// new ones.
type LeaseService interface {
	LeasePoll(ctx context.Context, ack uint64) (LeasePoll, error)
}

// MaxPollInvals is the most invalidations a leader puts in one LeasePoll
// answer; an answer that full may have left some for the next.
const MaxPollInvals = 4096

// PinMode is the mode a file needs to be opened from a client's lease
// cache and pinned: read for every class, so that whoever the caller is
// (root squashed or not) the server would let it open the file for
// reading, and a pin grants nothing an Open would not.
const PinMode = 0o444

// ReadableByAll reports whether a is a regular file every class may read
// (PinMode): one a client may open from its lease cache, pin, and be
// answered the copy of with a lookup, whoever its caller is.
func (a Attr) ReadableByAll() bool { return a.IsRegular() && a.Mode&PinMode == PinMode }

// LeasePinner is a LeaseService that lets a session register opens it made
// from its lease cache without asking the leader (a read-only open of a
// file whose whole content the client holds: docs/caching.md, "Opens from
// the cache"). The client pins them before it acknowledges an
// invalidation of their inode, before it changes a name itself (unlink,
// rename), and when its cache is dropped, so that an unlink never reclaims
// a file such an open still reads. Pins are read-only handles (Write
// false); each result says whether that entry was counted: the leader
// counts an open only on a regular file every class may read (a pin is an
// open for reading without a capability) that exists and is not being
// reclaimed.
type LeasePinner interface {
	PinOpens(ctx context.Context, pins []OpenHandle) ([]bool, error)
}
