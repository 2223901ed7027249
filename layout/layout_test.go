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

func TestEncodeRoundTrip(t *testing.T) {
	l := Layout{StripeSize: 4 << 20, StripeCount: 3, Targets: []TargetID{5, 1, 9}}
	var e wire.Encoder
	l.Encode(&e)
	d := wire.NewDecoder(e.B)
	got := Decode(d)
	if err := d.Done(); err != nil || !reflect.DeepEqual(got, l) {
		t.Fatalf("round trip: %v %v", got, err)
	}
}

func FuzzDecode(f *testing.F) {
	var e wire.Encoder
	Default().Encode(&e)
	f.Add(e.B)
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		d := wire.NewDecoder(b)
		l := Decode(d)
		if d.Done() != nil {
			return
		}
		var e wire.Encoder
		l.Encode(&e)
		if string(e.B) != string(b) {
			t.Fatalf("re-encoding differs")
		}
	})
}
