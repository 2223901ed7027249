package layout

import "testing"

// TestObjectFileOffsets checks ObjectOffset and FileOffset against
// Extents for every offset of a few rows, for RAID-0, mirror and EC
// layouts (whose data columns are the EC data shards).
func TestObjectFileOffsets(t *testing.T) {
	var layouts []Layout
	for _, c := range []int32{1, 3, 4} {
		layouts = append(layouts,
			Layout{StripeSize: 64 << 10, StripeCount: c},
			Layout{Kind: Mirror, Mirror: 2, StripeSize: 64 << 10, StripeCount: c},
			Layout{Kind: EC, ECData: 2, ECParity: 1, StripeSize: 64 << 10, StripeCount: c})
	}
	for _, l := range layouts {
		l.Targets = make([]TargetID, int(l.StripeCount)*l.Width())
		for i := range l.Targets {
			l.Targets[i] = TargetID(i + 1)
		}
		c := l.Columns()
		size := 5 * uint64(c) * l.StripeSize
		step := uint64(4093) // not a divisor of the stripe size
		for off := uint64(0); off < size; off += step {
			e := l.Extents(off, 1)[0]
			if got := l.FileOffset(e.Stripe, e.ObjOff); got != off {
				t.Fatalf("count %d: FileOffset(%d, %d) = %d, want %d", c, e.Stripe, e.ObjOff, got, off)
			}
			for s := range c {
				o := l.ObjectOffset(s, off)
				f := l.FileOffset(s, o)
				if f < off {
					t.Fatalf("count %d: ObjectOffset(%d, %d) = %d maps back to %d < off", c, s, off, o, f)
				}
				// Nothing of stripe s lies in [off, f).
				for _, x := range l.Extents(off, f-off) {
					if x.Stripe == s {
						t.Fatalf("count %d: stripe %d has bytes at %d, before ObjectOffset's %d (file %d)", c, s, x.FileOff, o, f)
					}
				}
			}
		}
	}
}
