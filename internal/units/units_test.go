package units

import (
	"testing"
	"time"
)

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
		err  bool
	}{
		{"4096", 4096, false},
		{"64k", 64 << 10, false},
		{"64KiB", 64 << 10, false},
		{"1MiB", 1 << 20, false},
		{"1m", 1 << 20, false},
		{"1.5G", 3 << 29, false},
		{"2 GiB", 2 << 30, false},
		{"0", 0, false},
		{"", 0, true},
		{"abc", 0, true},
		{"-1k", 0, true},
		{"99999999999999999999E", 0, true},
		{"16EiB", 0, true},
	} {
		got, err := ParseSize(tc.in)
		if (err != nil) != tc.err || (!tc.err && got != tc.want) {
			t.Errorf("ParseSize(%q) = %d, %v; want %d, err=%v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestFormatSize(t *testing.T) {
	for in, want := range map[uint64]string{0: "0B", 1023: "1023B", 1024: "1KiB", 1536: "1.5KiB", 1 << 20: "1MiB", 5 << 30: "5GiB"} {
		if got := FormatSize(in); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", in, got, want)
		}
	}
}

func TestParseDuration(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		err  bool
	}{
		{"30s", 30 * time.Second, false},
		{"30", 30 * time.Second, false},
		{"0.5", 500 * time.Millisecond, false},
		{"2m", 2 * time.Minute, false},
		{"-1s", 0, true},
		{"soon", 0, true},
	} {
		got, err := ParseDuration(tc.in)
		if (err != nil) != tc.err || (!tc.err && got != tc.want) {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v, err=%v", tc.in, got, err, tc.want, tc.err)
		}
	}
}
