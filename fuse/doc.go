// Package fuse mounts weft through FUSE (hanwen/go-fuse/v2, node API). It is
// a thin adapter: every operation becomes a call on a client.Client, and
// client errors (syscall.Errno) go to the kernel unchanged; any other error
// becomes EIO and is logged.
//
// # Mount
//
// Requests carry up to 1 MiB (MaxWrite, MaxReadAhead). The kernel checks
// permissions itself (default_permissions) against the attributes weft
// returns, and the metadata server checks them again: every metadata call
// made for a system call carries the calling process's credentials in its
// ctx (proto.WithCred): uid and gid from the FUSE request, supplementary
// groups from /proc/PID/status, cached per process for 1 s (a cached
// lookup costs ~60 ns, a /proc read ~10 µs). New files are owned by the
// caller's uid/gid. The same cached /proc read gives the caller's job id
// (Config.JobIDVar, client.JobIDSource): metadata calls and reads carry
// the caller's job, writes the job of the handle's opener (proto.WithJob),
// and servers count requests per job (docs/jobstats.md). A setattr made through an open handle (ftruncate,
// O_TRUNC) is marked proto.SetHandle. There is no writeback
// cache: every write reaches the daemon with its exact byte range, so
// several mounts writing disjoint, unaligned ranges of one file never
// overwrite each other's bytes with stale page contents. go-fuse keys nodes
// by the weft inode number, so hard links share one kernel inode; an
// unlinked file stays usable while open (the metadata server keeps it until
// the last Release). Directory listings stream from the metadata server in
// batches of 1000 names and answer READDIRPLUS with the attributes that come
// with each entry. No file descriptor is held per file.
//
// # Shutdown
//
// Run serves until ctx ends (weft mount: SIGINT, SIGTERM), then calls
// Server.Shutdown, which returns in bounded time whatever holds the mount:
// it unmounts; a mount still busy or still served after
// Config.UnmountTimeout (a file open on it; a copy of it in another mount
// namespace, which keeps the kernel's connection alive after the unmount
// here, so go-fuse's own Unmount would wait for its read loops forever) is
// detached lazily (MNT_DETACH); if the serving loops still run after as
// long again, the connection is aborted through fusectl, and Shutdown
// returns even if that fails. Each step taken is logged at warn.
//
// # Consistency and caching
//
//   - Attributes and directory names are cached by the kernel for 1 s;
//     names of files, symlinks and other non-directories are not cached
//     (every open or stat looks the name up), and neither are failed
//     lookups. The LOOKUPs and GETATTRs that reach the mount are answered
//     by the client's cache under metadata leases (client.Config.Leases,
//     on unless Config.NoLeases; docs/caching.md) when it can. When the
//     metadata leader invalidates an entry or attributes (a change
//     elsewhere), the mount drops the kernel's copies (leases.go:
//     NotifyEntry, NotifyContent with offset -1) before the leader hears it
//     was done, so the change is seen here by the next system call after
//     the call that made it returned, directories renamed elsewhere
//     included. It waits at most 100 ms for the kernel: a call of this
//     mount holding the directory may itself wait at the leader for
//     another mount; the kernel then drops the name when that call ends. The mount keeps a map from inode to node for this, pruned
//     when the kernel forgets a node (OnForget). The virtual attribute
//     user.weft.leases tells whether the cache is on, its hits and
//     misses, the opens made from it (client.OpenCached) and pinned, and
//     the small files' copies brought ahead (client/ahead.go).
//   - After every create or remove in a directory the kernel drops the
//     directory's cached attributes and asks again at the next path walk.
//     The metadata server returns the directory's new attributes with the
//     create, unlink or rmdir, and that GETATTR is answered with them (for
//     up to 1 s, the attribute timeout, and only until another change made
//     here to the directory), as the kernel would from its own cache.
//   - Close-to-open: Open fetches fresh attributes from the metadata server
//     (or, for a read-only open of an empty file or of a small one whose
//     copy the lookup brought, from the lease cache, which is as fresh:
//     client.OpenCached).
//     If size or mtime differ from what this mount last told the kernel, the
//     kernel's cached attributes are invalidated. The kernel keeps the
//     file's page cache (FOPEN_KEEP_CACHE) only when size, mtime and ctime
//     are all what the previous open on this mount found; any write or
//     truncate elsewhere moves ctime, which no client can set back, so the
//     cache is then dropped. So after a writer on mount A closes or fsyncs,
//     a reader on mount B that opens the file afterwards sees all the data
//     and the right size, even if B had the file cached.
//   - Data is acknowledged only at close (flush) and fsync: writes are
//     buffered in the client (write-behind, bounded) and a failed background
//     write is reported by the next write, close or fsync (see package
//     client).
//   - Times are exact: a setattr that sets mtime first records this mount's
//     buffered writes to the file (see package client, "Times"), so stat
//     shows the times set on every mount and close does not move them; a
//     file's mtime is otherwise the time of its last write, not of its
//     close.
//   - While a file is written here, the size this mount reports includes its
//     own unreported writes.
//   - O_APPEND is atomic across mounts: a handle opened with O_APPEND
//     ignores the offset the kernel computed from its idea of the end of
//     file and writes at the end the metadata server reserved for it
//     (client.File.Append); when the two differ the kernel's cached
//     attributes are dropped. Such a handle is direct I/O (FOPEN_DIRECT_IO),
//     so the kernel never caches an appended record at its own, wrong,
//     offset. The flag is taken at open (a later fcntl(F_SETFL, O_APPEND)
//     is not seen).
//   - A handle opened with O_DIRECT has its reads marked uncached
//     (proto.WithUncached): where the mount reads an object from its file
//     on this host (package localread), it bypasses the host's page cache
//     for every aligned read, not only for large ones, as the application
//     asked. Like O_APPEND, the flag is taken at open.
//
// # Locks
//
// The mount announces lock support (EnableLocks), so the kernel hands
// every flock(2), fcntl F_GETLK/F_SETLK/F_SETLKW and OFD lock to the
// handle (Getlk, Setlk, Setlkw; flock arrives as a whole-file lock with
// FUSE_LK_FLOCK), and the metadata server enforces them among all mounts
// (client.File.Lock). F_SETLKW waits until granted and ends with EINTR
// when the kernel interrupts it (a signal). F_GETLK reports the holder's
// range and its pid on its own host. Granting a lock also drops the
// kernel's cached pages and attributes of the file, so the holder reads
// what the previous holder wrote. The kernel keeps no locks of its own for
// such a mount and does not release POSIX locks at close itself: FLUSH
// names the closing process's lock owner, which go-fuse does not pass to
// the handle, so the mount wraps go-fuse's raw file system (locks.go,
// rawFS) to hand it over, keyed by the request's cancel channel; the
// handle's Flush then releases that owner's POSIX locks. The flock and OFD
// locks of an open file description go at its release.
//
// # Space calls
//
// fallocate (handle.Allocate) and lseek SEEK_DATA/SEEK_HOLE
// (handle.Lseek) go to client.File.Allocate and Lseek, which work on the
// file's objects on their targets; the kernel itself drops its cached pages
// of a punched or zeroed range. st_blocks is Attr.Blocks for regular files
// (what the targets hold, as last reported by a writer's close or fsync)
// and the size in 512-byte units for anything else. copy_file_range
// between two weft files (node.CopyFileRange) is client.CopyRange, done by
// the storage servers; if they cannot (EOPNOTSUPP: an older storage
// server, or an erasure-coded file with anything but an EC file of its
// geometry with rows that line up) the kernel copies
// through the mount with reads and writes. The kernel falls back so on
// EOPNOTSUPP and EXDEV; an ENOSYS reply would turn copy_file_range off for
// the whole connection, so the client never lets one through.
//
// # Extended attributes
//
// user.* names are stored by the metadata server. security.* reads answer
// ENODATA locally without a round trip (the kernel asks for
// security.capability before every write); trusted.*, system.* and names
// outside a namespace are not supported (EOPNOTSUPP). Two virtual
// attributes, not listed by listxattr: user.weft.layout (get on anything:
// JSON {"stripe_size","stripe_count","targets"}; set on a directory or an
// empty file to change its layout) and user.weft.df (get: JSON array of
// {"id","addr","total","used","free","up","objects","files_free","device"}
// per storage target) and user.weft.meta (get: the metadata server's
// address, for admin tools such as weft find) and user.weft.leases (get:
// JSON {"on","hits","misses","opens","pinned","ahead","listed"}: whether this mount caches
// lookups and attributes under metadata leases, how many its cache
// answered, how many opens it made from it and pinned since, how many
// small files' copies it brought ahead of their opens, and how many
// entries it cached from directories listed ahead of their lookups);
// user.weft.resync (set:
// repair stale copies, client.Resync) and user.weft.migrate (set on a
// regular file to a layout in user.weft.layout's JSON, targets optional:
// client.Migrate restripes it online; `weft migrate` sets it). Setting
// any other user.weft.* name fails with EPERM.
package fuse
