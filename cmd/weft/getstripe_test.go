package main

import (
	"bytes"
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
		{layoutJSON{StripeSize: 1 << 20, StripeCount: 2, Targets: []uint32{1, 0}}, `{"stripe_size":1048576,"stripe_count":2,"targets":[1,0]}` + "\n"},
		{layoutJSON{StripeSize: 65536, StripeCount: -1}, `{"stripe_size":65536,"stripe_count":-1,"targets":[]}` + "\n"},
	} {
		var b bytes.Buffer
		if err := printLayoutJSON(&b, tc.l); err != nil {
			t.Fatal(err)
		}
		if b.String() != tc.want {
			t.Errorf("got %s want %s", b.String(), tc.want)
		}
	}
}
