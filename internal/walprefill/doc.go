// Package walprefill makes a pebble database's new write-ahead log files
// as cheap to sync as recycled ones, from their first record.
//
// Why: a log that is synced after every commit group (the raft log of a
// metadata member, the store of a single metadata server) pays for each
// fdatasync by how the file changed. Appending past the end of a file
// changes its size (and, in a range pebble preallocated with fallocate's
// KEEP_SIZE, turns unwritten extents into written ones), so each sync also
// commits the file system's journal. Overwriting bytes the file already
// has changes no metadata. pebble knows this: it reuses the log files of
// flushed memtables ("recycling log files is an important performance
// optimization"), but a database has none to reuse when it opens and
// until its first memtable is flushed, which for a metadata member under
// load is minutes, and again after every restart. On this project's test
// machine a 300-byte write plus fdatasync took 162-184 µs and 63-73 µs of
// CPU appending, 126-132 µs and 44-47 µs of CPU overwriting (a C program,
// docs/performance.md "New log files written before use").
//
// What: FS wraps a vfs.FS; Create of a write-ahead log file (pebble's
// "pebble-wal" write category) writes the file full of zeros up to a size
// and syncs it before pebble gets it, so pebble's records overwrite bytes
// the file already has. Every other call goes to the wrapped FS.
//
// Invariants:
//   - A prefilled file reads as pebble's own preallocated or recycled
//     ones do after its last record: zeros, which pebble's log reader
//     takes as the log's end (a zeroed chunk with no valid record after
//     it). A log closed cleanly ends with pebble's EOF trailer before the
//     zeros. So replay, and its detection of a damaged record followed by
//     synced ones, are unchanged.
//   - The zeros are written with WriteAt, so the file's offset stays at 0
//     for pebble's sequential writes, and synced before Create returns: a
//     crash leaves either no file, a file pebble has not written (all
//     zeros: an empty log), or pebble's records followed by zeros.
//   - A Create that cannot prefill (a full disk) fails and removes the
//     file: pebble reports the error as it would its own failed Create.
//   - Only new log files are written; pebble's recycled files (through
//     ReuseForWrite) are already full, and tables, manifests and the rest
//     pass through untouched.
package walprefill
