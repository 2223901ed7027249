// Package metarpc carries proto.MetaService and proto.TargetRegistry over
// the transport: request and response codecs for every operation (op codes
// 1..59 and 64..99; raft's are 60..63, package meta/raftlog), a Client that
// implements both interfaces and follows the leader of a replicated
// group, and a Handler that serves them.
//
// Each message is a flat sequence of wire fields (little-endian integers,
// length-prefixed strings). A request body is the request header followed
// by exactly one message, with no trailing bytes; a response body is one
// message. Op codes and field order are the protocol: add new ops, never
// renumber or reorder.
//
// # Request header (version 2)
//
//	u8      version = 3 (HeaderVersion)
//	u32     uid
//	u32     gid
//	u32     n: supplementary groups, at most proto.MaxGroups
//	n × u32 the groups
//	16 B    session id (zero: none)
//	u64     seq: a mutation's sequence number in the session (0: none)
//	str     job id (proto.WithJob; "": none), at most proto.MaxJobID bytes
//
// Version 1 (no seq) is still read, as seq 0: no dedupe; version 2 (no
// job id) as no job. The handler counts the requests that name a job in
// the service's jobstats.Table (JobStatsService); OpJobStats (90) returns
// the statistics of the metadata service and its storage servers (see
// docs/jobstats.md).
//
// OpLeasePoll (96) is a
// long-poll: it acknowledges the session's lease invalidations up to the
// sequence number it carries and waits for new ones (proto.LeaseService,
// lease.go; docs/caching.md). Its messages start with their own version
// byte. OpLeasePin (97) has the leader count read-only opens a session
// made from its lease cache (proto.LeasePinner); it is numbered like Open
// (a retry is not counted twice), and its messages start with a version
// byte of their own too. OpLookupCopy (98) is Lookup answering a small
// file's copy as OpOpenCopy (48) does an open's (proto.LookupCopier,
// copies.go): a read, sent as Lookup is. OpCopiesAfter (99) answers the
// copies of the files numbered after one that the session holds leases on
// (proto.CopyPrefetcher): a read too.
//
// The Client fills it from proto.CredFrom(ctx), or, when ctx has none,
// from this process's effective uid, gid and groups (WithCred overrides
// that default: the background work of a mount, admin tools), and from its
// session id (none unless WithSession, or SetSession). The handler decodes it
// (EINVAL if malformed or of an unknown version) and serves the request
// with the credentials and session in ctx; the service (meta.Server)
// authorizes them against the authenticated peer (root squash, client
// allow-list) and checks every operation. A header is never trusted more
// than the peer that sent it. A new header layout gets a new version.
//
// # Sessions, sequence numbers and retries
//
// OpSessionOpen (38), OpSessionRenew (39) and OpSessionClose (40) keep the
// session of the header alive (SessionService; see package meta, "Sessions
// and leases"): open handles belong to it, and a remote client without a
// registered session cannot hold any. OpSessionOpen carries the handles a
// client re-registers after a server restart (u32 count, then per handle
// u64 ino, u32 count, u8 write) and answers the lease (i64 ns), as does
// OpSessionRenew. The client package registers and renews the session;
// metarpc only carries it.
//
// In a session, every mutation (SetAttr, Create, CreateOpen, Mkdir,
// Symlink, Link, Unlink, UnlinkAt, Rmdir, RmdirAt, Rename, SetXattr,
// RemoveXattr, WriteDone, SetLayout) gets the session's next sequence
// number, and a mutation whose connection broke or timed out in the
// transport (EIO or ETIMEDOUT that is not the server's answer) is sent again
// with the same number, with backoff, until the caller's ctx ends: the
// server answers a request it already applied with the reply it stored
// (request dedupe, package meta). A new number is handed out only while
// the oldest mutation still waiting for its reply is less than
// proto.MaxPendingRequests behind, the replies the server keeps per
// session. Open, Release and ReleaseMany are numbered and retried the
// same way (the server remembers their numbers in memory, with the handle
// counts, so a retry neither counts nor drops a handle twice). Reads are
// sent once. Without a session nothing is retried.
//
// # Locks and atomic append (op codes 50..59)
//
// OpLock (50) carries the inode, a lock (u64 owner, u8 flock, u8 type:
// 0 read, 1 write, 2 unlock, u64 start, u64 end inclusive, u32 pid) and
// a u8 mode (proto.LockMode: 0 set, 1 test, 2 reclaim after a restart);
// it answers a lock (the conflicting one for a test; type 2: none).
// OpLockWait (51) carries the same request and answers nothing, once the
// lock may be free or after a bounded wait (it grants nothing). OpAppend
// (52) carries an inode and a length and answers the attributes with Size
// the end of the reserved range (package meta, "Atomic append");
// OpAppendReclaim (53) carries an inode and how far the client wrote, after
// a server restart. Lock set and reclaim and OpAppendReclaim are sent like
// mutations (numbered, retried after a broken connection: doing one twice
// leaves the same state); Append is numbered and retried too, and the
// server answers a retry with the range it already gave; tests and waits
// are sent once.
//
// OpMemberStatus (54) carries nothing and answers the answering member's
// own raft state (id, leader, term, commit, applied, last index,
// snapshot) and the group as it applied it (each member's id, address,
// flags learner/leader/active/snapshot, and, from the leader, its match
// index), in the layout of OpStatus's replica part (version 2). Any
// member answers it, a follower too (`weft status` asks each member);
// root only, as OpStatus.
//
// # A replicated metadata group: finding and following the leader
//
// NewClient takes one address or a comma-separated list of members of a
// replicated group (any of them: followers' only will do). Requests go to
// one member at a time (cluster.go). A member that is not the leader
// answers EAGAIN, with nothing done; the client then asks that member
// OpGroup (41; 41..44 are the group's) — u8 version, fsid, the
// member's id, the leader's id and address, the term, and the members'
// ids and addresses — learns the members and goes to the leader, or, with
// no leader known (an election), backs off (20 ms doubling to 250 ms) and
// tries again, until the caller's ctx ends. A request refused with EAGAIN
// is always sent again. When the member cannot be reached (refused,
// broken, or no answer within 5 s per attempt when there are several
// members: a partitioned member only drops packets) the next member
// becomes current; the request is sent again there if it is a read or a
// session call (do), or a mutation in a session (mutate: same sequence
// number, so the server's dedupe answers it with the first attempt's reply
// if that was applied; a server's ETIMEDOUT, outcome unknown, is retried
// the same way). A mutation without a session is never sent twice. A
// single server never answers EAGAIN for this, and with one address
// nothing changes.
//
// Quotas (quota.go, QuotaService; 86..89 are the quotas'): OpSetQuota
// (86: kind, id, inode and byte limits), OpGetQuota (87: kind and id; the
// usage and limits), OpSetProject (88: ino, project id, recursive; the
// count tagged) and OpCheckQuota (89: repair; every account's recorded
// and recounted usage), each message starting with u8 version 1. They are
// sent like reads (do): each is idempotent, so sending one again after a
// broken connection leaves the same state.
//
// Open (36), CreateOpen (37) and Capability (35) carry an access mode
// (proto.Access, u8) and answer with a capability (u32 length + bytes,
// empty if none; package capability). Open and CreateOpen had op codes 17
// and 31 before they did; those are retired.
//
// WriteDone (18) is u64 ino, u64 end and an extension: u8 version (2),
// i64 mtime, the time of the writer's last write, which becomes the file's
// mtime (package meta), and u64 blocks, what the file's objects hold in
// 512-byte units (proto.NoBlocks: not reported). A request without the
// extension (from a client before it) is still read, as mtime 0 (the
// server's clock), and one of version 1 as reporting no blocks.
//
// The scrub's ops (93 report, 94 start, 95 status; scrub.go) start
// every message with a format byte (1). A report carries at most
// proto.MaxScrubFound objects, a status at most proto.MaxScrubLost lost
// ones.
//
// Attributes (proto.Attr) end with u64 blocks (st_blocks) since it was
// added; peers from before it cannot read them.
//
// Invariants:
//   - Decoding never panics and never allocates more than the input can
//     justify (wire.Decoder bounds every length and count); FuzzDecode runs
//     every request and response decoder on arbitrary input, FuzzHeader the
//     header decoder.
//   - The handler answers a request that does not decode with EINVAL (and
//     logs it), an unknown op with ENOSYS; service errors travel as their
//     syscall.Errno, so errors.Is works on the client side.
//   - The client's only state is its session id and the sequence numbers
//     of its mutations; reconnects belong to the transport's Pool. Only
//     mutations in a session are retried, and only because the server
//     deduplicates them.
package metarpc
