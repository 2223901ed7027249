// Package client is the weft client library: it turns file operations into
// RPCs to the metadata service and the storage targets. The FUSE adapter
// (package fuse) is a thin layer over it.
//
// # Data path
//
// The client computes data placement itself from the file's layout
// (layout.Extents): a read or write is cut into stripe-unit pieces and each
// piece goes straight to the storage target that holds its object, pieces on
// different targets concurrently. The metadata server is never on the data
// path; it is told about data only when a file is flushed or synced
// (MetaService.WriteDone records the size and mtime).
//
// # Quotas
//
// The metadata service enforces quotas (package meta, docs/quotas.md): a
// create over an inode limit fails with EDQUOT, and so does a WriteDone
// whose size would take an account over a byte limit, which the client
// reports at flush, fsync or close. After such a refusal, writes that
// would grow the file past its recorded size fail with EDQUOT at once
// (quota.go) until a WriteDone succeeds again.
//
// # Mirrored files
//
// A mirrored layout (layout.Mirror) has several copies of every stripe
// object on distinct servers (mirror.go). Writes, truncates and syncs go to
// every copy not marked stale; one succeeds when at least one copy took
// it and every copy that failed (or did not answer within
// Config.MirrorGrace of another) was marked stale on the metadata server
// (proto.StaleMarker) first, so an acknowledged write is on every copy not
// marked stale. Reads go to one fresh copy, spread by stripe unit, and fail
// over to the next; stale copies are never read. Every open takes the
// server's stale marks. Resync repairs stale copies (copy from a fresh
// copy, truncate, sync, clear the marks); the server refuses to clear them
// while the file is open for writing or if it changed during the repair.
//
// # Erasure-coded files and lost objects
//
// EC files (ec.go) are written row by row (ECData stripe units of one
// stripe, contiguous in the file) under a per-row lock of this client:
// whole rows are encoded from the write-behind buffer itself (no copy),
// partial ones read, merge and re-encode; reads reconstruct stale or
// failing shards. A read of a row with a data shard stale or on a target
// that failed recently reads ECData other shards of it once and decodes
// the missing ones (ecReadDegradedRow); read-ahead fetches EC files a
// row at a time (rows up to 4 MiB) so that a degraded sequential read
// goes that way.
//
// Object versions make partial rows safe across mounts and crashes (the
// protocol, with storage's proto.RowVersioner):
//
//   - Every shard object keeps a version per row: a tag, and whether a
//     write setting it was interrupted (dirty). Storage changes a row's tag
//     whenever its bytes change (a versioned write sets the writer's tag;
//     a plain write or truncate a fresh random one).
//   - A row update picks a new random tag and writes every fresh shard of
//     the row with it: changed data bytes, all parity, the tag alone on
//     unchanged data shards. A partial row is first read with each shard's
//     version, and each write is conditional on it; a conflict (EAGAIN, a
//     write by another mount in between) redoes the whole update from a
//     fresh read after a growing random wait.
//   - Invariant: a row whose shards all hold one clean tag was last
//     written, on every shard, by one update conditioned on what it read,
//     so its parity encodes its data. Reconstruction (ecReconstructRow)
//     decodes only shards of one clean version, at least ECData of them,
//     or fails with EIO: never from mismatched shards.
//   - A row left mixed (a writer died between its shard writes) reads
//     right from its data shards; its next update, or resync
//     (ecRepairRows), re-encodes it from its data.
//   - Resync fences the object it rewrites (mirror copies and EC shards):
//     the storage server then refuses writes whose capability was issued
//     before the repair's, so a write delayed in a frozen server cannot
//     overwrite the repair. Rebuilt EC rows take the version they were
//     decoded at.
//   - A row is written in one request per shard: EC stripe sizes above
//     storagerpc.MaxIO (16 MiB) are not supported by versioned writes. New files' objects
//
// are kept as long as their share of the recorded size (sized.go), so a
// shorter object is lost data: read from redundancy, or EIO.
//
// # Consistency semantics
//
//   - Close-to-open. Open asks the metadata server for fresh attributes
//     (OpenCached, for a read-only open of an empty file, or of a small
//     one whose copy its lookup or a read-ahead brought, takes them from
//     the lease cache, which a change elsewhere breaks before it returns:
//     cached.go, lookupcopy.go, ahead.go).
//     After a writer's close (Flush) or fsync returned success, a client
//     that opens the file afterwards sees all the data and the right size.
//     Clients that keep a file open while another writes it are not
//     coherent with each other beyond what the storage targets return
//     (another client's unsent bytes are not there yet): reads always go to
//     the targets (there is no client data cache besides the write-behind
//     buffers and read-ahead), but the size this client clamps reads to is
//     the one it last heard from the metadata server, plus its own writes.
//   - Write-behind. Write returns once the bytes are copied into a bounded
//     buffer (per file up to 16 MiB, all files together up to
//     Config.CacheLimit, counting both unsent and in-flight bytes). Writes
//     are coalesced per inode (coalesce.go): bytes contiguous with or
//     overlapping this client's unsent bytes of the file — from any handle
//     of the inode on this client — are merged into one extent, sent as one
//     RPC per chunk (a power of two up to 1 MiB dividing the stripe unit)
//     when the chunk is complete, when the extent cannot stay open, before
//     a read, flush, fsync or truncate that must see it, and otherwise at
//     most a few milliseconds after it was last written (30 ms after it was
//     opened at the latest; for an EC file, whose chunk is a row, 25 ms and
//     250 ms: a partial row costs a read-modify-write). Only bytes this client was given are sent;
//     gaps are never filled from storage, so disjoint writers on other
//     mounts are never clobbered. Overlapping writes are sent in order (a
//     write that overlaps one in flight waits for it); reads through this
//     client first send the unsent bytes they overlap and wait for
//     in-flight writes they overlap, so a client reads its own writes.
//   - Acknowledgement. Data counts as acknowledged only when Flush (close)
//     or Fsync returns nil. The first failed background write is latched and
//     returned by the next Write, Flush or Fsync, so close() reports it; it is
//     reported once. Fsync additionally makes every object written since the
//     previous fsync durable on its target before recording the size.
//   - Size. While a file is open here, its size as reported to the caller is
//     max(size on the metadata server, highest byte written through this
//     client) — no metadata round trip per write. The size a Flush or
//     Fsync records (WriteDone) covers only writes that reached storage,
//     never one of another handle still on its way. Truncate sends the unsent
//     bytes and waits for the writes in flight, truncates every object to its share of the new size,
//     then records the size on the metadata server.
//   - Holes. Bytes within the file size that no object holds read as zeros.
//   - Metadata cache (Config.Leases; leases.go, docs/caching.md). The
//     client polls the metadata leader for lease invalidations and, while
//     its last answered poll was sent less than 3/4 of the lease term ago
//     (and less than the answer's Valid: a replicated leader's lease on
//     its leadership),
//     answers Lookup (found or not) and GetAttr from what it read (or
//     created, or listed ahead of lookups that kept missing:
//     statahead.go) before; the leader tells it of every change made elsewhere
//     before acknowledging that change (OnLeaseInval then drops the
//     kernel's copies too). A change made here drops what it affects before
//     it is sent and again after it returned (changing), so reads under way
//     never cache what it replaced; an invalidation or change that arrives
//     while a read is under way keeps that read out of the cache. Open
//     asks the leader (close-to-open), except a read-only open of an
//     empty file held under the lease, or of a small file whose copy a
//     lookup brought (OpenCached, cached.go; lookupcopy.go: lookups ask
//     for copies while opens follow them), or a read-ahead of the files
//     numbered after one opened (ahead.go): its handle
//     is local, and is pinned (counted by the leader) before an
//     invalidation of its inode is acknowledged and before this client
//     removes or replaces a name.
//   - Times. A file's mtime is the time of its last write (this client's
//     clock when the write was accepted), reported with WriteDone, or of
//     the last explicit set: a close long after the last write does not
//     move it. Before a SetAttr that sets mtime (utimensat, futimens,
//     utime) the client sends, waits for and records this mount's accepted
//     writes to the file (settle), so writes buffered before the set can
//     never move the time it set; stat then shows exactly that time on
//     every mount. WriteDones of one file are sent one at a time, so the
//     settle also waits for one already out (another handle's flush),
//     which could otherwise be applied after the set.
//
// # Space calls and allocation
//
// File.Allocate (fallocate) sends one StorageService.Space per object for
// its share of the range (layout.ObjectOffset), concurrently, ordered
// after this client's accepted writes as a truncate is: to every fresh
// copy of a mirrored stripe (failed copies marked stale, as for writes);
// for an EC file to every shard of the whole rows in the range, the
// partial rows at its edges being punched on their data shards and their
// parity recomputed (ecSpace). A range that grows the file or changes
// bytes counts as a write (size and mtime recorded at the next flush).
// File.Lseek asks every data column (one fresh copy, or the EC data
// shard) for its next data or hole (StorageService.Seek) and answers the
// nearest in file offsets. At every WriteDone the client reports the sum
// of what each fresh object that may hold bytes of the file holds, copies
// and parity included, as the file's blocks (proto.Attr.Blocks,
// st_blocks): what the file occupies. An object this client wrote since
// it last changed the file's objects otherwise counts what its last write
// answered (proto.CountingWriter; allocated.go); any other it asks
// (StorageService.Allocated); if a target does not answer, the count is
// left as it was. A truncate, fallocate, copy into the file or resync
// forgets the counts, so the next flush asks again.
// Client.CopyRange (copy_file_range) cuts the range where a stripe unit of
// either file ends and sends each piece as one StorageService.Copy to the
// destination object's server (each fresh copy of a mirrored one), which
// reads the source object itself. Between EC files of one geometry whole
// rows go shard by shard, parity included, as proto.RowCopier.CopyRow to
// each destination shard's server, at the one version all the source
// row's shards hold and with one new tag per destination row; partial rows
// at the ends (and rows that cannot be copied so) go through the client
// (ecopy.go). Other EC cases get EOPNOTSUPP, and the kernel copies through
// the mount.
//
// # Locks and O_APPEND
//
// When the metadata service keeps locks (proto.LockService; metarpc and
// meta.Server do), File.Lock and File.LockWait take flock, POSIX and OFD
// locks there, for the whole cluster (locks.go; package meta, "Locks").
// LockWait loops: try Lock, and on EAGAIN ask the server to answer once
// the lock may be free (bounded), until granted or until ctx ends (the
// FUSE interrupt of a signal: EINTR); the server never grants a lock to a
// waiter on its own, so an interrupted waiter holds nothing. At most 32
// waits of one client are at the server at once (each holds a request
// slot of the connection); more waiters poll every 100 ms. A lock is a
// coherence point, as with NFS: before an unlock the owner's writes are
// flushed (sent and recorded with WriteDone), and after a lock is granted
// the client drops its read-ahead and refreshes the size from the server,
// so a lock holder reads what the previous holder wrote.
//
// The client keeps a book of what its lock owners hold (exact ranges), so
// that a close sends unlocks only when there is something to unlock:
// FlushLocks (the kernel's FLUSH at every close(2)) releases the closing
// process's POSIX locks on the file; a File's release releases the locks
// of every owner that locked through it and through no other File still
// open here (the flock and OFD locks of the open file description). After
// a metadata server restart, once the session is re-registered with its
// handles, every lock in the book is reclaimed (LockReclaim) within the
// server's grace period; one that cannot be is logged as lost.
//
// File.Append writes at the true end of the file across mounts: the
// metadata server reserves the bytes after every range it reserved before
// and the client writes them at the reserved offset through the
// write-behind buffer like any write (WriteDone records them). After a
// server restart the client names how far it wrote in each open file
// (ReclaimAppend), and appends wait for the grace period to end. Without a lock service (test fakes), ClusterLocks
// is false and the FUSE adapter leaves O_APPEND to the kernel.
//
// # Capabilities
//
// Storage servers serve a client's request only with a capability (package
// capability) from the metadata server granting it access to the file's
// objects. Open and CreateOpen take the access mode (OpenAccess: the
// open(2) mode, O_TRUNC counting as write, execve's open as exec); the metadata server checks it
// against the caller's credentials and returns a capability with exactly
// those rights. The inode's shared state keeps one capability for reading
// and one for writing (the same one after a read-write open): handles of
// different modes add their rights, so the inode is accessed with the union.
// Every storage request (reads, read-ahead, write-behind, truncate, sync)
// carries the one for the right it needs, in its ctx
// (proto.WithCapability). Capabilities are renewed in the background
// (MetaService.Capability, as the user who opened) when 2/3 of their
// lifetime has passed, counted by this client's clock from when they
// arrived, for as long as a handle stays open; a failed renewal is retried
// after a tenth of the lifetime. A request that storage refuses with
// EACCES (a capability that expired while the client was suspended, or a
// right no handle was granted) renews once and is retried once. A
// truncate by path (no handle here) first asks for a write capability,
// which is where its permission check happens.
//
// # Metadata round trips
//
// When the metadata service offers the combined operations
// (metarpc.Extended; the server does), CreateOpen creates and opens a file
// in one call, and CreateOpen, UnlinkAt and RmdirAt also return the parent
// directory's new attributes. Releases of open handles are sent in the
// background, batched (ReleaseMany, after waiting up to 2 ms for others to
// join): File.Release returns at once and the server drops the open count a
// moment after the close, never before it, so a file unlinked while open
// here stays until its last close. Unlink and Rename first send the queued
// releases, so a file closed just before is deleted by the unlink itself
// rather than left as an orphan; Close waits for queued releases. A service without them (ENOSYS) gets the
// plain calls.
//
// # Session
//
// When the metadata service is a metarpc.Client, the client keeps a session
// with the server (session.go): it picks a random session id, registers it
// at start, renews it every third of the lease the server answers, and ends
// it in Close. Every open handle belongs to the session, and the client
// keeps the list of what it holds. If the server says it does not know the
// session (ESTALE, on a renewal or on a handle request), the client
// re-registers it with that list: after a server restart, within its grace
// period, the handles are taken back and nothing is lost. If the server
// refuses (the lease expired: the process was stopped or cut off for longer
// than the lease, and the server dropped its handles), the client starts a
// new session and logs it at error level; every File opened in the old one
// is stale from then on: reads, writes, flush, fsync and ftruncate through
// it fail with ESTALE (never reaching a file the server may have reclaimed),
// and its release sends nothing. New opens work in the new session. A
// handle is not used at all while the session has gone unconfirmed for
// longer than its lease (the process was stopped, or cut off from the
// metadata server): the client renews first, and fails the call with EIO
// if that does not work either, as an NFSv4 client stops using state
// whose lease ran out.
//
// # Credentials
//
// The metadata server checks every call against the credentials in its
// ctx (proto.WithCred); the caller of a Client method puts the system
// call's caller there (the FUSE adapter does), and every metadata call made
// for that method keeps them (rpcCtx keeps ctx's values), including the
// WriteDone of Flush, Fsync and Release. Work the client does on its own
// has no caller: the batched background releases go out with the mount
// process's own credentials (metarpc.Client's default), which the server
// does not need, since a release only ever drops a handle of the client's
// own session. Writes and read-ahead go to storage, not to the metadata
// server.
//
// # Job ids
//
// A ctx may name the job a call is made for (proto.WithJob; the FUSE
// adapter takes it from the calling process with a JobIDSource, jobid.go):
// metadata and storage requests made for the call carry it, and servers
// count them per job. Background work carries the job of the latest read
// or write of the file through this client (inodeState.job): write-behind
// sends and read-ahead fetches.
//
// # Run-time parameters
//
// With every session renewal the client fetches the run-time parameters
// from the metadata service (params.go, docs/params.md) and applies
// client.read_ahead (the read-ahead window, instead of the layout's),
// client.write_behind (the budget of its write-behind and read-ahead
// buffers, instead of Config.CacheLimit), client.rpcs_in_flight (storage
// requests outstanding per server, storagerpc.Client.SetInflightLimit)
// and log.level.client (Config.LogLevel). client.checksums is read-only:
// checksums are the storage servers'.
//
// # Online restripe
//
// Migrate (migrate.go, `weft migrate`) gives a file with data a new
// layout: the metadata service places it for a new generation
// (proto.Migrator), the client copies the file into the new objects
// through its own read and write paths (the only path that writes any
// layout, EC included, from any other), syncs them, and the service swaps
// the layout if the file was not written meanwhile (else EBUSY, wrapped
// with ErrMigrateBusy, and the new objects are removed). The copy renews
// its ticket when half its life has passed (proto.Migrator.MigrateRenew),
// so it may take longer than the ticket's life; a ticket that ended fails
// the migrate (ETIMEDOUT) and its objects are removed.
//
// A handle opened before the swap follows the file (follow.go): when this
// client hears of the new generation (a stat, an open, a capability
// renewal: inodeState.moved) or a read finds its objects gone after the
// moved-object grace (errMoved, sized.go), the handle asks the service
// (proto.MigrateFollower) for the current layout and a capability, naming
// its generation, moves to the inode state of the new generation and
// reads again once. The service answers only for a generation a restripe
// replaced, so a file that reuses the inode number stays ESTALE. Reads
// never see zeros, EIO or ESTALE from a migration.
//
// # Failures
//
// Every RPC runs under Config.Timeout (default 30 s) and is detached from the
// caller's cancellation (FUSE interrupts must not leave an operation half
// done). A metadata mutation whose connection broke is sent again until the
// timeout (metarpc; the server recognizes a request it already applied), so
// a server that comes back or a failover within the timeout is a pause,
// not an error. An unreachable server therefore yields ETIMEDOUT or EIO to the
// caller, never a hang; the transport pool reconnects on its own when the
// server returns. Errors from the services are syscall.Errno values (wrapped
// with context); Errno maps any error to the errno for the kernel.
//
// # Short-circuit local reads
//
// New wraps the storage client in a localread.Reader unless
// Config.NoLocalReads: objects of storage servers on this host are read
// from their files, every block checked against its sidecar, and anything
// that does not check is read over RPC (package storage/localread). When
// a file's last handle is released, the Reader closes the descriptors of
// its objects (Forget).
//
// The client holds no file descriptor per file, except the Reader's (at
// most 1,024 objects, two each).
package client
