package layout

import (
	"errors"
	"fmt"

	"github.com/weft-fs/weft/wire"
)

// TargetID names a storage target. It is assigned by the metadata server
// when the target first registers and never changes.
type TargetID uint32

// Defaults of the filesystem-wide layout, used when neither the file nor any
// of its directories set one. They match Lustre's defaults in spirit: 1 MiB
// units; unlike Lustre, files stripe over 4 targets by default so that a
// single stream already uses several servers.
const (
	DefaultStripeSize  = 1 << 20
	DefaultStripeCount = 4
	// AllTargets as a stripe count means "every target in the filesystem".
	AllTargets = -1
	// MinStripeSize and MaxStripeSize bound what setstripe accepts; 64 KiB is
	// Lustre's minimum, 4 GiB keeps unit arithmetic far from overflow.
	MinStripeSize = 64 << 10
	MaxStripeSize = 4 << 30
	// MaxStripeCount bounds the stripe count (and the targets list).
	MaxStripeCount = 2000
)

// Layout describes how a file is striped. For a directory it is the default
// that new children inherit, and Targets is normally empty (chosen per file).
type Layout struct {
	StripeSize  uint64     // bytes per stripe unit
	StripeCount int32      // number of stripes; AllTargets (-1) on a directory default
	Targets     []TargetID // for a file: the target of each stripe, in stripe order
}

// ErrInvalid is returned for a layout that cannot be used.
var ErrInvalid = errors.New("layout: invalid")

// Default returns the filesystem-wide default layout.
func Default() Layout {
	return Layout{StripeSize: DefaultStripeSize, StripeCount: DefaultStripeCount}
}

// ValidatePolicy checks the size and count of a layout given by a user (a
// directory default or a setstripe request).
func (l Layout) ValidatePolicy() error {
	if l.StripeSize < MinStripeSize || l.StripeSize > MaxStripeSize {
		return fmt.Errorf("%w: stripe size %d outside [%d, %d]", ErrInvalid, l.StripeSize, MinStripeSize, MaxStripeSize)
	}
	if l.StripeSize%(64<<10) != 0 {
		return fmt.Errorf("%w: stripe size %d is not a multiple of 64 KiB", ErrInvalid, l.StripeSize)
	}
	if l.StripeCount == 0 || l.StripeCount < AllTargets || l.StripeCount > MaxStripeCount {
		return fmt.Errorf("%w: stripe count %d (want -1 or 1..%d)", ErrInvalid, l.StripeCount, MaxStripeCount)
	}
	return nil
}

// ValidateFile checks a file's resolved layout: targets chosen, one per stripe,
// no target used twice.
func (l Layout) ValidateFile() error {
	if err := l.ValidatePolicy(); err != nil {
		return err
	}
	if l.StripeCount < 1 || int(l.StripeCount) != len(l.Targets) {
		return fmt.Errorf("%w: stripe count %d with %d targets", ErrInvalid, l.StripeCount, len(l.Targets))
	}
	seen := make(map[TargetID]bool, len(l.Targets))
	for _, t := range l.Targets {
		if seen[t] {
			return fmt.Errorf("%w: target %d used twice", ErrInvalid, t)
		}
		seen[t] = true
	}
	return nil
}

// Extent is one contiguous piece of a file range that lives in one object.
type Extent struct {
	Stripe  int    // index into Targets
	FileOff uint64 // where the piece starts in the file
	ObjOff  uint64 // where it starts in the object
	Len     uint64
}

// Extents maps the file range [off, off+n) onto objects. The layout must be
// a valid file layout.
func (l Layout) Extents(off, n uint64) []Extent {
	if n == 0 {
		return nil
	}
	s, c := l.StripeSize, uint64(l.StripeCount)
	out := make([]Extent, 0, n/s+2)
	for n > 0 {
		unit := off / s
		inUnit := off % s
		piece := min(s-inUnit, n)
		out = append(out, Extent{
			Stripe:  int(unit % c),
			FileOff: off,
			ObjOff:  (unit/c)*s + inUnit,
			Len:     piece,
		})
		off += piece
		n -= piece
	}
	return out
}

// ObjectSize returns how many bytes object stripe holds for a file of size
// fileSize: the end of the last byte of the file that maps into it.
func (l Layout) ObjectSize(fileSize uint64, stripe int) uint64 {
	s, c := l.StripeSize, uint64(l.StripeCount)
	fullUnits := fileSize / s // units 0..fullUnits-1 are complete
	tail := fileSize % s
	i := uint64(stripe)
	// Complete units that belong to this stripe: i, i+c, i+2c, ... < fullUnits.
	var size uint64
	if fullUnits > i {
		k := (fullUnits - i + c - 1) / c // count of complete units of this stripe
		size = k * s
	}
	// The partial unit, if any, is unit fullUnits.
	if tail > 0 && fullUnits%c == i {
		size = (fullUnits/c)*s + tail
	}
	return size
}

// Encode appends the layout to e.
func (l Layout) Encode(e *wire.Encoder) {
	e.U64(l.StripeSize)
	e.U32(uint32(l.StripeCount))
	e.U32(uint32(len(l.Targets)))
	for _, t := range l.Targets {
		e.U32(uint32(t))
	}
}

// Decode reads a layout written by Encode. It checks only the shape of the
// bytes; callers validate meaning with ValidatePolicy or ValidateFile.
func Decode(d *wire.Decoder) Layout {
	var l Layout
	l.StripeSize = d.U64()
	l.StripeCount = int32(d.U32())
	n := d.Count(MaxStripeCount, 4)
	if n > 0 {
		l.Targets = make([]TargetID, n)
		for i := range l.Targets {
			l.Targets[i] = TargetID(d.U32())
		}
	}
	return l
}

// Clone returns a deep copy.
func (l Layout) Clone() Layout {
	c := l
	c.Targets = append([]TargetID(nil), l.Targets...)
	return c
}

func (l Layout) String() string {
	return fmt.Sprintf("stripe_size=%d stripe_count=%d targets=%v", l.StripeSize, l.StripeCount, l.Targets)
}
