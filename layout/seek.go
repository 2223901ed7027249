package layout

// ObjectOffset returns the first offset of data column stripe (a RAID-0
// or mirror stripe, an EC data shard: see Columns) whose bytes lie at or
// after file offset off: off's own place in the object if off falls in a
// unit of that column, else the start of the column's next unit. So the
// file range [a, b) occupies [ObjectOffset(s, a), ObjectOffset(s, b)) of
// each column s. The layout must be a valid file layout.
func (l Layout) ObjectOffset(stripe int, off uint64) uint64 {
	s, c := l.StripeSize, uint64(l.Columns())
	unit, in := off/s, off%s
	first := unit - unit%c // the first unit of off's row
	i := uint64(stripe)
	switch {
	case unit%c == i:
		return (unit/c)*s + in
	case unit%c < i:
		return (first / c) * s // the stripe's unit later in the same row
	default:
		return (first/c + 1) * s // the stripe's unit in the next row
	}
}

// FileOffset returns the file offset of byte objOff of data column stripe.
func (l Layout) FileOffset(stripe int, objOff uint64) uint64 {
	s, c := l.StripeSize, uint64(l.Columns())
	k, in := objOff/s, objOff%s
	return (k*c+uint64(stripe))*s + in
}
