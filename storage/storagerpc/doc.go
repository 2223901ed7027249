// Package storagerpc carries proto.StorageService over the transport: the
// message codecs, a Client that implements proto.StorageService by calling a
// storage server, and NewHandler that serves one.
//
// Operations (storage RPCs use op codes 100..199) and their bodies, all
// integers little-endian, built from wire primitives:
//
//	OpRead     100  target u32, ino u64, stripe u32, off u64, len u32  -> the bytes read
//	OpWrite    101  target u32, ino u64, stripe u32, off u64, data (u32 length + bytes) -> version u64
//	OpTruncate 102  target u32, ino u64, stripe u32, size u64          -> empty
//	OpSync     103  target u32, ino u64, stripe u32                    -> empty
//	OpRemove   104  target u32, ino u64, stripe u32                    -> empty
//	OpRemoveMany 105  target u32, count u32, (ino u64, stripe u32) x count  -> empty
//
// Invariants:
//   - The Client sends a write's header and its data as separate parts of
//     one frame, so the data is not copied; the handler decodes the data as
//     a slice of the request (no copy either).
//   - One RPC moves at most MaxIO bytes; the Client splits larger reads and
//     writes (a split write returns the version of its last piece).
//   - Read buffers are bounded: a read takes its buffer's size (a power of
//     two, 4 KiB to MaxIO) from its connection's budget
//     (HandlerOptions.ReadBytesPerConn, default 64 MiB; the connection is
//     the transport.Peer's Addr) and then from the server's
//     (ReadBytesPerServer, default 512 MiB) before the buffer is taken, and
//     gives it back once the response is written or dropped with the
//     connection (transport.AfterResponse), or at once on an error or an
//     in-process call. A read over budget waits, and fails with EINTR or
//     ETIMEDOUT when its ctx ends (its connection closed). So a client that
//     pipelines reads and never reads the responses pins at most its
//     connection's budget. Write bodies are never held past the handler
//     (DoneWithRequest); the transport bounds request bodies.
//   - Decoders never panic and reject truncated input, trailing bytes and
//     over-long lengths (each is fuzzed). The handler logs a malformed
//     request and answers EINVAL, an unknown op ENOSYS, and passes on the
//     service's errno otherwise: ESTALE for a target the server does not
//     serve (see storage.ErrUnknownTarget), so a client can tell a wrong
//     target map from a missing object (which is not an error).
package storagerpc
