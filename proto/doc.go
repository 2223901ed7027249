// Package proto defines the vocabulary that crosses process boundaries in
// weft: inode numbers, attributes, directory entries, object ids, target
// descriptions, and the two service contracts (MetaService, StorageService)
// that the client programs against.
//
// The server packages (meta, storage) implement these contracts, and each
// also provides an RPC stub that implements the same interface over the
// transport, so the client cannot tell a local fake from a remote server.
//
// Every request's ctx carries who asks (WithCred), in which session
// (WithSession), as which mutation (WithSeq) and for which job (WithJob):
// one context value, set at once by the RPC handlers (WithRequest).
//
// Errors: every service method returns either nil or an error that matches a
// syscall.Errno with errors.Is (ENOENT, EEXIST, ENOSPC, EIO, ...). The FUSE
// adapter hands that errno to the kernel unchanged; any other error becomes
// EIO. RPC stubs preserve the errno across the wire.
package proto
