// Command mdload loads a metadata server (and optionally its storage
// servers) with many files, calling the RPCs directly instead of going
// through FUSE, so that a million files take minutes rather than hours. It
// is a measuring tool (scripts/measure-memory.sh uses it for the "Memory"
// section of docs/performance.md), not part of weft.
//
//	mdload --meta HOST:PORT [--files 1000000] [--dirs 1000] [--workers 64]
//	       [--objects K] [--object-size 4KiB] [--targets 1]
//	       [--watch NAME=PID,...] [--du NAME=DIR,...]
//
// It makes a fresh directory mdload-<unix nanoseconds> under the root, DIRS
// directories d0000.. in it, and then FILES empty regular files, file i in
// directory i mod DIRS. Each of the first K files also gets one object of
// the given size, written to its first stripe's target through the storage
// RPCs, followed by WriteDone so the metadata records the size, as a real
// client does on close.
//
// The files are made in four equal rounds (plus one ending at K when K
// falls inside a round). Between rounds nothing is in flight, so the line
// printed after each round describes the servers at exactly that many
// files: the elapsed time and create rate, VmRSS and VmHWM of every
// watched process (from /proc/PID/status) and the space allocated under
// every --du directory.
//
// Invariants: every create is exclusive (a name clash is an error, not a
// silent reuse), and the first error stops the run with a non-zero exit.
package main
