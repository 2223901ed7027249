// Package metarpc carries proto.MetaService and proto.TargetRegistry over
// the transport: request and response codecs for every operation (op codes
// 1..99), a Client that implements both interfaces, and a Handler that
// serves them.
//
// Each message is a flat sequence of wire fields (little-endian integers,
// length-prefixed strings). A request body is the request header followed
// by exactly one message, with no trailing bytes; a response body is one
// message. Op codes and field order are the protocol: add new ops, never
// renumber or reorder.
//
// # Request header (version 1)
//
//	u8      version = 1 (HeaderVersion)
//	u32     uid
//	u32     gid
//	u32     n: supplementary groups, at most proto.MaxGroups
//	n × u32 the groups
//	16 B    session id
//
// The Client fills it from proto.CredFrom(ctx), or, when ctx has none,
// from this process's effective uid, gid and groups (WithCred overrides
// that default: the background work of a mount, admin tools), and from its
// session id (random per Client; WithSession). The handler decodes it
// (EINVAL if malformed or of an unknown version) and serves the request
// with the credentials and session in ctx; the service (meta.Server)
// authorizes them against the authenticated peer (root squash, client
// allow-list) and checks every operation. A header is never trusted more
// than the peer that sent it. A new header layout gets a new version.
//
// Open (36), CreateOpen (37) and Capability (35) carry an access mode
// (proto.Access, u8) and answer with a capability (u32 length + bytes,
// empty if none; package capability). Open and CreateOpen had op codes 17
// and 31 before they did; those are retired.
//
// Invariants:
//   - Decoding never panics and never allocates more than the input can
//     justify (wire.Decoder bounds every length and count); FuzzDecode runs
//     every request and response decoder on arbitrary input, FuzzHeader the
//     header decoder.
//   - The handler answers a request that does not decode with EINVAL (and
//     logs it), an unknown op with ENOSYS; service errors travel as their
//     syscall.Errno, so errors.Is works on the client side.
//   - The client adds no state: retries and reconnects belong to the
//     transport's Pool, and operations are not retried (they need not be
//     idempotent).
package metarpc
