// Package fuseceiling mounts the reference FUSE file system that weft's
// performance is compared against: go-fuse's loopback over a directory
// (normally on tmpfs), with kernel passthrough disabled so every byte goes
// through the daemon, copied, the way weft's data must. Its numbers are the
// ceiling of what any FUSE daemon built on go-fuse can reach on the machine.
//
// Mount options match what a weft mount uses where it matters: 1 MiB
// maximum request (MaxWrite) and read-ahead, extended attributes enabled
// (so the kernel asks for security.capability before writes, as it does on
// weft, which serves user.weft.* xattrs), one-second entry and attribute
// timeouts.
//
// Invariant: Unmount always leaves the mountpoint unmounted when it returns
// nil; if the regular unmount fails (busy), it detaches lazily.
package fuseceiling
