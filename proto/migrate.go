package proto

import (
	"context"

	"github.com/weft-fs/weft/layout"
)

// MigrateTicket is one online restripe of a file (`weft migrate`) between
// its begin and its commit or abort. The metadata service hands it out
// (Migrator.MigrateBegin): a new generation and a new layout, placed, whose
// objects (named by the new generation, so they never collide with the
// file's current ones) the client then writes; the commit swaps them in
// only if the file still is what it was at the begin (Gen, Mtime, Ctime,
// Size).
type MigrateTicket struct {
	Ino    Ino
	Gen    uint64        // the file's generation at the begin
	NewGen uint64        // the generation of the new objects
	Layout layout.Layout // the new layout, placed
	// Mtime, Ctime and Size are the file's at the begin: its data version.
	Mtime, Ctime int64
	Size         uint64
	// Until is when the new objects are removed unless the commit came
	// first (unix ns); the commit is refused a margin before it.
	Until int64
	// Cap is a capability granting read and write on the new objects
	// (generation NewGen), valid until Until.
	Cap []byte
	// Blocks is, at the commit, what the new objects hold (Attr.Blocks,
	// 512-byte units) as the client counted it; NoBlocks: not counted
	// (the file's count stays).
	Blocks uint64
}

// Migrator is the metadata service's side of an online restripe. Begin
// needs write permission on the file and fails with EBUSY while anyone
// has it open for writing; Commit fails with EBUSY if the file was
// written (or is open for writing) since the begin, and then changes
// nothing; Abort queues the new objects for removal at once. Renew
// extends a ticket whose copy is still running (a new Until and Cap); a
// ticket that ended, or was committed or aborted, is not renewed.
type Migrator interface {
	MigrateBegin(ctx context.Context, ino Ino, policy layout.Layout) (MigrateTicket, error)
	MigrateRenew(ctx context.Context, t MigrateTicket) (MigrateTicket, error)
	MigrateCommit(ctx context.Context, t MigrateTicket) (Attr, error)
	MigrateAbort(ctx context.Context, t MigrateTicket) error
}

// MigrateFollower lets a handle opened before a restripe follow the file to
// its new objects. Follow returns file ino's attributes and a capability
// granting want on its current objects (after the permission check of
// MetaService.Capability) if ino is still the file that had generation
// gen: its current generation, or one a restripe replaced (Attr.Gen then
// differs from gen). For any other generation ino is another file (a
// metadata store put back to an earlier state reuses numbers): ESTALE.
type MigrateFollower interface {
	Follow(ctx context.Context, ino Ino, gen uint64, want Access) (Attr, []byte, error)
}
