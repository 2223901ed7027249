// Package storagerpc carries proto.StorageService over the transport: the
// message codecs, a Client that implements proto.StorageService by calling a
// storage server, and NewHandler that serves one.
//
// Operations (storage RPCs use op codes 100..199) and their bodies, all
// integers little-endian, built from wire primitives:
//
//	OpRead     106  cap, target u32, ino u64, stripe u32, off u64, len u32  -> the bytes read
//	OpReadSums 171  OpRead's body (off, len whole 4 KiB blocks) -> format u8 (1), n u32,
//	                (cur u32, prev u32) per block, then the n bytes read (readsums.go)
//	OpWrite    107  cap, target u32, ino u64, stripe u32, off u64, data (u32 length + bytes) -> version u64, allocated u64 (bytes, as OpAllocated answers after the write; a response of the version alone: not counted)
//	OpTruncate 108  cap, target u32, ino u64, stripe u32, size u64          -> empty
//	OpSync     109  cap, target u32, ino u64, stripe u32                    -> empty
//	OpSpace    110  cap, target u32, ino u64, stripe u32, mode u8, off u64, len u64 -> empty
//	OpSeek     111  cap, target u32, ino u64, stripe u32, off u64, what u8  -> offset u64
//	OpAllocated 112 cap, target u32, ino u64, stripe u32                    -> bytes u64
//	OpCopy     113  cap, dst (target u32, ino u64, stripe u32), dstOff u64,
//	                srcCap, src (target u32, ino u64, stripe u32), srcOff u64, len u64 -> empty
//	OpExtend   115  cap, target u32, ino u64, stripe u32, size u64          -> empty (grow only)
//	OpReadRow  130  format u8 (1), cap, target u32, ino u64, stripe u32, off u64, len u32, unit u64
//	                -> tag u64, dirty u8, the bytes read
//	OpWriteRow 131  format u8 (1), cap, target u32, ino u64, stripe u32, off u64, unit u64,
//	                cond u8, expect tag u64, expect dirty u8, tag u64, data -> version u64 (EAGAIN: version differs)
//	OpFence    132  cap, target u32, ino u64, stripe u32                    -> empty
//	OpCopyRow  150  format u8 (1), cap, dst (target u32, ino u64, stripe u32), off u64, unit u64,
//	                tag u64, srcCap, src (target u32, ino u64, stripe u32), srcOff u64, len u32,
//	                expect tag u64, expect dirty u8 -> empty (EAGAIN: the source's version
//	                differs; EREMOTEIO: the source could not be read)
//	OpLocalInfo 173 empty -> format u8 (1), path str, id [16]byte: the server's
//	                local socket for short-circuit reads ("" = none; local.go)
//	OpRemove   104  target u32, ino u64, stripe u32                         -> empty
//	OpRemoveMany 105  target u32, count u32, (ino u64, stripe u32) x count  -> empty
//	OpJob      140  u8 version, u16 inner op, str job, the inner body  -> the inner op's answer
//	OpJobRead  142  OpJob around OpRead;  OpJobWrite 143: around OpWrite;
//	                OpJobReadSums 172: around OpReadSums
//	OpJobStats 141  u8 version, str job ("": all)                       -> proto.EncodeJobStats (servers only)
//
// The Client sends a request whose ctx names a job (proto.WithJob) as
// OpJob (OpJobRead, OpJobWrite) so the server counts it for the job in
// Options.Jobs (package jobstats), with its data bytes; the inner request
// is authorized and served as if it came alone.
//
// OpCopy goes to the destination's server, which reads the source itself
// (its own target, or the source's server as a storage server, through
// the peers storage.Run gives it): copy_file_range without the data
// passing through the client. OpCopyRow does the same for one shard of an
// erasure-coded row, with versions (proto.RowCopier): the source unit is
// copied only at the version the client expects, and the destination
// unit gets the client's new tag, so the K+M shards of the destination row
// form one code word.
//
// A Client may bound the requests it has outstanding at each storage
// server (SetInflightLimit, the mounts' client.rpcs_in_flight; inflight.go):
// more wait for a slot, or give up with their ctx. Without a bound no
// slot is taken; the requests under way per server are counted either way
// (Outstanding, which a mount's --metrics shows).
//
// cap is a capability (package capability) as u32 length + bytes, at most
// MaxCapability; length 0 is none. The Client takes it from the request's
// ctx (proto.WithCapability). Ops 100..103 were Read, Write, Truncate and
// Sync without a capability; they are retired (ENOSYS), so an old peer
// fails plainly instead of being misread.
//
// # Authorization
//
// The handler authorizes every request before the service sees it, by the
// peer the transport put in ctx (transport.PeerFrom):
//   - no peer (an in-process call): trusted;
//   - a server (RoleMeta, RoleStorage; object GC, later rebuild): trusted,
//     no capability needed;
//   - unauthenticated (RoleNone): refused, unless Options.AllowUnauthenticated
//     (tests over a transport without security), then trusted;
//   - a client (RoleClient): Read needs a capability that verifies with
//     Options.CapabilityKey, is not expired (capability.Skew tolerated),
//     names the object's inode, grants read and, if bound to a holder,
//     names the peer's certificate name; Seek needs one granting read
//     too, Allocated one granting anything, Copy and CopyRow one granting
//     write on the destination and one (srcCap) granting read on the source; Write, Truncate, Sync and Space need one granting write; Remove and RemoveMany are refused.
//
// OpLocalInfo answers any authenticated peer. AuthorizeLocal checks a
// request of the storage server's local socket (local.go) as a client's
// Read is checked, bar the holder's name (the socket's server has checked
// the process's uid instead).
//
// OpRebuild (120) and OpScrubStart (170) are the metadata service's: only
// metadata servers (and in-process callers) may send them.
//
// A refusal is EACCES, logged at warn with the peer's address, role, name,
// the op and the reason, at most once a second (the count of refusals not
// logged goes with the next line). Verified capabilities are cached by
// their exact bytes (up to 16384, then the cache starts over), so a
// client's stream of requests costs a map lookup, not an HMAC, each; expiry
// and rights are checked on every request.
//
// # Checked reads without copies
//
// Client.Read sends a read of whole blocks, of at least MinReadSums (64
// KiB), as OpReadSums: the server takes
// the object's read lock, reads the blocks' sidecar entries, and answers
// them followed by the bytes, which the transport sends from the data
// file with sendfile(2) (transport.SendFile; on an encrypted connection, or
// from the in-memory FS, the handler reads them into its buffer instead);
// the open handle and the read budget are held until the response is
// written, the lock is not (a client that does not read must not hold up
// writers): bytes a write changed in between fail the client's check,
// and a file a truncate cut is padded with zeros, which fail it too. The Client reads the entries and the bytes into
// separate buffers (transport.WithResponseBuffers: the bytes straight into
// the caller's) and checks every block as the server would (CheckBlocks:
// CRC32C of the block, zeros past the object's end, matching cur or prev;
// a hole entry only zeros). A mismatch is read again as OpRead, which the
// server checks: it logs and reports the corrupt object and fails with EIO
// (or returns the bytes of a write that raced with the first read, so a
// race never fails a read). Other reads, and all reads of a server that
// answers OpReadSums with ENOSYS, go as OpRead. Every byte a client is
// given is checked once either way. On loopback the server's CPU is about
// what pread and writev cost (the kernel's TCP path dominates); on a NIC
// with scatter-gather the bytes are not copied at all
// (docs/performance.md, "Reads, issue 12").
//
// Invariants:
//   - The Client sends a write's header and its data as separate parts of
//     one frame, so the data is not copied; the handler decodes the data as
//     a slice of the request (no copy either).
//   - One RPC moves at most MaxIO bytes; the Client splits larger reads and
//     writes (a split write returns the version of its last piece).
//   - Read buffers are bounded: a read takes its buffer's size (a power of
//     two, 4 KiB to MaxIO) from its connection's budget
//     (Options.ReadBytesPerConn, default 64 MiB; the connection is
//     the transport.Peer's Addr) and then from the server's
//     (ReadBytesPerServer, default 512 MiB) before the buffer is taken, and
//     gives it back once the response is written or dropped with the
//     connection (transport.AfterResponse), or at once on an error or an
//     in-process call. A read over budget waits, and fails with EINTR or
//     ETIMEDOUT when its ctx ends (its connection closed). So a client that
//     pipelines reads and never reads the responses pins at most its
//     connection's budget. Write bodies are never held past the handler
//     (DoneWithRequest); the transport bounds request bodies.
//   - Every Read, Write, Truncate and Sync from a client carries a
//     capability that allows it; servers' requests need none; clients never
//     remove objects (see Authorization).
//   - Decoders never panic and reject truncated input, trailing bytes and
//     over-long lengths (each is fuzzed). The handler logs a malformed
//     request and answers EINVAL, an unknown op ENOSYS, and passes on the
//     service's errno otherwise: ESTALE for a target the server does not
//     serve (see storage.ErrUnknownTarget), so a client can tell a wrong
//     target map from a missing object (which is not an error).
package storagerpc
