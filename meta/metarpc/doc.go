// Package metarpc carries proto.MetaService and proto.TargetRegistry over
// the transport: request and response codecs for every operation (op codes
// 1..99), a Client that implements both interfaces, and a Handler that
// serves them.
//
// Each message is a flat sequence of wire fields (little-endian integers,
// length-prefixed strings); a request body is exactly one message, with no
// trailing bytes. Op codes and field order are the protocol: add new ops,
// never renumber or reorder.
//
// Open (36), CreateOpen (37) and Capability (35) carry an access mode
// (proto.Access, u8) and answer with a capability (u32 length + bytes,
// empty if none; package capability). Open and CreateOpen had op codes 17
// and 31 before they did; those are retired.
//
// Invariants:
//   - Decoding never panics and never allocates more than the input can
//     justify (wire.Decoder bounds every length and count); FuzzDecode runs
//     every request and response decoder on arbitrary input.
//   - The handler answers a request that does not decode with EINVAL (and
//     logs it), an unknown op with ENOSYS; service errors travel as their
//     syscall.Errno, so errors.Is works on the client side.
//   - The client adds no state: retries and reconnects belong to the
//     transport's Pool, and operations are not retried (they need not be
//     idempotent).
package metarpc
