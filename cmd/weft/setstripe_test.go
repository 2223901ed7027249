package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestStripeRequestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  stripeRequest
		err  string
	}{
		{"nothing", stripeRequest{}, ""},
		{"count", stripeRequest{Count: 8}, ""},
		{"all targets", stripeRequest{Count: -1}, ""},
		{"count too small", stripeRequest{Count: -2}, "want -1 (all targets) or 1..2000"},
		{"count too large", stripeRequest{Count: 2001}, "1..2000"},
		{"size", stripeRequest{Size: 4 << 20}, ""},
		{"size minimum", stripeRequest{Size: 64 << 10}, ""},
		{"size too small", stripeRequest{Size: 4096}, "multiple of 64KiB between 64KiB and 4GiB"},
		{"size not multiple", stripeRequest{Size: 100 << 10}, "multiple of 64KiB"},
		{"size too large", stripeRequest{Size: 8 << 30}, "4GiB"},
		{"targets", stripeRequest{Targets: []uint32{3, 1}}, ""},
		{"targets and count", stripeRequest{Count: 2, Targets: []uint32{3, 1}}, ""},
		{"targets and wrong count", stripeRequest{Count: 3, Targets: []uint32{3, 1}}, "does not match"},
		{"targets and all", stripeRequest{Count: -1, Targets: []uint32{3, 1}}, "does not match"},
		{"duplicate target", stripeRequest{Targets: []uint32{3, 3}}, "given twice"},
		{"mirror 2", stripeRequest{Mirror: 2}, ""},
		{"mirror 9", stripeRequest{Mirror: 9}, "--mirror 9: want 2..5 copies"},
		{"mirror 1", stripeRequest{Mirror: 1}, "want 2..5"},
		{"ec 8+2", stripeRequest{EC: "8+2"}, ""},
		{"ec 20+1", stripeRequest{EC: "20+1"}, "--ec 20+1: want K+M with K 1..16 data shards and M 1..4 parity shards"},
		{"ec 4+5", stripeRequest{EC: "4+5"}, "M 1..4"},
		{"ec garbage", stripeRequest{EC: "eight"}, "want K+M"},
		{"mirror and ec", stripeRequest{Mirror: 2, EC: "2+1"}, "exclude each other"},
		{"mirror targets", stripeRequest{Mirror: 2, Targets: []uint32{1, 2, 3, 4}}, ""},
		{"mirror odd targets", stripeRequest{Mirror: 2, Targets: []uint32{1, 2, 3}}, "whole stripes of 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.req.validate()
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			wantErr(t, err, tc.err)
		})
	}
}

func TestStripeRequestApply(t *testing.T) {
	file := layoutJSON{StripeSize: 1 << 20, StripeCount: 4, Targets: []uint32{0, 1, 2, 3}}
	for _, tc := range []struct {
		name string
		req  stripeRequest
		cur  layoutJSON
		want layoutJSON
	}{
		{"keep size, new count, targets dropped", stripeRequest{Count: 2}, file, layoutJSON{StripeSize: 1 << 20, StripeCount: 2}},
		{"keep count, new size", stripeRequest{Size: 4 << 20}, file, layoutJSON{StripeSize: 4 << 20, StripeCount: 4}},
		{"explicit targets set the count", stripeRequest{Targets: []uint32{5, 2}}, file, layoutJSON{StripeSize: 1 << 20, StripeCount: 2, Targets: []uint32{5, 2}}},
		{"inheriting directory gets defaults", stripeRequest{Count: -1}, layoutJSON{}, layoutJSON{StripeSize: 1 << 20, StripeCount: -1}},
		{"nothing asked on empty", stripeRequest{}, layoutJSON{}, layoutJSON{StripeSize: 1 << 20, StripeCount: 4}},
		{"mirror kept", stripeRequest{Count: 2}, layoutJSON{Kind: "mirror", Mirror: 3, StripeSize: 1 << 20, StripeCount: 1}, layoutJSON{Kind: "mirror", Mirror: 3, StripeSize: 1 << 20, StripeCount: 2}},
		{"mirror asked", stripeRequest{Mirror: 2}, file, layoutJSON{Kind: "mirror", Mirror: 2, StripeSize: 1 << 20, StripeCount: 4}},
		{"raid0 asked", stripeRequest{RAID0: true}, layoutJSON{Kind: "mirror", Mirror: 3, StripeSize: 1 << 20, StripeCount: 1}, layoutJSON{Kind: "raid0", StripeSize: 1 << 20, StripeCount: 1}},
		{"mirror targets", stripeRequest{Mirror: 2, Targets: []uint32{1, 2, 3, 4}}, file, layoutJSON{Kind: "mirror", Mirror: 2, StripeSize: 1 << 20, StripeCount: 2, Targets: []uint32{1, 2, 3, 4}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.req.validate(); err != nil {
				t.Fatal(err)
			}
			got := tc.req.apply(tc.cur)
			if got.StripeSize != tc.want.StripeSize || got.StripeCount != tc.want.StripeCount || !slices.Equal(got.Targets, tc.want.Targets) ||
				got.Kind != tc.want.Kind || got.Mirror != tc.want.Mirror || got.ECData != tc.want.ECData || got.ECParity != tc.want.ECParity {
				t.Fatalf("apply = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestSetstripeFlags(t *testing.T) {
	dir := t.TempDir()
	full := filepath.Join(dir, "full")
	if err := os.WriteFile(full, []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	wantErr(t, execute(newSetstripeCmd(), "-S", "1 meg", dir), "cannot parse size")
	wantErr(t, execute(newSetstripeCmd(), "-S", "1000", dir), "multiple of 64KiB")
	wantErr(t, execute(newSetstripeCmd(), "-c", "0x", dir), "invalid argument")
	wantErr(t, execute(newSetstripeCmd(), "-c", "2"), "accepts 1 arg")
	wantErr(t, execute(newSetstripeCmd(), "-o", "1,1", dir), "given twice")
	// Asking for nothing, or for a zero, is an error, not a silent no-op.
	wantErr(t, execute(newSetstripeCmd(), dir), "nothing to set")
	wantErr(t, execute(newSetstripeCmd(), "-c", "0", dir), "-c 0", "-d DIR")
	wantErr(t, execute(newSetstripeCmd(), "-S", "0", dir), "-S 0", "-d DIR")
	wantErr(t, execute(newSetstripeCmd(), "-d", "-c", "2", dir), "takes no -c")
	wantErr(t, execute(newSetstripeCmd(), "-d", full), "not a directory")
	wantErr(t, execute(newSetstripeCmd(), "--ec", "20+1", dir), "--ec 20+1: want K+M")
	wantErr(t, execute(newSetstripeCmd(), "--mirror", "9", dir), "--mirror 9: want 2..5 copies")
	// A file with data keeps its layout, and is left untouched.
	wantErr(t, execute(newSetstripeCmd(), "-c", "2", "-S", "4MiB", full), "holds 4 bytes", "copy it into a directory")
	if b, err := os.ReadFile(full); err != nil || string(b) != "data" {
		t.Fatalf("file changed: %q %v", b, err)
	}
	// Units are accepted: these fail only because dir is not on weft.
	for _, s := range []string{"1M", "4MiB", "64k", "1048576"} {
		wantErr(t, execute(newSetstripeCmd(), "-S", s, dir), "not on a weft file system")
	}
}
