package proto

import "context"

// RowVersion is the version of one unit (an EC row's share) of an object:
// a tag the writer chose, and whether a write setting it was interrupted
// (Dirty: the unit's bytes may be old or new, so the tag says nothing
// about them). Tag 0 is a unit never written with a version.
type RowVersion struct {
	Tag   uint64
	Dirty bool
}

// RowWrite is a versioned write of Data at Off into one unit of an object
// (units are Unit bytes; Off and Off+len(Data) lie in one unit). With
// Cond, it is applied only if the unit's version is Expect, and fails with
// EAGAIN (changing nothing) otherwise. Either way the unit's version
// becomes {Tag, clean}. Data may be empty: that only sets the version.
type RowWrite struct {
	Off, Unit uint64
	Data      []byte
	Cond      bool
	Expect    RowVersion
	Tag       uint64
}

// RowVersioner is what storage offers besides StorageService for
// erasure-coded and mirrored files (see package storage, "Object
// versions"): reads and writes of one unit with its version, and Fence,
// which makes the object refuse writes whose capability was issued before
// the capability attached to the Fence (a write delayed from before a
// repair must not overwrite the repair).
type RowVersioner interface {
	ReadRow(ctx context.Context, t TargetID, obj ObjectID, off, unit uint64, p []byte) (int, RowVersion, error)
	WriteRow(ctx context.Context, t TargetID, obj ObjectID, w RowWrite) (uint64, error)
	Fence(ctx context.Context, t TargetID, obj ObjectID) error
}
