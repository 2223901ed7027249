package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestPrintLayout(t *testing.T) {
	for _, tc := range []struct {
		name string
		l    layoutJSON
		want string
	}{
		{"file", layoutJSON{StripeSize: 1 << 20, StripeCount: 3, Targets: []uint32{2, 0, 11}},
			"/mnt/weft/f\nlmm_stripe_count:  3\nlmm_stripe_size:   1048576\nlmm_pattern:       raid0\nlmm_stripe_offset: 2\n\tobdidx\n\t     2\n\t     0\n\t    11\n"},
		{"directory", layoutJSON{StripeSize: 4 << 20, StripeCount: -1},
			"/mnt/weft/f\nlmm_stripe_count:  -1\nlmm_stripe_size:   4194304\nlmm_pattern:       raid0\n"},
		{"mirror", layoutJSON{Kind: "mirror", Mirror: 2, StripeSize: 1 << 20, StripeCount: 2, Targets: []uint32{1, 2, 3, 4}, Stale: []uint32{2}},
			"/mnt/weft/f\nlmm_stripe_count:  2\nlmm_stripe_size:   1048576\nlmm_pattern:       mirror 2\nlmm_stripe_offset: 1\n\tstripe  copies\n\t     0      1      2\n\t     1      3(stale)      4\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			printLayout(&b, "/mnt/weft/f", tc.l)
			if b.String() != tc.want {
				t.Fatalf("got\n%s\nwant\n%s", b.String(), tc.want)
			}
		})
	}
}

func TestPrintLayoutJSON(t *testing.T) {
	for _, tc := range []struct {
		l    layoutJSON
		want string
	}{
		{layoutJSON{StripeSize: 1 << 20, StripeCount: 2, Targets: []uint32{1, 0}},
			`{"path":"/p","kind":"raid0","mirror":0,"ec_k":0,"ec_m":0,"stripe_size":1048576,"stripe_count":2,"targets":[1,0],"stripes":[{"targets":[1],"stale":[]},{"targets":[0],"stale":[]}]}` + "\n"},
		{layoutJSON{StripeSize: 65536, StripeCount: -1},
			`{"path":"/p","kind":"raid0","mirror":0,"ec_k":0,"ec_m":0,"stripe_size":65536,"stripe_count":-1,"targets":[],"stripes":[]}` + "\n"},
		{layoutJSON{Kind: "mirror", Mirror: 2, StripeSize: 1 << 20, StripeCount: 2, Targets: []uint32{1, 2, 3, 4}, Stale: []uint32{3}},
			`{"path":"/p","kind":"mirror","mirror":2,"ec_k":0,"ec_m":0,"stripe_size":1048576,"stripe_count":2,"targets":[1,2,3,4],"stripes":[{"targets":[1,2],"stale":[]},{"targets":[3,4],"stale":[4]}]}` + "\n"},
		{layoutJSON{Kind: "ec", ECData: 2, ECParity: 1, StripeSize: 1 << 20, StripeCount: 1, Targets: []uint32{5, 6, 7}},
			`{"path":"/p","kind":"ec","mirror":0,"ec_k":2,"ec_m":1,"stripe_size":1048576,"stripe_count":1,"targets":[5,6,7],"stripes":[{"targets":[5,6,7],"stale":[]}]}` + "\n"},
	} {
		var b bytes.Buffer
		if err := printLayoutJSONPath(&b, "/p", tc.l); err != nil {
			t.Fatal(err)
		}
		if b.String() != tc.want {
			t.Errorf("got %s want %s", b.String(), tc.want)
		}
	}
}

// TestWalkLayouts: a directory shows itself and its entries (not deeper),
// -d only itself, -r everything below it; symbolic links are skipped.
func TestWalkLayouts(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"a", "a/b"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"f", "a/g", "a/b/h"} {
		writeFile(t, root, f, "x")
	}
	if err := os.Symlink("f", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	walk := func(recursive, dirOnly bool) []string {
		var got []string
		if err := walkLayouts(root, recursive, dirOnly, func(p string) error {
			rel, _ := filepath.Rel(root, p)
			got = append(got, rel)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	for _, tc := range []struct {
		recursive, dirOnly bool
		want               []string
	}{
		{false, false, []string{".", "a", "f"}},
		{false, true, []string{"."}},
		{true, false, []string{".", "a", "a/b", "a/b/h", "a/g", "f"}},
	} {
		if got := walk(tc.recursive, tc.dirOnly); !slices.Equal(got, tc.want) {
			t.Errorf("recursive %v dirOnly %v: %v, want %v", tc.recursive, tc.dirOnly, got, tc.want)
		}
	}
	wantErr(t, execute(newGetstripeCmd(), "-r", "-d", root), "exclude each other")
}
