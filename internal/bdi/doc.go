// Package bdi tunes the kernel's per-mount "backing device info" of a FUSE
// mount through sysfs (/sys/class/bdi/MAJOR:MINOR/).
//
// Why: a FUSE daemon can only lower the read-ahead window the kernel offers
// in FUSE_INIT (128 KiB by default), never raise it, so buffered sequential
// reads reach the daemon as 128 KiB requests however large max_read is. The
// window lives in the mount's bdi and root may raise it after mounting;
// then the kernel sends read-ahead requests of up to max_pages (1 MiB).
//
// Invariant: nothing here is needed for correctness. Callers treat an error
// (not root, no sysfs, an old kernel) as "keep the kernel's default" and
// log it.
package bdi
