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

// RowCopy copies Len bytes of one unit of the source object Src (on
// SrcTarget, at SrcOff) into one unit of a destination object (at Off),
// both in units of Unit bytes: a shard of an erasure-coded row copied to
// the same shard of a row of another file of the same geometry, without
// the bytes passing through the client (copy_file_range). The source unit
// must have version Expect when it is read, or the copy fails with EAGAIN
// and changes nothing: the client checks that all shards of the source row
// hold one version, and each shard is copied at that version, so the
// destination row is one code word. The destination unit gets version
// {Tag, clean}, unconditionally (as a full-row write). SrcCap is the
// capability that grants reading the source; the request's own grants
// writing the destination.
type RowCopy struct {
	SrcTarget TargetID
	Src       ObjectID
	SrcOff    uint64
	SrcCap    []byte
	Expect    RowVersion
	Off, Unit uint64
	Len       uint64
	Tag       uint64
}

// RowCopier is the storage service's versioned copy of one unit
// (storagerpc OpCopyRow), served by the destination's server, which reads
// the source itself.
type RowCopier interface {
	CopyRow(ctx context.Context, t TargetID, dst ObjectID, c RowCopy) error
}
