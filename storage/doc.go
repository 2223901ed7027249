// Package storage is weft's storage service: storage targets that hold the
// stripe objects of files, the Server that routes requests to the targets of
// one process, and Run, the storage server's main loop (register targets
// with the metadata server, serve RPCs, heartbeat usage).
//
// # On-disk format
//
// A target is a directory:
//
//	target.json                {"uuid": "...", "id": N, "fsid": "..."}
//	target.lock                flock(2)ed by the serving process
//	objects/00 .. objects/ff   fan-out by the low byte of the inode number
//	objects/<xx>/<ino>.<gen>.<stripe>      the object's bytes (a plain, maybe sparse, file)
//	objects/<xx>/<ino>.<gen>.<stripe>.crc  the object's sidecar
//	objects/<xx>/<ino>.<gen>.<stripe>.ver  its version file (only objects written with versions or fenced)
//
// <ino> and <stripe> are decimal, <gen> is the file's generation
// (proto.ObjectID.Gen) in hex. An object of generation 0 (a file created
// before generations) is named <ino>.<stripe>, as all objects were before,
// so existing data stays readable. The generation makes a name unique to
// one file even when an inode number is handed out again after the
// metadata store was rolled back or restored from a backup: a new file
// with a reused number gets new objects (reading as holes), never the old
// file's bytes.
//
// The uuid is made on first start; the id is assigned by the metadata server
// on the first RegisterTarget and stored, and every later registration must
// return the same id (Run fails otherwise, as it does when the metadata
// server refuses the target: EINVAL, EPERM for a uuid another storage
// server registered or a target of another file system, EACCES). A
// restarted server serves its targets by their stored ids before it
// registers again; it listens before opening them (a port in use fails
// first), and requests that arrive meanwhile wait for the opening rather
// than being told the target is unknown. Likewise a request for an id this
// server does not serve waits while a first registration is in flight: the
// metadata server places files on a new target as soon as it records it,
// and a client may ask for it before the reply reaches this server.
//
// A target belongs to one file system: at its first registration Run asks
// the metadata server for its file system id (metarpc OpFSID) and records
// it in target.json ("fsid"); at every later start it compares, and a
// target pointed at another file system's metadata server fails to start
// with ErrForeignFS, naming both ids, before it registers anything. Every
// registration carries the id too, and the metadata server refuses (EPERM)
// a target of another file system.
//
// A target directory is served by one process at a time: OpenTarget takes
// an exclusive flock(2) of target.lock (vfs.FS.Lock) and holds it until
// Close, and a second server (or a second --target of the same directory)
// fails at once with an error wrapping vfs.ErrLocked.
//
// Extend (storagerpc OpExtend) makes an object at least a given length
// (the new bytes a hole) and never shortens it: clients keep the objects
// of files with layout.ObjectsSized as long as their share of the file's
// recorded size, so that a shorter object shows as lost data, and a
// concurrent writer's bytes past that length are never cut.
//
// Read buffers are bounded per connection and per server (Config
// ReadBytesPerConn, 64 MiB, and ReadBytesPerServer, 512 MiB; see package
// storagerpc), so clients that never read their responses cannot pin more.
//
// The sidecar holds a 32-byte header (magic "WFTC", format version 1, the
// object's write version, the count of allocated blocks, a CRC32C of the
// header) followed by one 8-byte entry per 4 KiB block: {cur, prev}, two
// CRC32C (Castagnoli) values. A block's CRC covers all 4096 bytes, the bytes
// past the end of the object counted as zeros. The value 0 means "hole":
// a block never written, which must read as zeros. Entries past the end of
// the sidecar are holes, so sparse objects cost nothing.
//
// # Invariants
//
//   - Every block a read returns matches cur or prev of its entry; otherwise
//     the read fails with syscall.EIO (wrapping ErrCorrupt) and logs, at
//     level error, the target, object and offset. Wrong data is never
//     returned (short of a CRC32C collision). ReadSpan (storagerpc
//     OpReadSums) is the one read that does not check: it returns the
//     entries of whole blocks, read under the object's read lock, with the
//     data file's range, whose bytes the caller sends after the lock is let
//     go (a write in between makes them fail the check), and the reader
//     checks; on a mismatch it reads again with Read, which checks here.
//   - When no update is in flight, cur == prev for every entry.
//   - Updates of one object are serialized by a striped lock table (1024
//     RWMutexes hashed by object id): writes and truncates take the lock
//     exclusively, reads and syncs share it. So concurrent writers of
//     neighbouring byte ranges (IO500 ior-hard's interleaved 47,008-byte
//     records) never lose each other's bytes in a read-modify-write of a
//     shared edge block.
//   - No descriptor is held per object: a bounded LRU keeps at most
//     TargetOptions.MaxOpen objects open (2 descriptors each, 256 by
//     default); handles in use are closed when released.
//   - An object with no file on the target is known without a system call:
//     a Bloom filter in memory (presence.go) holds every object that has a
//     file, filled by the scan at OpenTarget (leftovers of an interrupted
//     creation or removal included) and added to before an object's first
//     file is created, so it never calls a present object absent. Removing
//     or opening an object it calls absent touches no file: the removals
//     every unlink queues for stripes a file never had cost nothing. It is
//     made for twice the objects found (at least 2^20), 10 to 20 bits each
//     (a power of two in all: 2 MiB per target at least, at most 256 MiB),
//     and renewed in the background from a listing of the fan-out
//     directories once as many objects were added since, so that churn
//     does not wear it out; creations during the listing go into both.
//   - The write version in the header grows by one with every write and every
//     size-changing truncate; Write returns it.
//   - A truncate costs time in proportion to the data the object has, not
//     to its sizes: it reads only the sidecar's data extents
//     (vfs.NextData, lseek SEEK_DATA on a real disk), and none at all
//     when truncating to 0 (the header counts the allocated blocks). So a
//     truncate of a 1 TiB sparse object holds its lock for a few reads,
//     not for a scan of 2 GiB of entries. Object sizes and offsets are
//     bounded by MaxObjectSize (16 TiB - 4 KiB, ext4's limit) with EFBIG.
//   - Used bytes are allocated blocks times 4 KiB (holes are free), counted
//     from the sidecar headers at startup and kept in memory after. A write
//     that would allocate past TargetOptions.Capacity fails with ENOSPC
//     before anything changes. A real ENOSPC from the disk surfaces as
//     ENOSPC too (that write may have changed some blocks, which still
//     check, see below). After I/O errors or crashes the count can be off by
//     the blocks of the interrupted update; it is an accounting figure, not
//     an integrity one.
//
// # Space, seek and allocated bytes
//
// Allocated returns the header's count of allocated blocks, in bytes: what
// clients report as a file's st_blocks. Server.Copy (copy_file_range)
// writes into an object of one of its targets what it reads from the
// source object: from its own target, or from the server of the source's
// target through the peers Run gives it (a storagerpc client that finds
// servers in the metadata server's target list and calls them as a
// storage server); the RPC handler has checked the client's capabilities
// for both objects first. Server.CopyRow (proto.RowCopier) copies one
// unit of an erasure-coded shard the same way, reading it with its
// version: it writes the destination unit with the client's new tag only
// if the source unit had the version the client found on every shard of
// the source row (else EAGAIN, nothing written), so a copied row's shards
// always come from one code word of the source.
//
// RebuildObject (storagerpc OpRebuild, from metadata servers only; no
// capability) writes a range of an object of one of its targets from
// other servers' objects, read through the same peers: a copy (the first
// source that answers) or an EC shard decoded from K shards of its stripe
// (klauspost/reedsolomon). The first range of an object empties it first,
// so that ranges reading as zeros stay holes; the last sets its length
// and syncs it. Its changes are fenced (below, "Object versions and
// fences"). This is the metadata service's rebuild, storage to
// storage (meta/rebuild.go).
//
// Space (fallocate on one object, proto.SpaceMode) punches, zeroes and
// reserves ranges; Seek finds an object's next data or hole from its
// sidecar: a block is data when its entry is allocated (cur != 0), so
// blocks reserved by SpaceAllocate, whose entries hold the CRC of a zero
// block, count as data and as used space. A punch writes zeros over the
// partial blocks at its edges as a write does, then turns the entries of
// the whole blocks into {hole, old CRC}, punches the data file (a real
// hole where the disk's file system can, zeros otherwise: vfs.Punch),
// then punches the sidecar's entries (holes read as hole entries) and
// writes the header: a kill at any step leaves every block matching cur
// or prev. An allocation counts the holes it fills first and fails with
// ENOSPC before any change past the capacity; it reserves them in the
// data file (vfs.Allocate; the object grows to cover the range) before
// marking them allocated.
//
// # Scrub
//
// Run scrubs every target (scrub.go): one pass every scrub.interval (a
// run-time parameter, a week by default; timed from the last pass's
// start, kept in <target>/scrub.json, {"version": 1, "start", "end"} in
// Unix ns), or when the metadata service asks (StartScrub, storagerpc
// OpScrubStart). A pass walks the fan-out directories, and for every
// object reads its runs of data blocks (holes, per the sidecar, skipped)
// in 1 MiB chunks through Read, which checks every block, each chunk
// after the server's pace (scrub.rate, 50 MiB/s by default, shared by its
// targets: package internal/pace) allows it. Every corrupt object, found
// by the scrub or by any other read (corrupt is the one place that says
// so), goes to the target's corrupt hook: Run's reporter sends it to the
// metadata service at once (metarpc OpScrubReport, with the target's scrub
// state, which also goes every 5 s while it changes), which has it
// rewritten from its file's redundancy; a failed report is sent again
// with the next. A rebuild's start empties the object, and removes one
// whose sidecar or version file is unreadable, so a repair replaces the
// whole object.
//
// # Crash reasoning
//
// A write of [off, off+n) goes, under the object's exclusive lock:
//
//  1. read the entries of the blocks it touches; read and verify the edge
//     blocks it covers only partly, and merge the new bytes into them;
//  2. pwrite the entries as {new CRC, CRC the block on disk matches};
//  3. pwrite the data;
//  4. pwrite the entries as {new, new};
//  5. pwrite the header (version+1, allocated blocks).
//
// A process killed with kill -9 loses nothing that a completed pwrite wrote:
// the page cache belongs to the kernel. So after a kill at any point, each
// block on disk is either its old content or its new content (the data
// pwrite may be partly done), and its entry is either the old {c, c} or
// {new, c}: either way the block matches cur or prev. A kill before step 4
// leaves cur != prev; the next write that replaces such a block whole reads
// it first to learn which CRC the disk really matches, so that a second kill
// cannot leave an entry that matches neither. A truncate down writes the new
// tail block's entry as {new, old}, truncates the data, truncates the
// sidecar, and collapses the tail entry; entries left past the end of the
// data by a kill in between are trimmed when the object is next opened, so
// that growing the object again exposes holes, not stale CRCs. New objects
// get their sidecar before their data file, and Remove deletes the data
// before the sidecar: a data file with bytes never lacks its sidecar.
//
// Power loss is different: the page cache is lost and the disk may have
// persisted any subset of the pages written since the last fsync, in any
// order. Durability is promised only for what Sync acknowledged: Sync fsyncs
// the data file and the sidecar (and, once, the fan-out directory of a new
// object), and the client acknowledges fsync(2) only after Sync. Blocks
// written after the last Sync may after a power loss read back as EIO (their
// data and CRC disagree); they never read back as silently wrong data. So
// that what nobody syncs is not left to the kernel's writeback (30 s), a
// target written to syncs its whole file system (syncfs) every
// FlushInterval, 500 ms (flush.go): README.md's durability contract, "on
// disk within about 1 s".
//
// # Object versions and fences
//
// An object may carry a version file (version.go): a 32-byte header (magic
// "WFTV", format version 1, the unit size in bytes, the fence, a CRC32C of
// the header) and one 16-byte entry {cur, prev} per unit, a unit being
// the object's share of one EC row (the client names its size; an object
// has one unit size, and a request with another fails with EINVAL). A
// unit's version is its tag cur, dirty while cur != prev; entries past the
// file's end are tag 0, clean. ReadRow returns a range of one unit with
// its version, read under the object's lock; WriteRow writes a range of
// one unit and sets its tag to the writer's, and with a condition only if
// the unit's version is the expected one (ErrConflict, EAGAIN, changing
// nothing, otherwise).
//
//   - Every change of a unit's bytes changes its tag: a plain Write (or a
//     zeroing by Space) of a versioned object gives each unit it touches a
//     fresh random tag, and a truncate down gives one to the unit the new
//     end falls in and drops the entries of the units past it.
//   - A write sets its units' entries to {new, old} (dirty) before it
//     touches the sidecar and data, and to {new, new} after the sidecar's
//     header; a truncate marks the units it cuts dirty before the data is
//     cut. So after a kill at any point a unit whose bytes may have
//     changed reads dirty, never clean with a tag of other bytes. The
//     version file is fsynced by Sync with the data and sidecar.
//   - Fence records the issue time of the capability the request carries
//     (meta's clock); from then on Write, WriteRow, Truncate and Extend
//     with a capability issued earlier fail with ErrFenced (EACCES). A
//     fence never moves back. Requests without a capability (servers,
//     in-process callers, whom the handler trusts) are not fenced, and a
//     Fence without one does nothing; a RebuildObject's writes are fenced
//     as of the fence its request names (the metadata service fences the
//     object before it asks), so one still running, or delivered, after
//     the service gave up on it cannot overwrite a repair made since. Remove deletes the version file
//     first, so a new object of the same name never inherits a fence.
//
// # Access control
//
// Storage holds no namespace and no permissions: the metadata server
// decides who may touch a file's data and says so in a capability (package
// capability) that clients attach to Read, Write, Truncate and Sync. The
// RPC handler (storagerpc) checks it, with Config.CapabilityKey, before the
// Server sees the request; Server's methods themselves trust their caller
// (in-process calls and requests the handler let through). Servers (meta,
// storage roles) need no capability; only they may Remove objects.
//
// # Short-circuit local reads
//
// With Config.LocalSocket (`weft storage --local-socket PATH`), Run also
// listens on a Unix socket (local.go; SOCK_SEQPACKET, mode 0600) and
// advertises it with a random per-process id (storagerpc OpLocalInfo). It
// serves only root and the server's own user (SO_PEERCRED), who may read
// the target directories anyway; for each request carrying a capability
// granting read on an object (storagerpc.Handler.AuthorizeLocal) it
// answers the object's data file and sidecar, opened O_RDONLY, as
// descriptors (SCM_RIGHTS). The client (package storage/localread)
// preads them without any lock here and checks every block against the
// sidecar (SidecarEntryOff, CheckSidecarHeader: the format above);
// whatever does not check it reads again with Read, which locks, checks
// and reports. Such reads are not counted in the target's I/O.
//
// # Errors
//
// Every error matches a syscall.Errno with errors.Is: ENOSPC (full), EIO
// (corruption, disk errors), EACCES (refused by the handler: no or bad
// capability, a client removing objects), EFBIG (offset past MaxObjectSize), ESTALE (a
// target this server does not serve, wrapping ErrUnknownTarget), ETIMEDOUT
// or EINTR (ctx ended before the operation started). A missing object is not
// an error: it reads as empty, and Remove and Sync of it succeed.
//
// Run fetches the run-time parameters from the metadata service every 10 s
// (params.go): log.level.storage sets Config.LogLevel (rebuild.rate is the
// metadata service's, which paces the rebuild). Requests that name a job are counted in Config.Jobs
// (package jobstats, through storagerpc).
package storage
