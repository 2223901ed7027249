// Package store is where the metadata service keeps its state: a small
// ordered key/value interface (point get, range scan, atomic batch, sync,
// and views: reads of one state that later batches do not change) with a
// pebble implementation for servers and an in-memory one for unit
// tests. The meta package's state machine is the only writer; it never
// depends on which implementation it runs on.
//
// # Key schema
//
// Beside the database (not in it) lives the durable mark, the file
// WEFT-MARK (Mark, MarkFile).
//
// Every key starts with a one-byte kind; integers are big-endian so byte
// order is numeric order. Values are encoded by package meta (each starts
// with a format version byte).
//
//	c <name>                        counters: next_ino (allocator high-water mark),
//	                                inodes (inodes in use), next_target, format,
//	                                applied (log index of the last batch: on a single
//	                                server the batches committed); and fsid (a uuid string)
//	i <ino:8>                       inode record: attributes, layout, symlink target,
//	                                parent (directories), written flag, project,
//	                                generations restripes replaced (meta/inode.go)
//	d <parent:8> <name>             directory entry → child ino + file type
//	x <ino:8> <name>                extended attribute value
//	o <ino:8>                       orphan: inode with nlink 0 still kept (value: time)
//	g <target:4> <ino:8> <stripe:4> [<gen:8>]
//	                                object-GC queue: an object to remove from a target
//	                                (gen only when not 0)
//	t <id:4>                        target registry: id → uuid, address
//	u <uuid>                        target registry: uuid → id
//	s <session:16> <n:2> <name:n> <slot:8>
//	                                remembered reply of a client request (request
//	                                dedupe): its seq, errno, attributes, parent's
//	q <kind:1> <id:4>               quota account of a user (1), group (2) or project (3):
//	                                inodes and bytes in use, and their limits
//	p <name>                        run-time parameter set with --persist: its value
//	l <ino:8> <gen:8> <stripe:4> <target:4>
//	                                lost object: found corrupt by the scrub with nothing
//	                                to repair it from (value: version, time reported)
//	f <ino:8>                       a small file's bytes, kept beside its objects so that
//	                                an open can answer them (value: version, crc32c,
//	                                bytes; meta/copies.go)
//
// A directory listing is a prefix scan of "d"+parent, continued after a name
// by starting at "d"+parent+name+"\x00": listing is O(entries returned) at
// any directory size.
//
// The pebble store writes data blocks of 32 KiB, not pebble's 4 KiB: a
// small file's copy ("f") is a few KiB, and copies of files made together
// (neighbouring inode numbers) then share a block, so reading small files
// cold in the order they were written costs a disk read per several
// files, not one each.
//
// # Integrity
//
// The pebble store never opens damaged data as if it were whole
// (OpenPebble): pebble's log goes to slog (errors at error level, the rest
// at debug); the database is kept at pebble.FormatNewest, whose WAL
// records carry the offset synced so far, so a damaged record followed by
// synced ones fails the open with ErrCorrupt instead of ending the replay
// there; and every table is read through with its checksums verified
// (CheckLevels) before the store is used. That check reads the whole
// database: 4.1 s for 1M entries of 120-byte values (one run of
// BenchmarkOpenCheck on the 2-core CI machine), about 4 s per million
// inodes at start. Corruption found later (a read, a compaction) fails
// the store: that call and every later one return an error wrapping
// ErrCorrupt, logged at error, and pebble's Fatalf is logged before it
// panics. What pebble cannot see (a WAL cut short or damaged in its last
// 32 KiB, a restored older copy) package meta detects with its durable
// mark.
//
// # Durability: with a WAL, or without one
//
// By default the pebble store has a write-ahead log: Commit(false) is a
// WAL write (not synced) and a memtable insert, durable after a later
// Sync or Commit(true), which sync the WAL. A single metadata server runs
// so: its store is its own record, and its durable mark (Mark) counts
// what a synced commit made durable.
//
// With PebbleOptions.NoWAL (pebble's DisableWAL; package meta opens a
// raft member's store so) a commit is a memtable insert only, and
// durable once its memtable is flushed to a table: when the memtable
// fills, or at Flush, Sync, Commit(true), Checkpoint and Close, which all
// flush first. Flushes write whole memtables in commit order, so after a
// crash the store is exactly its last flushed state, a prefix of its
// batches with every batch whole: the applied counter that each batch
// of package meta carries is never ahead of what the store holds. The
// rest is caught up from the raft log, which holds every entry. Nothing
// here takes the missing tail for damage: there is no WAL to find cut
// short, and replicas keep no durable mark. A WAL that an earlier open
// with one left is replayed at open, then flushed.
//
// # Checkpoints and replacement (replicas' snapshots)
//
// The pebble store is a Checkpointer: Checkpoint writes a consistent copy
// of every committed batch into a new directory (pebble's checkpoint:
// tables hard-linked, the WAL flushed and copied; without a WAL the
// memtable flushed first), which package
// meta/raftlog seals and streams to a replica that fell behind; Replace
// makes such a copy the store's whole content, atomically. It copies the
// checkpoint (tables linked, as pebble never changes a table, other files
// copied and synced) into dir.tmp, renames that to dir.new (the commit
// point), closes the database, renames dir to dir.old and dir.new to dir,
// opens and checks the new database and removes dir.old. OpenPebble first
// finishes a replacement that reached dir.new and removes a dir.tmp, so a
// crash at any point leaves the old store or the new one. Readers and
// writers hold a shared lock on the database, Replace an exclusive one; a
// batch made before a Replace is refused at Commit. A store that had
// failed (ErrCorrupt) works again after a Replace. The durable mark is not
// carried over (replicas do not use it).
//
// # Invariants (kept by package meta, relied on here)
//
//   - Every directory entry names an existing inode.
//   - Every inode with nlink 0 has an orphan key; no other inode has one.
//   - Every stored inode number is below the next_ino counter, so numbers are
//     never reused, also across restarts.
//   - A batch is applied whole or not at all; Commit(false) is visible to
//     readers at once but durable only after a later Sync or Commit(true)
//     (or a Checkpoint, or, without a WAL, any flush: see Durability).
package store
