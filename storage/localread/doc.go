// Package localread is the client side of short-circuit local reads: a
// mount on the same host as a storage server reads that server's objects
// from their files itself, instead of asking the server over TCP (a
// loopback round trip costs about as much CPU as the rest of a 4 KiB
// read: docs/performance.md). The idea is HDFS's short-circuit local
// reads; the server side is storage's local.go, the protocol storagerpc's
// local.go.
//
// Reader wraps a storagerpc.Client. The first read of a target asks its
// server (storagerpc OpLocalInfo, over TCP) for its local socket and
// random id, in the background (that read, and all until the answer,
// go over RPC); if the socket exists on this host, is served by root or
// this process's user (SO_PEERCRED), and answers with the same id, the
// target's server is local. A read of an object then asks the socket,
// with the file's read capability, for the object's data file and
// sidecar (two O_RDONLY descriptors, SCM_RIGHTS) once, and preads them.
// The first read after that open is most often of a small file read once,
// from the disk: it starts its data's read (POSIX_FADV_WILLNEED) before it
// reads the sidecar's first page (its header, and the entries of the
// object's first 508 blocks, just under 2 MiB, which that read then takes
// from it), so the two disk reads overlap instead of following each other.
//
// Invariants:
//   - Every block a local read returns matched its sidecar entry's cur or
//     prev (storagerpc.CheckBlocks, the one block checksum rule; the
//     sidecar's format is checked at open with storage.CheckSidecarHeader),
//     so a local read is checked exactly as the server's Read checks.
//   - Anything else reads over RPC (storagerpc.Client.Read, which takes
//     the object's lock, and reports corruption and fails with EIO, or
//     returns the bytes of a write that raced): a checksum mismatch (a
//     write under way, or corruption), a file shorter than its fstat said,
//     an object removed (st_nlink 0: a rebuild may replace its file), a
//     missing object, a refused capability, a failed socket, a server that
//     restarted (another id). Writes never go through here.
//   - A read of at least Options.DirectMin bytes (128 KiB), aligned, and
//     any aligned read of a handle its application opened with O_DIRECT
//     (proto.WithUncached), bypasses the page cache (O_DIRECT, on a
//     second open of the same data file through /proc/self/fd, made on
//     first use; none to be had, as on tmpfs, leaves the reads cached).
//     It is checked as every other read, and coherent with the server's
//     buffered writes: the kernel writes a range's dirty pages back
//     before a direct read of it.
//   - Descriptors are used only with the very capability bytes the server
//     checked, and not past its expiry; at most Options.MaxOpen objects
//     (DefaultMaxOpen, 1024; two descriptors each, three once read
//     directly) stay open, least
//     recently used dropped first, and an entry's descriptors are closed
//     once no read uses them. Forget drops an inode's (the client calls
//     it when the file's last handle is released); an error drops the
//     object's; a new generation of a file names other objects.
//   - Reads take no lock on the server: storage's reads counters (weft df)
//     do not count them.
package localread
