package proto

import (
	"context"
	"time"
)

// Rebuild of objects, storage to storage (issue 9, point 5). The metadata
// service's leader decides what to rebuild where; the storage server of
// the destination target reads the object's other copies (or K shards of
// its EC stripe) from its peers, writes it, and answers; no byte passes
// through the metadata service or a client.

// RebuildSource is one object the destination may read: a fresh copy of
// the object being rebuilt, or a shard of its EC stripe.
type RebuildSource struct {
	Target TargetID
	Slot   uint32 // the object's slot (its ObjectID.Stripe)
	Shard  uint8  // EC: the shard's index in its stripe (0..K+M-1); copies: 0
}

// Flags of a RebuildRequest.
const (
	// RebuildStart: the range is the first of the object: the destination
	// object is emptied first (truncated to 0), so ranges that read as
	// zeros are left holes instead of written.
	RebuildStart uint8 = 1
	// RebuildFinish: after the range, the object is set to Size bytes and
	// synced.
	RebuildFinish uint8 = 2
)

// RebuildRequest asks a storage server to write the range [Off, Off+Len)
// of object Obj on its target Target from Sources: a copy (ECData 0) reads
// the range from the first source that answers; an EC shard (ECData K,
// ECParity M) reads the same range of K of the sources and decodes shard
// Shard (klauspost/reedsolomon, K+M).
type RebuildRequest struct {
	Target           TargetID
	Obj              ObjectID
	Off, Len         uint64
	Size             uint64 // the object's length, set at RebuildFinish
	Flags            uint8
	ECData, ECParity uint8
	Shard            uint8
	// Unit: for a shard of an EC file (decoded, or copied off a draining
	// target), the stripe size: its rows carry versions (RowVersion), and
	// the rebuilt shard gets each row's version with its bytes, so that it
	// counts in later reconstructions. 0 for a mirror copy.
	Unit    uint64
	Sources []RebuildSource
	// Fence is the issue time (Unix ns) of the capability the metadata
	// service fenced the destination object with before this rebuild (0:
	// not fenced, a cluster without keys). The server changes the object
	// only while no later fence was set on it: a repair that finished
	// meanwhile (weft resync fences with a newer capability) is never
	// overwritten by a rebuild request delivered or still running after
	// the metadata service gave up on it.
	Fence int64
}

// MaxRebuildSources bounds a request's sources (copies or shards of a
// stripe: at most 5 copies or 16+4 shards).
const MaxRebuildSources = 32

// ObjectRebuilder is the storage service's rebuild operation
// (storagerpc OpRebuild). Only metadata servers may ask for it.
type ObjectRebuilder interface {
	// RebuildObject writes the request's range and returns how many bytes
	// it wrote (ranges that read as zeros after a RebuildStart are not
	// written).
	RebuildObject(ctx context.Context, r RebuildRequest) (uint64, error)
}

// TargetStatus is a target as `weft target list` shows it: what the
// registry knows, its lifecycle state, and how many objects of files
// still name it and are to be moved off (as of the rebuild's last scan).
type TargetStatus struct {
	TargetInfo
	State string // in, out, draining, inactive, removed
	// Auto: the state out was set by the metadata service (the target was
	// down longer than rebuild_after), not by an admin; such a target
	// returns to in when it comes back.
	Auto bool
	// Pending: objects on this target that the rebuild still has to copy
	// elsewhere (out, draining, removed) or repair in place (stale).
	Pending uint64
}

// RebuildStatus is the progress of the metadata service's rebuild: the
// work its last scan found, and what is done of it.
type RebuildStatus struct {
	Active        bool // a pass is running
	Passes        uint64
	Objects, Done uint64 // objects to rebuild or move in this pass, and done
	Bytes         uint64 // bytes of those objects
	BytesDone     uint64
	Deferred      uint64 // objects retried later (file open for writing, written meanwhile)
	Failed        uint64 // objects that failed in this pass (no source, no destination, I/O)
	Lost          uint64 // objects with no readable copy (RAID-0 on a lost target)
	Rate          uint64 // the configured limit, bytes/s (0: none)
	Measured      uint64 // bytes/s over the pass so far
	ETA           time.Duration
	RebuildAfter  time.Duration // how long a target may be down before it is rebuilt
}

// TargetAdmin is the target lifecycle service of the metadata service
// (`weft target`); meta.Server implements it, and so does metarpc's
// Client.
type TargetAdmin interface {
	TargetList(ctx context.Context) ([]TargetStatus, RebuildStatus, error)
	// SetTargetState sets a target's state: "in" (activate), "out",
	// "draining", "inactive", "removed".
	SetTargetState(ctx context.Context, id TargetID, state string) error
	// RebuildRate sets the rebuild's limit in bytes/s if rate is not
	// nil (0: unlimited), and returns the limit in force.
	RebuildRate(ctx context.Context, rate *uint64) (uint64, error)
}
