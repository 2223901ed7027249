// Package store is where the metadata service keeps its state: a small
// ordered key/value interface (point get, range scan, atomic batch, sync)
// with a pebble implementation for servers and an in-memory one for unit
// tests. The meta package's state machine is the only writer; it never
// depends on which implementation it runs on.
//
// # Key schema
//
// Every key starts with a one-byte kind; integers are big-endian so byte
// order is numeric order. Values are encoded by package meta (each starts
// with a format version byte).
//
//	c <name>                        counters: next_ino (allocator high-water mark),
//	                                inodes (inodes in use), next_target, format,
//	                                applied_index (log index of the last batch)
//	i <ino:8>                       inode record: attributes, layout, symlink target,
//	                                parent (directories), written flag
//	d <parent:8> <name>             directory entry → child ino + file type
//	x <ino:8> <name>                extended attribute value
//	o <ino:8>                       orphan: inode with nlink 0 still kept (value: time)
//	g <target:4> <ino:8> <stripe:4> object-GC queue: an object to remove from a target
//	t <id:4>                        target registry: id → uuid, address
//	u <uuid>                        target registry: uuid → id
//
// A directory listing is a prefix scan of "d"+parent, continued after a name
// by starting at "d"+parent+name+"\x00": listing is O(entries returned) at
// any directory size.
//
// # Invariants (kept by package meta, relied on here)
//
//   - Every directory entry names an existing inode.
//   - Every inode with nlink 0 has an orphan key; no other inode has one.
//   - Every stored inode number is below the next_ino counter, so numbers are
//     never reused, also across restarts.
//   - A batch is applied whole or not at all; Commit(false) is visible to
//     readers at once but durable only after a later Sync or Commit(true).
package store
