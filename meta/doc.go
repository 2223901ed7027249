// Package meta is weft's metadata service: the namespace (directories,
// inodes, symlinks, xattrs, file layouts) and the registry of storage
// targets, kept in a store (package meta/store, pebble on servers) and
// served over the transport by package meta/metarpc.
//
// # Commands and the state machine
//
// Every mutation is a Command applied by a deterministic state machine
// (sm.go): one command becomes one atomic store batch, or an error and no
// change. Everything that is not a function of the current state is decided
// before apply by the proposer and carried in the command:
//
//   - new inode numbers, from an allocator that starts at the persisted
//     high-water mark (counter next_ino, raised by every batch that uses a
//     number) and only grows, so numbers are never reused, even across
//     restarts or after failed commands;
//   - the clock (Command.Now) for every time stamp;
//   - the caller's credentials (Command.Cred) and, from them, the owner of
//     new inodes;
//   - placement: the proposer ranks the up, non-full targets (weighted by
//     free space over recent placements) into Command.Candidates, and apply
//     takes the first StripeCount of them for the layout policy it finds at
//     apply time (stripe count -1 or more than there are: all). An empty
//     list fails with Command.PlaceErr: EIO when no target is up, ENOSPC
//     when all are full. For a protected layout (mirror N) each stripe
//     takes Width() candidates of distinct failure domains
//     (Command.Domains: the storage server, or its --domain), as many
//     stripes as fit; none fitting fails with ENOSPC, as does a protected
//     directory default that the domains up cannot satisfy.
//   - every file placed gets layout.ObjectsSized: its clients keep its
//     objects as long as their share of the size recorded here (package
//     client, sized.go), so a shorter object is lost data.
//   - stale copies: OpStale marks slots of a mirrored file stale (a client
//     whose write missed a copy, before acknowledging it) or clears them
//     (a repair; refused while the file is open for writing, and by apply
//     if its mtime changed since the repair began). Marking the last
//     readable copy of a stripe is refused with EIO.
//
// Apply validates against the state (ENOENT, EEXIST, ENOTEMPTY, ENOTDIR,
// EISDIR, EINVAL for moving a directory into its own subtree, ENAMETOOLONG,
// EMLINK, EPERM for hard links to directories, EBUSY for restriping a file
// with data) and only then writes. Commands have a versioned binary encoding
// (Command.Encode, DecodeCommand; fuzz-tested) that is the future raft log
// entry format.
//
// With raft every member applies every entry, so the apply path is kept
// lean: keys and values are built in scratch buffers the batch copies,
// a command's transaction reuses the previous one's maps, and directory
// inodes are cached as committed (stateMachine.dirs: a create reads its
// parent without a store read; commands get copies, since they change
// inodes in place and may fail; TestDirCacheMatchesStore). The state
// machine is the store's only writer, which keeps the cache exact. The
// server's reads (Open, GetAttr, an unlink's look at its victim) take
// inodes from the same caches (stateMachine.cachedInode: a copy, under a
// read lock that the applier's cache updates take), before the store.
//
// # Group commit
//
// The commit path is a seam (log.go, commitLog): the Server methods
// propose commands; a log orders them, makes them durable and applies them
// in order through the state machine, each with its log index, which the
// state machine records (counter applied_index) in the same batch as the
// command's changes. The single server's log is the group commit below,
// its index a local counter; the replicated log is raft's (below, "How
// raft slots in"), its index the raft entry index.
//
// Proposed commands wait in one ordered list; one proposer at a time is
// the leader. It takes the waiting commands (up to Options.MaxGroup, its
// own first) as a group, applies each as its own unsynced batch (so the
// next command sees it at once) except the last, which is committed synced
// and thereby makes the whole group durable with one WAL sync (a separate
// store.Sync follows only if the last command wrote nothing). Only then
// does any of them get its reply; the leader then hands the lead to the
// first command that arrived meanwhile. An acknowledged change is
// therefore durable, yet concurrent clients share one fsync: creates/s
// scale with callers (see BenchmarkCreate), and a lone caller applies and
// syncs on its own goroutine without a hand-off. Read-only calls (Lookup,
// GetAttr, ReadDir, GetXattr, ListXattr, Readlink, StatFS, Targets) read
// the store directly, without a command; they may observe a change of the
// group being synced a moment before it is acknowledged.
//
// # Allocated blocks
//
// An inode's Attr.Blocks (st_blocks) is what its objects hold on their
// targets as the last WriteDone reported it (the client counts it at
// flush and fsync); the server cannot count it itself, the storage being
// off its path. A size change caps it at the blocks the new size can hold
// (0 for 0). Inode records before format version 3 read their size in
// blocks until their next WriteDone.
//
// # Callers and permissions
//
// Every Server method first decides who the request acts for (access.go):
// a request whose ctx has no transport.Peer is in-process and trusted (it
// acts as the proto.Cred in ctx, or, with none, as root with no checks at
// all); a peer that did not authenticate (RoleNone) is refused with EACCES
// unless Options.AllowUnauthenticated; a client peer must come from
// Options.Access.ClientNetworks (if set) and carry credentials, and its
// uid 0 becomes SquashUid/SquashGid under RootSquash (unless its network
// is in RootSquashExempt); server peers (meta, storage) are never squashed.
// The metarpc handler puts the credentials and the session id from each
// request's header into ctx (proto.WithCred, proto.WithSession).
//
// Permissions are checked as Linux (ext4) checks them (enforce.go; the
// rules are in docs/security.md, "Permissions"). Checks that depend on
// state a concurrent command could change run at apply time against
// Command.Cred (a nil Cred: trusted, nothing checked); read-only calls
// (Lookup, ReadDir, GetXattr, ListXattr) check at read time. The proposer
// adds what only it knows: whether the caller's session holds an open
// handle on the inode (Command.Flags of SetAttr and WriteDone), which
// stands in for write permission (ftruncate; writes acknowledged after a
// permitted open). New inodes are owned by the caller's uid and gid; the
// uid and gid fields of a request are used only from a trusted caller
// without credentials. The open-mode check of Open and CreateOpen is the
// capability work's, not done here.
//
// # Combined operations
//
// Besides proto.MetaService, Server offers operations that save round
// trips (metarpc.Extended): CreateOpen creates a file and counts an open
// handle on it in one call (the new inode number is counted before the
// command is applied, so the file cannot be reclaimed in between);
// CreateOpen, UnlinkAt and RmdirAt return the parent directory's attributes
// after the change, which a client uses to answer the GETATTR the kernel
// sends after every change in a directory; ReleaseMany drops many handles.
//
// # Access checks and capabilities
//
// Open, CreateOpen and Capability take the access the caller wants
// (proto.Access: read, write or both; or exec, which execve asks for and
// which needs execute permission and grants read) and check it with permitted against
// the inode's mode and the caller's credentials (proto.CredFrom; none is
// an in-process caller, root), failing with EACCES; a file CreateOpen
// creates is opened whatever its mode, as open(2) with O_CREAT does. For a
// regular file they return a capability (package capability) signed with
// Options.CapabilityKey, the key the storage servers share: it grants
// exactly the access asked for on all the inode's objects, from the
// server's now until now + Options.CapabilityLifetime (default 10 min),
// bound to the client's certificate name when the request came from an
// authenticated client. Capability (OpCapability) issues one without
// opening: clients renew long-open files' capabilities with it and take
// one to truncate by path. Without a key no capabilities are issued (nil).
// The lifetime bounds how long a client keeps data access after a chmod,
// and how long a capability that leaked stays useful.
//
// # Open files, orphans, reclaim and object GC
//
// Open and Release keep an in-memory open count per inode, and per
// session: a session is the peer's certificate name with the session id
// of the request header (in-process callers: the id in ctx, if any). A
// Release, or ReleaseMany, drops only a handle its own session holds; a
// release of a handle the session does not hold (another session's) is a
// successful no-op (see "Sessions and leases" for unknown sessions). An
// Unlink in the grace period after a restart never reclaims inline. A
// command that drops an inode's nlink to 0 marks it an orphan in the same
// batch, unless it deletes the inode in that batch: an Unlink of a file's
// last link that nobody has open, and that no other live session holds a
// lease on or has an unacknowledged invalidation of, reclaims it in the
// same command (never marked): the proposer checks the open count and,
// until the command is applied, makes Open of that inode fail with ENOENT.
// Such a session may have opened the file from its cache without asking
// (a read-only open of a file every class may read that is empty or whose
// copy LookupCopy answered, client.OpenCached): the file stays an orphan through the unlink's
// breaks, and that session pins such opens (PinOpens, pins.go: counted as
// Open counts, for a regular file every class may read, with no
// capability issued) before it acknowledges the break; the orphan is
// reclaimed after the breaks if nobody has it open by then. An unlink that
// reclaims by itself fences the inode in the lease table until it returns
// (leaseTable.claimReclaim): a lease granted on it meanwhile comes with an
// invalidation at once. Otherwise, when an
// orphan has no opens (at once, or at its last Release) the server proposes
// a Reclaim command, which deletes the inode and its xattrs and puts its
// objects (target, ino, stripe) on the object-GC queue, in one batch; from
// the moment it is scheduled until it is applied, Open of that inode fails
// with ENOENT. A background loop removes queued objects through
// proto.StorageService (one RemoveMany per target and batch) and drops them from the queue once removed (ENOENT
// counts as removed); objects on unreachable targets stay queued and are
// retried every GCInterval. The loop starts GCDelay (default 200 ms) after
// objects were queued, so that a burst of unlinks is removed in a few
// large batches.
//
// # Sessions and leases
//
// Open handles belong to client sessions (session.go). A client registers
// its session (OpenSession: the session id it chose, bound to its
// certificate name) and renews it (RenewSession) every third of the lease,
// Options.SessionLease (DefaultSessionLease, 30 s; `weft meta
// --session-lease`). Only the explicit renewals count: other requests do
// not touch the session table, so the hot path pays nothing for leases. A
// session whose lease ran out expires: its handles are dropped as if
// released, so the unlinked-but-open files of a killed or cut-off client
// are reclaimed within lease + GCDelay, with no restart; CloseSession (a
// clean unmount) does the same at once. A remote request that takes, uses
// or drops a handle (Open, CreateOpen with an access mode, Release,
// ReleaseMany, WriteDone, SetAttr with SetHandle) in a session the server
// does not know fails with ESTALE; without a session id (admin tools,
// storage servers) Open fails with EINVAL and WriteDone is checked as if
// no handle were held. In-process callers are trusted: their sessions
// never need registering.
//
// Sessions and open counts are not persisted, nor will they be replicated:
// every open and release would become a synced command. They are rebuilt
// from the clients instead, as NFSv4 does. After a restart (a store that
// was formatted before) the server is in a grace period of
// Options.OrphanGrace (DefaultOrphanGrace, 30 s; `weft meta
// --orphan-grace`): it knows no sessions, a client's
// next renewal gets ESTALE and the client re-registers its session with
// the handles it holds (OpenSession with a reclaim list), which are
// counted again. Nothing is reclaimed during the grace period (an Unlink
// leaves an orphan even if nobody has it open yet, Release reclaims
// nothing); at its end every orphan without a handle is reclaimed, and
// the remembered replies of sessions that did not come back are dropped.
// Outside the grace period a reclaim is refused with ESTALE: the client
// then starts a new session, and its old handles fail with ESTALE.
//
// # Metadata leases
//
// A session that polls (LeasePoll) holds a lease on every inode its
// Lookup, GetAttr and ReadDir read (a directory's lease covers the names
// in it, found or not) and on what its creates made (leases.go,
// docs/caching.md). propose breaks them after a command is applied and
// before its caller is answered: every holder of an inode the command
// names, of the directories whose entries it changes, and of the inodes an
// unlink, rmdir or rename took a name from, gets an invalidation on its
// poll, and the command waits for every holder but its caller to
// acknowledge, or for the holder's term (Options.LeaseTerm, default
// DefaultLeaseTerm) since its last poll to run out, when the holder is
// dropped with all its leases. A read that began before a break and took
// its lease after it is invalidated at once (per inode hash, the
// generation of the last break). Leases are the leader's, in memory: a new
// leader starts with none and a new epoch, which makes every client drop
// its cache. A replicated leader's poll answer bounds the client's trust
// by the leader's read lease (LeasePoll.Valid), which ends before any
// other member can lead: no client answers from a deposed leader's
// leases once a new one acknowledges changes.
//
// # Locks
//
// The server is the cluster's lock manager (locks.go, proto.LockService):
// flock locks and byte-range locks (POSIX and OFD; one name space, flock
// another, as on Linux) of every mount, enforced among all of them. A
// lock's owner is (session, the kernel's lock owner), since a kernel's
// owner ids mean something only on its own mount. Lock (metarpc 50) takes,
// changes or releases a lock, failing with EAGAIN on a conflict and
// changing nothing, or tests for one (F_GETLK: the conflicting lock's
// range and the holder's pid); a new lock replaces what the owner held in
// its range (proto.Lock.Apply). Locking needs the session to hold an open
// handle on the inode (EBADF otherwise): the open is where permissions
// were checked. A session holds at most MaxLocksPerSession locks (ENOLCK
// beyond), so a client cannot make the server hold unbounded memory.
//
// Blocking requests (F_SETLKW, flock without LOCK_NB) never wait in the
// server for long: LockWait (51) returns once the lock would not conflict,
// or after lockWaitBound (2 s), or when the request ends, and takes
// nothing; the client then tries Lock again. Every release wakes the
// waiters on the inode (a channel per inode, closed and replaced), so a
// freed lock is taken at once; a waiter that vanished costs a goroutine
// for at most the bound, and a waiter that gave up (a signal) never ends
// up holding a lock it did not ask for again.
//
// Locks are released by their owner (the client sends the unlocks at
// close, see package client), with the session's last handle on the inode
// (Release, ReleaseMany) whatever the client sent, and with the session
// when it closes or expires (a crashed or cut-off mount: within the
// lease).
//
// The choice: the lock table is in memory on the server that serves the
// clients, not replicated state. Sessions and open handles already live
// there, rebuilt by the clients after a restart (NFSv4's design); locks
// follow them the same way instead of making every lock and unlock (a
// SQLite transaction makes several) a synced command. After a restart the
// server is in its grace period (Options.OrphanGrace): a client that
// re-registers its session (OpenSession with its handles) then takes each
// of its locks back with Lock in mode LockReclaim, which is refused
// (ESTALE) outside the grace period; until the period ends, new locks
// fail with EAGAIN and LockWait waits for its end, so no lock held before
// the restart can be taken by someone else before its holder reclaimed
// it. A lock whose holder did not come back within the period is gone.
// With raft, only the leader takes lock requests (they pass the read
// barrier, Server.reader), and a new leader is to start in the grace
// period as a restarted server does (see "How raft slots in").
//
// # Atomic append
//
// O_APPEND writes from several clients must each land at the true end of
// the file. Append (metarpc 52) reserves n bytes there (append.go): the
// server keeps, per inode open for writing, the end of the last range it
// reserved, in memory; a new range starts at the larger of that end and
// the recorded size, and the reply (the attributes, Size the range's end)
// tells the client its offset, Size - n. The client then writes its bytes
// at that offset through its write-behind buffer like any other write and
// records them with WriteDone (size = max, so nothing shrinks). So
// concurrent appends from any number of mounts get disjoint ranges, at the
// cost of one metadata round trip per append write but no disk write: a
// reservation is not a command. A client that dies between its
// reservation and its write leaves a hole (zeros) of the reserved length.
// Appending needs a write handle (EBADF). The session's last
// MaxPendingRequests replies are remembered with its sequence numbers, so
// a request retried after a lost reply gets the range it already got. The
// end is forgotten when the inode's last handle is released (every writer
// recorded its writes by then) and when its size is set (truncate).
//
// Like locks, reservations live with the sessions and are rebuilt by the
// clients after a restart: in the grace period Append fails with EAGAIN
// (the client retries) and each client that re-registered names how far
// it wrote in each open file (ReclaimAppend, metarpc 53), so that the
// first new range starts beyond every range reserved before the restart,
// recorded or not. Lustre takes a whole-file lock for O_APPEND instead; a
// reservation is one round trip and never waits for other writers.
//
// # Request dedupe
//
// A mutation from a client with a session carries a sequence number in its
// request header (metarpc header version 2), which the proposer puts in the
// command with the session id and certificate name (Command.Session,
// SessionName, Seq; command version 4). The state machine stores the reply
// (errno, attributes, parent's attributes) of each such command in the same
// batch as its changes, and answers a command whose request it already
// applied with that reply instead of applying it again (dedupe.go; Raft
// thesis §6.3), so a client may send a mutation again after a broken
// connection or a failover: a retried create does not fail with EEXIST
// nor create twice, a retried unlink does not fail with ENOENT. Failed
// commands store their errno too (in a batch of their own). A session's
// replies live in proto.MaxPendingRequests slots (seq mod the window),
// overwritten in turn, so that no reply is ever deleted one by one; the
// client keeps every request that may still be retried within the window.
// OpSessionDrop, proposed when a session expires or closes, deletes a
// session's replies. Unlike sessions, the replies are part of the
// replicated state: they are written by commands, survive restarts and
// failovers, and TestApplyDeterministic covers them. A retry after the
// session expired is applied as a new request.
//
// # Target registry
//
// RegisterTarget gives a storage target (named by the uuid in its
// directory) a stable id through a command; heartbeats that change nothing
// persisted only refresh usage and liveness in memory. A target is up if
// heard from within HeartbeatTimeout (default 10 s). After a restart the
// registered targets count as up for one HeartbeatTimeout before their
// first heartbeat (their usage unknown, placement treats them as not
// full), so files can be created at once; one still silent after that is
// marked down.
//
// Registration is validated (docs/security.md, "Target registration"):
// only a peer with role storage may register or heartbeat (EACCES
// otherwise; an unauthenticated peer only with Options.AllowUnauthenticated;
// an in-process caller with no peer in its ctx is trusted). A uuid belongs
// to the certificate name (Peer.Name) that first registered it, stored in
// the target record (format version 2; version 1 records, which have no
// owner, are still read and are adopted by the next named registrant);
// another name gets EPERM. A new target, or a known one at a new address,
// is accepted only after the address answered a transport probe within
// ProbeTimeout (EHOSTUNREACH otherwise); heartbeats of a known target at
// its known address are never probed. Usage no real target reports (Total
// over MaxTargetBytes, Free over Total, Used+Free over Total plus slack)
// is refused with EINVAL and never ranked.
//
// # Target lifecycle and rebuild
//
// Every target has a state in its record (targetstate.go; record version
// 3): in, out, draining, inactive, removed, set by OpTargetState (command
// op 19) from `weft target` (metarpc 73..75, root only) or by the leader's
// rebuild loop. Placement takes only targets in. A removed target may not
// register again (EPERM), its queued object removals are dropped, and
// removing one is refused (EBUSY) while it holds the only readable copy
// of an object.
//
// The rebuild (rebuild.go) runs on the leader: it marks a target down
// longer than Options.RebuildAfter out (auto; back in when heard from),
// scans every file for objects on targets that are out, draining or
// removed (moved) and stale objects on targets up (repaired in place), and
// for each asks the destination's storage server to write the object
// from a fresh copy or K EC shards (proto.ObjectRebuilder, storagerpc
// OpRebuild), RebuildParallel at a time, paced to RebuildRate bytes/s
// (SetRebuildRate changes it at once). It then proposes OpMoveSlot
// (command op 20), which points the slot at the new target, clears its
// stale mark and queues the old object for GC (not before a time carried
// in the command: MovedObjectGrace when the old target still serves), and
// which apply refuses (EBUSY) if the file's mtime or the slot changed
// since the copy began; the proposer also skips files open for writing.
// A destination is a target in and up that the file does not use, in a
// failure domain the stripe does not use, with no old object of that
// name on the GC queue (so a late removal never deletes a new copy).
// Progress (RebuildProgress) is the leader's, in memory.
//
// An in-place repair and a client's resync (ClearStale) of the same
// object exclude each other (rebuilder.repairMu): a repair begins only on
// an object still stale, a ClearStale is refused (EBUSY) while one is
// under way and once after one failed (it may have emptied the object
// after the resync copied it). Every rebuild attempt fences its
// destination object with a fresh capability and names that fence in its
// requests, so a request the storage server runs after this service gave
// up on it cannot change a copy a later repair fenced.
//
// # Scrub
//
// Storage servers report the objects their scrub or their reads found
// corrupt, with each target's scrub state (ReportScrub, metarpc 110;
// scrub.go): only the storage server that registered a target may report
// on it. An object of a live protected file's slot is marked stale by
// OpCorrupt (command op 35, the server's own: it checks that the slot is
// still on that target and that the stripe keeps a readable copy, EIO
// otherwise) and the rebuild is asked to scan at once (rebuilder.urgent),
// so it rewrites the object in place like any stale one; OpMoveSlot then
// counts it repaired. RAID-0 objects, and those whose marking would leave
// the stripe unreadable, are recorded lost by OpLost (command op 40:
// store.LostKey, replicated like every command, removed with the file's
// inode or by a migrate's commit), so a failover or restart never makes a
// lost object disappear from `weft scrub` and `weft status`. `weft scrub`
// (StartScrub, root only: storagerpc OpScrubStart to every target up;
// ScrubStatus) reads the lost records and the book: each target's pass
// state and the counts of objects reported and repaired, which are the
// leader's, in memory.
//
// # Online restripe
//
// `weft migrate` gives a file with data a new layout (migrate.go,
// proto.Migrator, metarpc 100..102): MigrateBegin (command op 30) places
// the new layout for a new random generation, whose objects therefore
// never collide with the file's, and queues them on the object-GC queue
// due at the ticket's end (an hour by default); the client copies the file into them
// (package client); MigrateCommit (op 31) swaps layout and generation in
// one command, only if the file's generation, mtime, ctime and size are
// still those of the begin (EBUSY otherwise), every slot is one the begin
// queued and the ticket is not near its end; it takes the new objects off
// the GC queue and queues the old ones due after MovedObjectGrace, and
// records the old generation in the inode (inode.Migrated, inode record
// version 5, the last 16) so that handles opened at it may follow the file
// (Server.Follow, metarpc 120: the current attributes and a capability,
// only for a generation the file had; ESTALE otherwise). MigrateRenew
// (op 36, metarpc 121) moves a live ticket's objects' removal a ticket's
// life (Options.MigrateTicketLife) later; an ended one is ETIMEDOUT. Begin
// and commit are refused (EBUSY) while anyone holds the file open for
// writing, or in the grace period after a restart (handles not yet taken
// back are not known), and opens for writing wait while a commit is proposed
// (Server.migrating), so no writer can keep the old layout across it.
// MigrateAbort (op 32) makes a ticket's objects due at once. Both need
// write permission; size, times and quota usage do not change.
//
// # Small files' copies
//
// A file of at most proto.MaxFileCopy bytes may have a copy of its whole
// content in the store (copies.go, proto.FileCopies, metarpc 48..49): the
// client offers it with the WriteDone that first records a file it wrote
// whole from size 0 (OpWriteDone with writeWithCopy and the bytes in
// Value), and OpenCopy answers it to an open for reading, so a reader
// needs no storage server; LookupCopy (metarpc 98, proto.LookupCopier)
// answers it to a lookup of a session granted a clean lease on the file
// (leaseTable.grant) when every class may read it, so the client opens the
// file from its cache (one round trip for a cold small file); CopiesAfter
// (metarpc 99, proto.CopyPrefetcher) answers the copies of the files
// numbered after one that the session holds clean leases on
// (leaseTable.keepHeld) and every class may read, which the client reads
// ahead into its cache. A copy is
// only ever dropped, never replaced by other bytes, so the copy read after
// the inode belongs to it. The objects stay the file's data. Invariant: a
// file's copy, if it has one, is its bytes. The state machine takes a copy
// only from the WriteDone of a file that never had one recorded nor a
// truncate (inode.Written, inodeTruncated, inode record version 7), the
// proposer only while no other session holds the file open for writing
// and not in a grace period; every other WriteDone, a truncate and the
// inode's removal delete it in their own batch; an open for writing, and
// the end of a session that held the file open for writing, delete it
// (command op 41) before they return; an open for writing first waits for
// a copy's WriteDone under way (Server.copying), then counts its handle,
// so no copy is taken while it is open.
//
// # A store that never lies
//
// A server refuses to start, with an error wrapping store.ErrCorrupt that
// says how to recover, on a store that lost or damaged acknowledged
// changes, instead of serving what is left:
//
//   - store.OpenPebble refuses a WAL with a damaged record that synced
//     records follow (pebble's WAL sync offsets, format FormatNewest; an
//     older store is ratcheted to it at its first start, one way), and
//     reads every table with checksums verified before the store is used
//     (about 4 s per million inodes; store/doc.go). Corruption found
//     later fails every store call (EIO to clients), logged at error;
//     pebble's own log goes to slog, background errors at error level.
//   - Every batch raises the counter applied by one (on a single server;
//     on a replica it is the raft index, see below). A durable mark
//     beside the store (store.Mark, the file WEFT-MARK: fsid and applied
//     count, CRC-32C, replaced atomically) records the applied count once
//     a synced commit has made it durable: rewritten by a background loop
//     every Options.MarkInterval (100 ms) while changes come in, never on
//     the commit path, and once more by Close. It never claims more than
//     the store made durable, so an intact store is never refused. At
//     start, a store that has applied fewer batches than its mark lost
//     acknowledged changes (a WAL cut short, damage in the WAL's last
//     32 KiB, which pebble takes for a torn tail, a WAL or table deleted,
//     an older copy put back): New fails with ErrRollback. After a clean
//     stop the mark is exact, so any loss is found; after a crash, a loss
//     is found unless it is limited to changes acknowledged after the
//     last mark write (at most MarkInterval before the crash, and a crash
//     alone never loses a synced change). Serving an older backup on
//     purpose: --accept-rollback (Options.AcceptRollback) starts once and
//     rewrites the mark; a backup restored together with its own mark
//     starts without it.
//   - A mark naming another file system than the store does
//     (ErrForeignStore), a database with data but no weft format record,
//     and a directory of other files (store.ErrNotStore) are refused.
//
// What a single server cannot do is get the lost changes back: that needs
// a restore from backup, or, with raft, a re-sync from the other members
// (see "How raft slots in").
//
// # File system id
//
// OpInit formats a store with a file system id, a random uuid decided by
// the proposer and carried in Command.Text (counter "fsid"; store format
// version 2). A store formatted before ids (format 1) adopts one at its
// first start (OpInit with initAdoptFSID, which changes nothing else).
// Server.FSID returns it; Run logs it at start; the durable mark records
// it. Storage targets ask for it (metarpc OpFSID) at their first
// registration and record it in target.json; a registration that carries
// another file system's id is refused with EPERM.
//
// # Generations: object names are never reused
//
// Inode numbers only grow in one store, but a store put back to an
// earlier state (a restored backup, a rollback accepted with
// --accept-rollback) hands out numbers that files it no longer knows had,
// and those files' objects may still be on the targets. So every regular
// file gets a generation at create: a random non-zero 64-bit number
// decided by the proposer and carried in Command.Gen (command version 3),
// so every replica stores the same; random because a counter would be
// rolled back with the store. It is kept in the inode (proto.Attr.Gen,
// inode record version 2; version 1 records decode with generation 0),
// names the file's objects (proto.ObjectID.Gen; <ino>.<gen>.<stripe> on
// the targets, generation 0 keeping the old <ino>.<stripe>), is bound
// into every capability (capability format version 2: a capability for
// one generation is refused for another's objects), and is recorded with
// each object on the GC queue. Clients name every object with the
// generation from the file's attributes. A new file that reuses a number
// therefore has objects of its own, reading as holes until written, and
// never the old file's bytes; two files with one number share a
// generation with probability 2^-64.
//
// # Quotas
//
// Every inode counts against three accounts (quota.go): its uid's, its
// gid's and its project's (inode.Project, inode record version 4; new
// inodes take their parent's). It counts one inode, a regular file also
// its size in bytes (the size, not allocated blocks: the server decides
// it, and protected copies would count several times). An account's
// usage and limits are one record (store key "q"). Usage is not counted
// by each command: txn.get remembers each inode's charge as read, and
// chargeQuota, after the command's changes and before its batch is
// written, adds the difference between what each changed or deleted inode
// counts now and what it counted then, in the same batch. So every
// command that changes inodes keeps usage exact, on every replica and
// across crashes and replays, and a change that would take an account
// over a non-zero limit fails with EDQUOT at apply (serialized: concurrent
// clients cannot overshoot together). Root is exempt from inode limits
// and chown's byte changes; byte growth (WriteDone, truncate up) is
// refused for every remote caller, since mounts record sizes at release
// with root's credentials. Commands: OpSetQuota (23), OpSetProject (24:
// a batch of inodes; Server.SetProject walks a tree breadth first, each
// directory tagged before it is listed), OpRecount (25: recount every
// account from the inodes, proposed once at start for a store formatted
// before quotas, counter "quotas" absent, or by CheckQuota with repair).
// CheckQuota recounts in one store scan over inodes and accounts, one
// consistent snapshot. See docs/quotas.md.
//
// # Invariants
//
//   - Every directory entry names an existing inode, and its type matches.
//   - A directory has exactly one entry naming it (its Parent), and
//     nlink = 2 + its subdirectories; a file's nlink counts its entries.
//   - Every inode with nlink 0 is in the orphan set, and no other is.
//   - Every stored inode number is below next_ino; counter inodes equals
//     the number of stored inodes.
//   - Once counter quotas is set, every quota account's usage equals what
//     the stored inodes count against it (checkQuota; TestInvariants).
//   - Counter applied is the log index of the last batch: on a single
//     server it counts the batches committed; the durable mark never
//     exceeds the applied count the store has made durable.
//   - A regular file's generation is never 0 for a file created since
//     format version 2, and changes only by a restripe's commit, which
//     keeps the one it replaced in inode.Migrated.
//   - The state machine's in-memory fields (counters, uuid↔id maps, the
//     cache of quota records) are a function of the store: a replica that
//     opens the same store and applies the same commands reaches
//     byte-identical state (TestApplyDeterministic).
//   - A read that answers from more than one key (Lookup: the entry and
//     its inode; ReadDir: the entries and their inodes) reads them in one
//     store view (store.View), so it answers from one state: between two
//     plain reads a rename over the name deletes the inode the entry
//     named, and the name would seem not to exist (TestReadsSeeOneState).
//
// # How raft slots in
//
// The command log is replicated over three (or five) servers with
// go.etcd.io/raft/v3 (package meta/raftlog). The proposer side (Server
// methods) stays: it still decides inode numbers, time, credentials and
// candidates, then proposes the encoded Command to raft instead of the
// local queue: Options.Replica makes raftLog (replicated.go) the commit
// path. raftlog applies each committed entry on every member through
// stateMachine.applyAt with the raft index, which the batch records;
// durability comes from the raft log (fsync'd on a majority before an
// entry commits), so batches are not synced, and after a crash the log
// is applied again from the recorded index (see "Durability of a
// member's two stores").
//
// Only the leader takes commands: a follower's propose fails with EAGAIN
// naming the leader (raftlog.NotLeaderError), as does a new leader's until
// it has applied every entry of earlier terms. Every applied command raises
// the server's inode allocator to the applied high-water mark (next_ino),
// on followers too; when a server becomes leader (having applied all
// earlier entries) it raises it once more, and refuses (EAGAIN) any new
// inode numbered below that point, which may have come from the allocator
// before it caught up: a number is never handed out twice. The first
// leader formats an empty store (OpInit).
//
// Reads (Lookup, GetAttr, Readlink, ReadDir, GetXattr, ListXattr,
// StatFS) pass a read barrier (Server.reader): only the leader answers, once
// raft's ReadIndex confirmed with a quorum that it is still leader and it
// has applied everything committed by then; a follower fails with EAGAIN
// naming the leader. Concurrent reads share ReadIndex rounds (readBarrier:
// a read joins the next round not yet issued, so its round always starts
// after it arrived; one round at a time, bounded by 5 s). With
// Replica.ReadLease (Config.LeaseReads, `weft meta --lease-reads`, on by
// default: half the election timeout) a round that confirmed leadership
// also covers the reads that arrive within the lease after it was issued,
// in the same term: the followers that acknowledged it will not vote for
// anyone else within an election timeout (CheckQuorum's lease), so no
// other leader can have committed anything, and everything this leader
// acknowledged is applied here. It assumes clock rates that differ by
// less than the margin (half the timeout). A single server reads at once,
// as before.
//
// Snapshots (snapshot.go): with a pebble store (store.Checkpointer) a
// replica takes a snapshot every Replica.SnapshotEvery applied entries
// (DefaultSnapshotEvery, 10,000) into Replica.SnapshotDir (default the
// store's directory + ".snapshots"): the applied index is recorded, then
// the store checkpointed (its memtable flushed, tables hard-linked), and
// raftlog compacts the log to the last SnapshotKeep entries
// (DefaultSnapshotKeep, 1,000). A member that fell behind a compacted log
// is streamed the checkpoint's files in 1 MiB chunks, checked by SHA-256;
// Restore then replaces its store with it atomically (store.Pebble.Replace:
// copied beside the store, renamed in, and finished or undone at the next
// open if a crash interrupts it), records the snapshot's index as applied,
// and reloads the state machine's counters and maps and the server's
// target registry and inode allocator from it. A store that cannot be
// checkpointed (store.Mem) takes none, and its log is never compacted.
//
// Membership (members.go): Members, AddMember and RemoveMember
// (metarpc.MemberAdmin, ops 45..47, `weft admin meta list|add|remove`)
// change the group with raft's ConfChangeV2, one change at a time on the
// leader. AddMember adds the new member as a learner, waits until the
// leader has replicated to it everything committed when it joined (it
// receives a snapshot), then promotes it to voter: adding an empty member
// never costs the group its quorum. RemoveMember refuses to remove the
// last voter. The new member is started with Replica.Join and empty data:
// it never bootstraps, never formats, and takes the fsid with its
// snapshot. Only peers authenticated as metadata servers (role meta) may
// list or change the group, or in-process callers: not clients, not even
// root on an admin network, as membership decides where the namespace
// lives. Replacing a member whose disk died: add a fresh one, then remove
// the dead one (TestReplaceDeadMember, with creates running throughout).
// The added member's address is recorded by raftlog with the change (and
// in snapshots); every member's transport learns it (onAddresses), also
// after a restart.
//
// Integrity per member: a member whose store or raft log fails a
// checksum at start refuses to start (store.ErrCorrupt or
// raftlog.ErrCorrupt, with the way back in the message); corruption found
// while serving stops its raft node (the store's failure is checked
// after every applied entry), so it applies nothing more and answers
// EIO. The way back is a re-sync (TestCorruptMemberResync): wipe its data
// (store, log, snapshots), remove it, start it empty in join mode, add it
// again; it receives a snapshot from the leader. A replica's store does
// not use the durable mark (the raft log is the record of what was
// acknowledged).
//
// Every request to a member that is not the ready leader is refused
// before anything is done (caller, leader.go): EAGAIN with a
// *NotLeaderError naming the leader's id and address (Replica.Addrs) when
// it is known. Any member answers Group (metarpc.OpGroup 41: the
// group's members, the leader and its address, the term, the fsid),
// authenticated but not leader-gated: that is how clients find the leader
// (metarpc's cluster: a client given any members' addresses, even
// followers' only, asks the member that refused it and goes to the
// leader; with no leader known it backs off and tries the others). A
// request refused with EAGAIN was not applied and is always sent again; a
// mutation whose member died under it is sent again with its sequence
// number, and the dedupe answers it with the first attempt's reply if it
// had been applied, so a create retried across a failover neither fails
// with EEXIST nor creates twice.
//
// # Durability of a member's two stores
//
// A single server has one store, with its WAL: a command is acknowledged
// once a synced commit covers it (group commit), and its durable mark
// counts those. A member has two pebble instances:
//
//   - the raft log (DataDir/raft, package raftlog), with a WAL, every
//     append synced before raft may count it (an entry commits once a
//     majority has it on disk), compacted only at snapshots;
//   - the state-machine store (DataDir), opened by Run without a WAL
//     (store.PebbleOptions.NoWAL): an apply is a memtable insert, no log
//     write, and the store is durable up to its last memtable flush (when
//     a memtable fills, at each snapshot, and at a clean stop).
//
// After a crash the store is exactly its last flushed state: flushes
// write whole batches in order, and each batch carries its entry's
// index (counter applied), so the applied index the store reports is
// never ahead of what it holds. raftlog applies the log again from the
// entry after it (raftlog.StateMachine.Applied, read at start). The log
// still holds those entries: raftlog compacts it only after
// raftApplier.Snapshot, whose checkpoint flushes the memtable first, so
// every entry up to the snapshot is durable in the store before any of
// it leaves the log (TestReplicaCrashReplays; with processes,
// TestHAKillMembersReplay). A restored snapshot is flushed with its
// index (recordApplied, synced). A store without a WAL holds no
// acknowledged change of its own, so replicas keep no durable mark and
// nothing takes the store's missing tail for damage. For the same reason
// a member's directory cannot be served by a single server (Run refuses
// a directory with a WEFT-MEMBER file without --id: ErrWrongMember), and
// New refuses a store without a WAL without Options.Replica. A member
// that a build before this one left with a WAL opens with it replayed
// and flushed.
//
// # Sessions and background work under replication
//
// Sessions and open counts are not replicated state: they are rebuilt on
// a new leader from the clients, as after a restart (every open and
// release would otherwise become a synced, replicated command). When a
// member becomes leader (becameLeader, from raftlog's OnLeader once it
// has applied every earlier entry) it forgets any sessions and counts it
// kept from an earlier term as leader, and starts a grace period of
// Options.OrphanGrace: clients' renewals get ESTALE and they re-register
// their sessions with the handles they hold (their in-flight opens, which
// fail with ESTALE, are recovered the same way and tried once more), and
// nothing is reclaimed; at its end, if it still leads in that term, it
// forgets the replies of sessions that did not come back and reclaims
// the orphans nobody re-registered (orphanSweep). The dedupe replies, by
// contrast, are replicated with the commands.
//
// Background work that changes the file system runs on the leader only
// and moves with leadership (isLeader): session expiry, reclaim (its
// commands fail with EAGAIN elsewhere anyway), the object GC (a follower
// removes nothing from the targets) and the orphan sweep. The target
// registry is the leader's: storage servers' registrations and heartbeats
// go to the leader (a follower refuses them), a new leader reloads the
// registry from its store (a follower's is not kept up to date) and
// counts every registered target up for one HeartbeatTimeout, as after a
// restart.
//
// # Members across processes
//
// Run with Config.ID and Config.Peers (`weft meta --id N --peers
// 1=h1:7400,2=h2:7400,3=h3:7400`) makes the server a member
// (runmember.go): its raft log is a pebble instance of its own in
// DataDir/raft, raft messages travel over the framed transport to the
// same address clients use (ops raftlog.OpFirst..OpLast go to the raft
// transport, the rest to metarpc), only from peers authenticated as meta
// servers. At its first start a member records its id and the peer list
// in DataDir/WEFT-MEMBER (JSON, version 1) and refuses, at every later
// start, another id or another list (ErrWrongMember); a first start needs
// an empty directory (a single server's store cannot join a group). Before
// it serves, it asks every other member that answers (Group) and
// refuses to start, changing nothing, if a peer's list differs from its
// own, a peer answers as another id, or a peer's store belongs to another
// file system (ErrForeignStore). Raft's timing is Config.TickInterval
// (default 100 ms), ElectionTicks (10: a follower that hears no leader for
// 10 to 20 ticks campaigns) and HeartbeatTicks (1).
//
// What integrity leaves to raft: with a replicated log the raft log, not
// the mark, is the record of what was acknowledged. The applied counter
// is the raft applied index on a replica (same key, written in every
// batch); at start a member replays its log from the store's applied
// index, so a store behind its log is caught up rather than refused
// (raftlog skips what the store already holds, and starts raft from the
// log's own commit index if the store is ahead of it). Still to do: keep
// HardState's commit index in a mark so that a member's log put back to
// an older copy is refused, and make a member refuse peers whose fsid
// differs.
//
// # Job statistics and run-time parameters
//
// The server counts the requests that name a job in a jobstats.Table
// (jobstats.go; the metarpc handler records, JobStats gathers its own and
// every storage server's, root only). Run-time parameters (params.go,
// docs/params.md) are set until a restart (in memory) or persisted by the
// command OpSetParam (27) under the store prefix "p"; log.level.meta is
// applied to Options.LogLevel at once and at start.
package meta
