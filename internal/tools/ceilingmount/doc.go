// Command ceilingmount holds the FUSE ceiling's mount (package
// bench/fuseceiling: go-fuse loopback, kernel passthrough off) open until
// it is told to stop, so that other tools (fio, iobench) can run on it:
// weft bench fuse-ceiling mounts it only for its own IO500 phases. It is
// a measuring tool (scripts/bench-reads.sh uses it), not part of weft.
//
//	ceilingmount BACKING MOUNTPOINT
//
// It prints "mounted" on stdout once the mount serves, and unmounts on
// SIGINT or SIGTERM (lazily if busy), then exits.
package main
