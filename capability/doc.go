// Package capability is weft's data-access token: a grant, signed by the
// metadata server, to read or write the objects of one inode on the storage
// servers until an expiry. It plays the part of Ceph's cephx capabilities
// and Lustre's capabilities: storage servers hold no namespace and no
// permissions, so the metadata server decides who may touch a file's data
// (at Open, CreateOpen and the Capability op, by the inode's mode bits and
// the caller's credentials) and storage servers only check its signature.
//
// # Format (version 2)
//
// All integers little-endian; 68 bytes plus the holder's name:
//
//	off  len  field
//	0    1    version (2; version 1 had no gen and is refused)
//	1    1    key id: which shared key signed it (0 until key rotation exists)
//	2    1    rights: proto.Access bits (1 read, 2 write); other bits must be 0
//	3    1    n, the length of holder (0..MaxHolder)
//	4    8    ino: the inode; the capability covers all its stripe objects
//	12   8    issued: unix nanoseconds by the metadata server's clock
//	20   8    expiry: unix nanoseconds by the metadata server's clock
//	28   8    gen: the file's generation (proto.Attr.Gen; 0 for files made before generations)
//	36   n    holder: certificate name of the client it was issued to ("" = any)
//	36+n 32   HMAC-SHA256 over bytes [0, 36+n) with the shared key
//
// # Invariants
//
//   - Only holders of the shared key (metadata and storage servers, 32 bytes
//     from the key bundle's capability.key) can make a capability that
//     verifies; the MAC covers every other byte, so changing any field,
//     including the version and key id, breaks it. MACs are compared in
//     constant time (hmac.Equal).
//   - Verify accepts a capability until its expiry plus Skew by the
//     verifier's clock: Skew is the clock difference between metadata and
//     storage servers that is tolerated (NTP keeps them far closer). A
//     capability's lifetime (expiry - issued) is measured on the issuer's
//     clock only, so a client schedules renewal by its own clock from the
//     moment it received one, and client clocks do not matter.
//   - A capability with rights read allows Read; write is needed for Write,
//     Truncate and Sync. It names one inode and one generation of it; a
//     request for an object of another inode, or of another generation of
//     the same inode number (reused after a metadata rollback or restore),
//     is refused whatever the rights.
//   - A non-empty holder binds the capability to one client identity: a
//     storage server refuses it from a peer with another certificate name,
//     so a capability seen on the wire is useless to another client host.
//   - Parse and Verify never panic, and refuse truncated input, trailing
//     bytes, unknown versions and unknown rights bits (fuzzed). An unknown
//     version is refused before any field is trusted, so a future format can
//     change everything after the first byte.
//   - Parse does not verify: clients (which do not hold the key) use it to
//     read the lifetime; servers use only Verify.
package capability
