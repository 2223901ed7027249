// Package testcluster starts a real weft cluster for integration tests: one
// `weft meta`, S `weft storage` processes holding N targets in temporary
// directories, and M `weft mount` FUSE mounts, all as separate processes
// talking TCP over loopback, exactly as an operator would run them.
//
// The weft binary is built once per test binary (go build into a temporary
// directory; WEFT_BIN names a prebuilt one instead). Start returns only when
// every mount is live and every target reports "up" through the user.weft.df
// virtual xattr, so a test can use the mount at once.
//
// Invariants:
//   - Cleanup always runs, even when the test fails or panics: every
//     mountpoint is lazily unmounted (fusermount3 -u -z), every process still
//     running is SIGKILLed and waited for, and the temporary directory is
//     removed (set WEFT_KEEP=1 to keep it). Children also get SIGKILL through
//     Pdeathsig if the test binary dies.
//   - Each process logs to <dir>/logs/<name>.log, appended across restarts;
//     on failure the tail of every log is written to the test log.
//   - A restarted process keeps its address and directories, so the rest of
//     the cluster finds it again by itself; that is what the failure and
//     crash tests rely on.
//   - Every process authenticates (mutual TLS, package auth) with the
//     bundle of its role from a key set made once per cluster in
//     <dir>/keys (Cluster.Keys names them); GenerateKeys makes a key set
//     for processes a test starts without a Cluster.
//   - /dev/fuse must exist: Start fails (never skips) without it.
//   - With Options.NetNS every storage server runs in a network namespace
//     of its own behind a veth pair (netns.go); PartitionStorage and
//     HealStorage cut and restore its link while it keeps running. The
//     namespaces and veths are deleted in cleanup, and those left by a
//     test binary that died are deleted by the next Start with NetNS.
//     Without the right to create namespaces Start fails, never skips.
//   - Clusters share nothing but the weft binary: each has its own
//     temporary directory, ports picked free (one taken by someone else
//     before it first binds is replaced; a restarted process takes its
//     port again, which another cluster could take meanwhile only by
//     drawing it from the kernel's ephemeral range), and namespace and
//     veth names with a
//     random tag and a subnet chosen under a file lock. So tests that each
//     start a cluster can run in parallel (t.Parallel), as the slow ones
//     in tests/ do.
package testcluster
