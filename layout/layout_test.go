package layout

import (
	"math/rand"
	"reflect"
	"testing"

	"github.com/weft-fs/weft/wire"
)

func TestExtents(t *testing.T) {
	l := Layout{StripeSize: 64 << 10, StripeCount: 3, Targets: []TargetID{7, 8, 9}}
	const s = 64 << 10
	for _, tc := range []struct {
		name   string
		off, n uint64
		want   []Extent
	}{
		{"empty", 10, 0, nil},
		{"inside first unit", 100, 50, []Extent{{0, 100, 100, 50}}},
		{"exact unit", s, s, []Extent{{1, s, 0, s}}},
		{"cross unit", s - 10, 20, []Extent{{0, s - 10, s - 10, 10}, {1, s, 0, 10}}},
		{"wraps to second row", 3*s + 5, 10, []Extent{{0, 3*s + 5, s + 5, 10}}},
		{"spans all", 0, 4 * s, []Extent{{0, 0, 0, s}, {1, s, 0, s}, {2, 2 * s, 0, s}, {0, 3 * s, s, s}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := l.Extents(tc.off, tc.n)
			if len(got) == 0 && len(tc.want) == 0 {
				return
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Extents(%d,%d) = %+v, want %+v", tc.off, tc.n, got, tc.want)
			}
		})
	}
}

// TestExtentsCoverAndObjectSize checks, for random layouts and ranges, that
// extents tile the range exactly, never cross a unit, and that every byte of
// a file of size n lands below ObjectSize(n, stripe).
func TestExtentsCoverAndObjectSize(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 2000; i++ {
		s := uint64(64<<10) * uint64(1+rng.Intn(4))
		c := 1 + rng.Intn(5)
		l := Layout{StripeSize: s, StripeCount: int32(c), Targets: make([]TargetID, c)}
		off := uint64(rng.Int63n(int64(20 * s)))
		n := uint64(rng.Int63n(int64(10 * s)))
		next := off
		for _, e := range l.Extents(off, n) {
			if e.FileOff != next || e.Len == 0 || e.ObjOff%s+e.Len > s {
				t.Fatalf("bad extent %+v (next %d, layout %v)", e, next, l)
			}
			next += e.Len
		}
		if next != off+n {
			t.Fatalf("extents end at %d, want %d", next, off+n)
		}
		// ObjectSize: the largest object end over extents of [0, size).
		size := off + n
		ends := make([]uint64, c)
		for _, e := range l.Extents(0, size) {
			ends[e.Stripe] = max(ends[e.Stripe], e.ObjOff+e.Len)
		}
		for st := 0; st < c; st++ {
			if got := l.ObjectSize(size, st); got != ends[st] {
				t.Fatalf("ObjectSize(%d, %d) = %d, want %d (layout %v)", size, st, got, ends[st], l)
			}
		}
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		l      Layout
		policy bool
		file   bool
	}{
		{Default(), true, false},
		{Layout{StripeSize: 1 << 20, StripeCount: 2, Targets: []TargetID{1, 2}}, true, true},
		{Layout{StripeSize: 1 << 20, StripeCount: 2, Targets: []TargetID{1, 1}}, true, false},
		{Layout{StripeSize: 1 << 20, StripeCount: AllTargets}, true, false},
		{Layout{StripeSize: 1000, StripeCount: 1}, false, false},
		{Layout{StripeSize: 96 << 10, StripeCount: 1}, false, false},
		{Layout{StripeSize: 1 << 20, StripeCount: 0}, false, false},
		{Layout{StripeSize: 1 << 20, StripeCount: -2}, false, false},
	} {
		if err := tc.l.ValidatePolicy(); (err == nil) != tc.policy {
			t.Errorf("%v: ValidatePolicy = %v", tc.l, err)
		}
		if err := tc.l.ValidateFile(); (err == nil) != tc.file {
			t.Errorf("%v: ValidateFile = %v", tc.l, err)
		}
	}
}

func TestValidateKinds(t *testing.T) {
	m2 := Layout{Kind: Mirror, Mirror: 2, StripeSize: 1 << 20, StripeCount: 2, Targets: []TargetID{1, 2, 3, 4}}
	for _, tc := range []struct {
		name         string
		l            Layout
		policy, file bool
	}{
		{"mirror 2 policy", Layout{Kind: Mirror, Mirror: 2, StripeSize: 1 << 20, StripeCount: 4}, true, false},
		{"mirror 2 file", m2, true, true},
		{"mirror 1", Layout{Kind: Mirror, Mirror: 1, StripeSize: 1 << 20, StripeCount: 1}, false, false},
		{"mirror 9", Layout{Kind: Mirror, Mirror: 9, StripeSize: 1 << 20, StripeCount: 1}, false, false},
		{"mirror 6", Layout{Kind: Mirror, Mirror: 6, StripeSize: 1 << 20, StripeCount: 1}, false, false},
		{"mirror 5", Layout{Kind: Mirror, Mirror: 5, StripeSize: 1 << 20, StripeCount: 1}, true, false},
		{"raid0 with copies", Layout{Mirror: 2, StripeSize: 1 << 20, StripeCount: 1}, false, false},
		{"ec 8+2", Layout{Kind: EC, ECData: 8, ECParity: 2, StripeSize: 1 << 20, StripeCount: 1}, true, false},
		{"ec 16+4", Layout{Kind: EC, ECData: 16, ECParity: 4, StripeSize: 1 << 20, StripeCount: 1}, true, false},
		{"ec 20+1", Layout{Kind: EC, ECData: 20, ECParity: 1, StripeSize: 1 << 20, StripeCount: 1}, false, false},
		{"ec 4+5", Layout{Kind: EC, ECData: 4, ECParity: 5, StripeSize: 1 << 20, StripeCount: 1}, false, false},
		{"ec 4+0", Layout{Kind: EC, ECData: 4, StripeSize: 1 << 20, StripeCount: 1}, false, false},
		{"ec 2+1 file", Layout{Kind: EC, ECData: 2, ECParity: 1, StripeSize: 1 << 20, StripeCount: 1, Targets: []TargetID{1, 2, 3}}, true, true},
		{"unknown kind", Layout{Kind: 7, StripeSize: 1 << 20, StripeCount: 1}, false, false},
		{"mirror short of targets", Layout{Kind: Mirror, Mirror: 2, StripeSize: 1 << 20, StripeCount: 2, Targets: []TargetID{1, 2, 3}}, true, false},
		{"one stale copy", m2.WithStale(1), true, true},
		{"both copies stale", m2.WithStale(0, 1), true, false},
		{"stale past the end", m2.WithStale(4), true, false},
		{"raid0 stale", Layout{StripeSize: 1 << 20, StripeCount: 1, Targets: []TargetID{1}, Stale: []uint32{0}}, true, false},
		{"too many objects", Layout{Kind: Mirror, Mirror: 5, StripeSize: 1 << 20, StripeCount: 1000}, false, false},
	} {
		if err := tc.l.ValidatePolicy(); (err == nil) != tc.policy {
			t.Errorf("%s: ValidatePolicy = %v", tc.name, err)
		}
		if err := tc.l.ValidateFile(); (err == nil) != tc.file {
			t.Errorf("%s: ValidateFile = %v", tc.name, err)
		}
	}
}

func TestStaleSet(t *testing.T) {
	l := Layout{Kind: Mirror, Mirror: 3, StripeSize: 1 << 20, StripeCount: 1, Targets: []TargetID{1, 2, 3}}
	s := l.WithStale(2, 0, 2)
	if !reflect.DeepEqual(s.Stale, []uint32{0, 2}) || !s.IsStale(2) || s.IsStale(1) || len(l.Stale) != 0 {
		t.Fatalf("WithStale: %v (original %v)", s.Stale, l.Stale)
	}
	if c := s.WithoutStale(0, 2); c.Stale != nil || !reflect.DeepEqual(s.Stale, []uint32{0, 2}) {
		t.Fatalf("WithoutStale: %v (original %v)", c.Stale, s.Stale)
	}
	if l.Slot(0, 2) != 2 || (Layout{Kind: EC, ECData: 4, ECParity: 2}).Slot(3, 1) != 19 {
		t.Fatal("Slot")
	}
}

func TestEncodeRoundTrip(t *testing.T) {
	for _, l := range []Layout{
		{StripeSize: 4 << 20, StripeCount: 3, Targets: []TargetID{5, 1, 9}},
		{Kind: Mirror, Mirror: 2, StripeSize: 1 << 20, StripeCount: 1, Targets: []TargetID{5, 1}, Stale: []uint32{1}, ObjectsSized: true},
		{Kind: EC, ECData: 8, ECParity: 2, StripeSize: 1 << 20, StripeCount: -1},
	} {
		var e wire.Encoder
		l.EncodeV2(&e)
		d := wire.NewDecoder(e.B)
		if got := DecodeV2(d); d.Done() != nil || !reflect.DeepEqual(got, l) {
			t.Fatalf("format 2 round trip of %v: %v %v", l, got, d.Done())
		}
		if l.Kind != RAID0 {
			continue
		}
		e = wire.Encoder{}
		l.EncodeV1(&e)
		d = wire.NewDecoder(e.B)
		if got := DecodeV1(d); d.Done() != nil || !reflect.DeepEqual(got, l) {
			t.Fatalf("format 1 round trip of %v: %v %v", l, got, d.Done())
		}
	}
}

// Format 1 bytes are frozen: these are the bytes every RAID-0 layout was
// stored as before kinds existed.
func TestFormat1Bytes(t *testing.T) {
	b := []byte{0, 0, 16, 0, 0, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 7, 0, 0, 0, 9, 0, 0, 0}
	d := wire.NewDecoder(b)
	got := DecodeV1(d)
	want := Layout{StripeSize: 1 << 20, StripeCount: 2, Targets: []TargetID{7, 9}}
	if d.Done() != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("format 1: %v %v", got, d.Done())
	}
}

func FuzzDecode(f *testing.F) {
	var e wire.Encoder
	Default().EncodeV2(&e)
	f.Add(e.B)
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		d := wire.NewDecoder(b)
		l := DecodeV2(d)
		if d.Done() != nil {
			return
		}
		var e wire.Encoder
		l.EncodeV2(&e)
		if string(e.B) != string(b) {
			t.Fatalf("re-encoding differs")
		}
	})
}
