// Package layout is the pure arithmetic of striping: how a file's bytes map
// onto the objects that hold them, and how those objects are protected.
//
// A file with stripe size S and stripe count C is cut into units of S bytes;
// unit u lives in stripe u mod C at object offset (u div C)*S. This is the
// RAID-0 layout Lustre calls "raid0" and BeeGFS calls "buddy-less striping".
//
// A layout has a Kind: RAID0 (one object per stripe), Mirror (Mirror
// copies of every stripe object, 2..5) or EC (ECData data and ECParity
// parity shards per stripe, K <= 16, M <= 4). Units are dealt round-robin
// over Columns() data columns: the stripes (RAID-0, mirror) or the data
// shards of all stripes (EC: column c is shard c mod K of stripe c div K,
// so the K units of one row of a stripe are contiguous in the file, and
// RowBytes() is a full-stripe write). Width() is the number of objects per stripe; a file's
// objects are numbered by slot, stripe s owning slots s*Width() ..
// s*Width()+Width()-1, and Targets[slot] holds each. The slot is the
// object's stripe number on its target (proto.ObjectID.Stripe), so RAID-0
// objects keep their names. Stale lists the slots whose object missed a
// write (its server was down); they are never read until repaired.
//
// Invariants:
//   - Extents returns pieces in file order that exactly cover the requested
//     range, never crossing a stripe-unit boundary; Extent.Stripe is the
//     data column (ColumnSlot gives its object's slot).
//   - ObjectSize is consistent with Extents: the bytes of a file of size n
//     that land in column i end at ObjectSize(n, i), on every copy.
//   - A valid file layout (ValidateFile) has Width() targets per stripe, no
//     target twice, stale slots in order and in range, and at least
//     MinFresh() objects of every stripe not stale.
//   - Layouts have two binary formats, frozen once released: format 1
//     (EncodeV1/DecodeV1: RAID-0 only, what was stored before kinds) and
//     format 2 (EncodeV2/DecodeV2: kind, copies, shards, stale slots). The
//     container says which it holds: meta's store records by their version
//     (meta/layoutdisk.go), RPC messages by a version byte of their own
//     (proto.LayoutWireFormat), so neither can change the other.
//   - Nothing here does I/O; the client computes placement alone, so the
//     metadata server is never on the data path.
package layout
