package proto

import "context"

// Scrub (issue 9, point 6). Every storage server reads every block of its
// targets' objects at a throttled rate and checks it against its CRC32C;
// an object found corrupt (by the scrub or by a client's read) is
// reported to the metadata service, which marks the slot of a protected
// (mirror, EC) file stale, so that the rebuild rewrites it in place from
// the file's other copies or shards, and counts the object of an
// unprotected (RAID-0) file as lost.

// ScrubTarget is the scrub's state on one target, as its storage server
// keeps it. Times are Unix ns (0: never).
type ScrubTarget struct {
	Target  TargetID
	Running bool   // a pass is under way
	Start   int64  // when the current or last pass began
	End     int64  // when the last complete pass ended
	Bytes   uint64 // bytes checked by the current pass (or the last, when none runs)
	Objects uint64 // objects checked by the current pass (or the last)
	Passes  uint64 // passes completed since the server started
	Corrupt uint64 // corrupt objects found since the server started (by the scrub and by reads)
	Total   uint64 // bytes checked since the server started
}

// ScrubReport is what a storage server tells the metadata service about
// one of its targets: its scrub state and the objects found corrupt since
// its last report (at most MaxScrubFound).
type ScrubReport struct {
	ScrubTarget
	Found []ObjectID
}

// MaxScrubFound bounds the objects of one report.
const MaxScrubFound = 4096

// ScrubTargetStatus is a target's scrub state in the metadata service's
// view: what its server last reported, and what became of the corrupt
// objects reported (since this metadata server leads).
type ScrubTargetStatus struct {
	ScrubTarget
	Reported uint64 // corrupt objects reported
	Repaired uint64 // of those, rewritten from their file's redundancy
	Lost     uint64 // of those, of unprotected files (or with no good copy left)
	Heard    int64  // when its server last reported (Unix ns; 0: never)
}

// LostObject names an object found corrupt that no copy or parity can
// repair: reads of its bad blocks fail with EIO until it is rewritten.
type LostObject struct {
	Target TargetID
	Obj    ObjectID
}

// ScrubStatus is what `weft scrub` shows.
type ScrubStatus struct {
	Targets []ScrubTargetStatus
	Lost    []LostObject // the most recent, at most MaxScrubLost
}

// MaxScrubLost bounds the lost objects a status lists.
const MaxScrubLost = 1024

// ScrubReceiver is what storage servers ask of the metadata service:
// ReportScrub records a target's scrub state and has the corrupt objects
// repaired. Only storage servers may report, and only on their own
// targets.
type ScrubReceiver interface {
	ReportScrub(ctx context.Context, r ScrubReport) error
}

// ScrubAdmin is what `weft scrub` asks of the metadata service: start a
// pass on every target that is up now (root only), and the status.
// StartScrub returns the targets asked.
type ScrubAdmin interface {
	StartScrub(ctx context.Context) ([]TargetID, error)
	ScrubStatus(ctx context.Context) (ScrubStatus, error)
}

// ScrubStarter is what the metadata service asks of a storage server:
// start a scrub pass on a target now (a pass already under way goes on).
type ScrubStarter interface {
	StartScrub(ctx context.Context, t TargetID) error
}
