package layout

import (
	"errors"
	"fmt"
	"slices"

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

// Kind is a layout's protection scheme.
type Kind uint8

const (
	// RAID0 stripes a file over its targets with no redundancy: one object
	// per stripe.
	RAID0 Kind = 0
	// Mirror keeps Mirror copies of every stripe object, each on a target
	// of a distinct server (failure domain).
	Mirror Kind = 1
	// EC protects each stripe with Reed-Solomon: ECData data shards and
	// ECParity parity shards, each on a distinct server (failure domain).
	EC Kind = 2
)

func (k Kind) String() string {
	switch k {
	case RAID0:
		return "raid0"
	case Mirror:
		return "mirror"
	case EC:
		return "ec"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Bounds of the protection schemes.
const (
	MinMirror   = 2
	MaxMirror   = 5
	MaxECData   = 16
	MaxECParity = 4
)

// Layout describes how a file is striped. For a directory it is the default
// that new children inherit, and Targets is normally empty (chosen per file).
//
// A file's objects are numbered by slot: stripe s has Width() slots,
// s*Width() .. s*Width()+Width()-1, one per copy (Mirror) or shard (EC,
// data shards first), and Targets[slot] holds that object. The slot is the
// object's stripe number on its target (proto.ObjectID.Stripe), so a RAID-0
// file's slots are its stripes, as before kinds existed.
type Layout struct {
	Kind     Kind
	Mirror   uint8 // Mirror: the number of copies (MinMirror..MaxMirror); 0 otherwise
	ECData   uint8 // EC: data shards per stripe (1..MaxECData); 0 otherwise
	ECParity uint8 // EC: parity shards per stripe (1..MaxECParity); 0 otherwise

	StripeSize  uint64     // bytes per stripe unit
	StripeCount int32      // number of stripes; AllTargets (-1) on a directory default
	Targets     []TargetID // for a file: the target of each slot, in slot order

	// ObjectsSized says the file's objects are kept at least as long as
	// their share of the file size the metadata server records (clients
	// extend them before recording a larger size), so a shorter object is
	// lost data, never a hole. Set on every file placed since kinds exist.
	ObjectsSized bool

	// Stale lists, in increasing order, the slots of a file whose object
	// missed a write (its target was down): they are never read, and
	// written only by a repair, until the repair clears them. At least one
	// copy of every stripe is never stale.
	Stale []uint32
}

// ErrInvalid is returned for a layout that cannot be used.
var ErrInvalid = errors.New("layout: invalid")

// Default returns the filesystem-wide default layout.
func Default() Layout {
	return Layout{StripeSize: DefaultStripeSize, StripeCount: DefaultStripeCount}
}

// Width is the number of objects per stripe: 1 (RAID-0), the copies
// (Mirror) or the data plus parity shards (EC).
func (l Layout) Width() int {
	switch l.Kind {
	case Mirror:
		return int(l.Mirror)
	case EC:
		return int(l.ECData) + int(l.ECParity)
	}
	return 1
}

// Slot returns the slot of copy or shard j of stripe s.
func (l Layout) Slot(s, j int) int { return s*l.Width() + j }

// IsStale reports whether slot is marked stale.
func (l Layout) IsStale(slot int) bool {
	_, ok := slices.BinarySearch(l.Stale, uint32(slot))
	return ok
}

// WithStale returns a copy of l with slots added to the stale set.
func (l Layout) WithStale(slots ...uint32) Layout {
	c := l.Clone()
	for _, s := range slots {
		if i, ok := slices.BinarySearch(c.Stale, s); !ok {
			c.Stale = slices.Insert(c.Stale, i, s)
		}
	}
	return c
}

// WithoutStale returns a copy of l with slots removed from the stale set.
func (l Layout) WithoutStale(slots ...uint32) Layout {
	c := l.Clone()
	for _, s := range slots {
		if i, ok := slices.BinarySearch(c.Stale, s); ok {
			c.Stale = slices.Delete(c.Stale, i, i+1)
		}
	}
	if len(c.Stale) == 0 {
		c.Stale = nil
	}
	return c
}

// validKind checks the kind and its parameters.
func (l Layout) validKind() error {
	switch l.Kind {
	case RAID0:
		if l.Mirror != 0 || l.ECData != 0 || l.ECParity != 0 {
			return fmt.Errorf("%w: raid0 with mirror %d, ec %d+%d", ErrInvalid, l.Mirror, l.ECData, l.ECParity)
		}
	case Mirror:
		if l.Mirror < MinMirror || l.Mirror > MaxMirror {
			return fmt.Errorf("%w: mirror %d (want %d..%d copies)", ErrInvalid, l.Mirror, MinMirror, MaxMirror)
		}
		if l.ECData != 0 || l.ECParity != 0 {
			return fmt.Errorf("%w: mirror with ec %d+%d", ErrInvalid, l.ECData, l.ECParity)
		}
	case EC:
		if l.ECData < 1 || l.ECData > MaxECData || l.ECParity < 1 || l.ECParity > MaxECParity {
			return fmt.Errorf("%w: ec %d+%d (want 1..%d data and 1..%d parity shards)", ErrInvalid, l.ECData, l.ECParity, MaxECData, MaxECParity)
		}
		if l.Mirror != 0 {
			return fmt.Errorf("%w: ec with mirror %d", ErrInvalid, l.Mirror)
		}
	default:
		return fmt.Errorf("%w: unknown layout kind %d", ErrInvalid, l.Kind)
	}
	return nil
}

// ValidatePolicy checks the kind, size and count of a layout given by a
// user (a directory default or a setstripe request).
func (l Layout) ValidatePolicy() error {
	if err := l.validKind(); err != nil {
		return err
	}
	if l.StripeSize < MinStripeSize || l.StripeSize > MaxStripeSize {
		return fmt.Errorf("%w: stripe size %d outside [%d, %d]", ErrInvalid, l.StripeSize, MinStripeSize, MaxStripeSize)
	}
	if l.StripeSize%(64<<10) != 0 {
		return fmt.Errorf("%w: stripe size %d is not a multiple of 64 KiB", ErrInvalid, l.StripeSize)
	}
	if l.StripeCount == 0 || l.StripeCount < AllTargets || l.StripeCount > MaxStripeCount {
		return fmt.Errorf("%w: stripe count %d (want -1 or 1..%d)", ErrInvalid, l.StripeCount, MaxStripeCount)
	}
	if l.StripeCount > 0 && int(l.StripeCount)*l.Width() > MaxStripeCount {
		return fmt.Errorf("%w: %d stripes of %d objects each is over %d objects", ErrInvalid, l.StripeCount, l.Width(), MaxStripeCount)
	}
	if len(l.Stale) > 0 && len(l.Targets) == 0 {
		return fmt.Errorf("%w: stale slots without targets", ErrInvalid)
	}
	return nil
}

// ValidateFile checks a file's resolved layout: targets chosen, Width() per
// stripe, no target used twice, stale slots in range and in order, and at
// least one copy of every stripe not stale.
func (l Layout) ValidateFile() error {
	if err := l.ValidatePolicy(); err != nil {
		return err
	}
	w := l.Width()
	if l.StripeCount < 1 || int(l.StripeCount)*w != len(l.Targets) {
		return fmt.Errorf("%w: %d stripes of %d objects with %d targets", ErrInvalid, l.StripeCount, w, len(l.Targets))
	}
	seen := make(map[TargetID]bool, len(l.Targets))
	for _, t := range l.Targets {
		if seen[t] {
			return fmt.Errorf("%w: target %d used twice", ErrInvalid, t)
		}
		seen[t] = true
	}
	for i, s := range l.Stale {
		if int(s) >= len(l.Targets) || (i > 0 && s <= l.Stale[i-1]) {
			return fmt.Errorf("%w: stale slots %v (out of order or past %d targets)", ErrInvalid, l.Stale, len(l.Targets))
		}
	}
	if l.Kind == RAID0 && len(l.Stale) > 0 {
		return fmt.Errorf("%w: stale slots in a raid0 layout", ErrInvalid)
	}
	for s := 0; s < int(l.StripeCount); s++ {
		fresh := 0
		for j := range w {
			if !l.IsStale(l.Slot(s, j)) {
				fresh++
			}
		}
		if need := l.MinFresh(); fresh < need {
			return fmt.Errorf("%w: stripe %d has %d readable objects, fewer than %d", ErrInvalid, s, fresh, need)
		}
	}
	return nil
}

// MinFresh is how many objects of a stripe must be readable for its data to
// be: 1 copy of a mirror, the data shard count of EC.
func (l Layout) MinFresh() int {
	if l.Kind == EC {
		return int(l.ECData)
	}
	return 1
}

// Extent is one contiguous piece of a file range that lives in one data
// column: one stripe (RAID-0, mirror: all its copies), or one data shard
// of an EC stripe.
type Extent struct {
	Stripe  int    // the data column (see Columns); for RAID-0 and mirror the stripe
	FileOff uint64 // where the piece starts in the file
	ObjOff  uint64 // where it starts in the object
	Len     uint64
}

// Columns is the number of data columns the file's units are dealt over
// round-robin: the stripe count, times the data shards per stripe for EC.
// Column c of an EC layout is data shard c mod ECData of stripe c div
// ECData, so the ECData units of one row of a stripe are contiguous in the
// file: a "full-stripe write" covers RowBytes() bytes at a multiple of it.
func (l Layout) Columns() int {
	if l.Kind == EC {
		return int(l.StripeCount) * int(l.ECData)
	}
	return int(l.StripeCount)
}

// ColumnSlot is the slot of the object holding data column c: the stripe's
// first copy (RAID-0, mirror) or its data shard (EC).
func (l Layout) ColumnSlot(c int) int {
	if l.Kind == EC {
		k := int(l.ECData)
		return l.Slot(c/k, c%k)
	}
	return l.Slot(c, 0)
}

// RowBytes is the bytes of one row of one EC stripe: ECData stripe units.
func (l Layout) RowBytes() uint64 { return uint64(l.ECData) * l.StripeSize }

// Extents maps the file range [off, off+n) onto objects. The layout must be
// a valid file layout.
func (l Layout) Extents(off, n uint64) []Extent {
	if n == 0 {
		return nil
	}
	s, c := l.StripeSize, uint64(l.Columns())
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

// ObjectSize returns how many bytes data column col holds for a file of
// size fileSize: the end of the last byte of the file that maps into it.
// The parity shards of an EC stripe are as long as its first column.
func (l Layout) ObjectSize(fileSize uint64, col int) uint64 {
	s, c := l.StripeSize, uint64(l.Columns())
	fullUnits := fileSize / s // units 0..fullUnits-1 are complete
	tail := fileSize % s
	i := uint64(col)
	// Complete units that belong to this column: i, i+c, i+2c, ... < fullUnits.
	var size uint64
	if fullUnits > i {
		k := (fullUnits - i + c - 1) / c // count of complete units of this column
		size = k * s
	}
	// The partial unit, if any, is unit fullUnits.
	if tail > 0 && fullUnits%c == i {
		size = (fullUnits/c)*s + tail
	}
	return size
}

// Layout encodings. A layout has two binary formats, frozen once
// released: the format that contains it (an inode record, a command, an
// RPC message) says which one it holds, so adding a kind never changes
// how older bytes read.
//
// Format 1 (RAID-0 only, before kinds existed):
//
//	u64 stripe size, u32 stripe count, u32 n, n × u32 targets
//
// Format 2 (kinds and stale slots):
//
//	u8 kind, u8 mirror, u8 ec data, u8 ec parity, u8 flags (1: objects sized),
//	u64 stripe size, u32 stripe count, u32 n, n × u32 targets,
//	u32 m, m × u32 stale slots

const flagObjectsSized = 1

// EncodeV1 appends l in format 1. It is kept for tests that make records of
// the old format; l must be RAID-0 without stale slots.
func (l Layout) EncodeV1(e *wire.Encoder) {
	e.U64(l.StripeSize)
	e.U32(uint32(l.StripeCount))
	e.U32(uint32(len(l.Targets)))
	for _, t := range l.Targets {
		e.U32(uint32(t))
	}
}

// DecodeV1 reads a layout of format 1. It checks only the shape of the
// bytes; callers validate meaning with ValidatePolicy or ValidateFile.
func DecodeV1(d *wire.Decoder) Layout {
	var l Layout
	l.StripeSize = d.U64()
	l.StripeCount = int32(d.U32())
	l.Targets = decodeTargets(d)
	return l
}

// EncodeV2 appends l in format 2.
func (l Layout) EncodeV2(e *wire.Encoder) {
	e.U8(uint8(l.Kind))
	e.U8(l.Mirror)
	e.U8(l.ECData)
	e.U8(l.ECParity)
	var flags uint8
	if l.ObjectsSized {
		flags |= flagObjectsSized
	}
	e.U8(flags)
	l.EncodeV1(e)
	e.U32(uint32(len(l.Stale)))
	for _, s := range l.Stale {
		e.U32(s)
	}
}

// DecodeV2 reads a layout of format 2, checking only the shape of the bytes.
func DecodeV2(d *wire.Decoder) Layout {
	var l Layout
	l.Kind = Kind(d.U8())
	l.Mirror = d.U8()
	l.ECData = d.U8()
	l.ECParity = d.U8()
	flags := d.U8()
	if flags&^flagObjectsSized != 0 {
		d.Fail(fmt.Errorf("%w: unknown layout flags %#x", ErrInvalid, flags))
	}
	l.ObjectsSized = flags&flagObjectsSized != 0
	l.StripeSize = d.U64()
	l.StripeCount = int32(d.U32())
	l.Targets = decodeTargets(d)
	if n := d.Count(MaxStripeCount, 4); n > 0 {
		l.Stale = make([]uint32, n)
		for i := range l.Stale {
			l.Stale[i] = d.U32()
		}
	}
	return l
}

func decodeTargets(d *wire.Decoder) []TargetID {
	n := d.Count(MaxStripeCount, 4)
	if n == 0 {
		return nil
	}
	ts := make([]TargetID, n)
	for i := range ts {
		ts[i] = TargetID(d.U32())
	}
	return ts
}

// Clone returns a deep copy.
func (l Layout) Clone() Layout {
	c := l
	c.Targets = slices.Clone(l.Targets)
	c.Stale = slices.Clone(l.Stale)
	return c
}

func (l Layout) String() string {
	kind := l.Kind.String()
	switch l.Kind {
	case Mirror:
		kind = fmt.Sprintf("mirror %d", l.Mirror)
	case EC:
		kind = fmt.Sprintf("ec %d+%d", l.ECData, l.ECParity)
	}
	s := fmt.Sprintf("%s stripe_size=%d stripe_count=%d targets=%v", kind, l.StripeSize, l.StripeCount, l.Targets)
	if len(l.Stale) > 0 {
		s += fmt.Sprintf(" stale=%v", l.Stale)
	}
	return s
}
