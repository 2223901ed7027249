// Package bench runs the IO500 workloads against any directory: a weft
// mount, ext4, tmpfs or another FUSE file system.
//
// The coordinator (Run) starts one worker per rank. Local workers are
// separate OS processes (the weft binary re-executed as `weft bench worker`,
// talking over its stdin/stdout), the way MPI ranks load a mount; remote
// workers are `weft bench worker --listen host:port` processes on other
// client machines, each connection spawning one such child there. Both speak
// the same small protocol: one JSON object per line (see protocol.go).
//
// The phases follow the IO500 rules (ISC25/SC25 lists) in their order:
//
//	ior-easy-write      one file per rank, 2 MiB transfers, stonewalled
//	mdtest-easy-write   empty files, one directory per rank, stonewalled
//	(timestamp)         the reference file for find
//	ior-hard-write      47,008-byte records interleaved by all ranks in one file, stonewalled
//	mdtest-hard-write   3,901-byte files in one shared directory, stonewalled
//	find                files newer than the timestamp, of 3,901 bytes, named *01*
//	ior-easy-read       every rank reads its neighbour's file, verified
//	mdtest-easy-stat
//	ior-hard-read       every rank reads its neighbour's records, verified
//	mdtest-hard-stat    (checks the size)
//	mdtest-easy-delete
//	mdtest-hard-read    verified
//	mdtest-hard-delete
//	ior-rnd4K-easy-read random 4 KiB reads of the ior-easy files, stonewalled, verified
//
// Invariants:
//   - Stonewalling is IOR's "wear-out": a stonewalled phase runs until the
//     stonewall time (or a rank's per-process cap), then every rank continues
//     to the largest count any rank reached, so all ranks do the same work and
//     files have no holes. The phase time includes the wear-out.
//   - Every byte written is a function of (writer rank, file offset)
//     (pattern.go), so any reader can verify any byte without coordination.
//     Reads of rank r go to the data of rank (r+1) mod n, like IO500's task
//     reordering (-C -Q 1 and mdtest -N 1).
//   - The bandwidth score is the geometric mean of ior-easy-write,
//     ior-easy-read, ior-hard-write and ior-hard-read (GiB/s); the metadata
//     score is the geometric mean of the seven mdtest phases and find
//     (kIOPS); the total is sqrt(bandwidth*metadata). ior-rnd4K-easy-read is
//     reported but, as in IO500's ISC25/SC25 rules, does not enter a score.
//   - The coordinator never touches the file system itself: only workers do,
//     so the coordinator may run on a machine without the mount.
package bench
