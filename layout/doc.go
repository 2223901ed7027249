// Package layout is the pure arithmetic of striping: how a file's bytes map
// onto the objects that hold them, one object per stripe, each on its own
// storage target.
//
// A file with stripe size S and stripe count C is cut into units of S bytes;
// unit u lives in object u mod C at object offset (u div C)*S. This is the
// RAID-0 layout Lustre calls "raid0" and BeeGFS calls "buddy-less striping".
//
// Invariants:
//   - Extents returns pieces in file order that exactly cover the requested
//     range, never crossing a stripe-unit boundary.
//   - ObjectSize is consistent with Extents: the bytes of a file of size n
//     that land in object i end at ObjectSize(n, i).
//   - Nothing here does I/O; the client computes placement alone, so the
//     metadata server is never on the data path.
package layout
