package units

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

var sizeSuffixes = []struct {
	names []string
	mult  uint64
}{
	{[]string{"eib", "eb", "e"}, 1 << 60},
	{[]string{"pib", "pb", "p"}, 1 << 50},
	{[]string{"tib", "tb", "t"}, 1 << 40},
	{[]string{"gib", "gb", "g"}, 1 << 30},
	{[]string{"mib", "mb", "m"}, 1 << 20},
	{[]string{"kib", "kb", "k"}, 1 << 10},
	{[]string{"b", ""}, 1},
}

// ParseSize parses a byte size such as "4096", "64k", "1MiB" or "1.5G".
func ParseSize(s string) (uint64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	if t == "" {
		return 0, fmt.Errorf("units: empty size")
	}
	for _, suf := range sizeSuffixes {
		for _, name := range suf.names {
			if !strings.HasSuffix(t, name) {
				continue
			}
			num := strings.TrimSpace(strings.TrimSuffix(t, name))
			if num == "" {
				continue
			}
			if n, err := strconv.ParseUint(num, 10, 64); err == nil {
				if suf.mult > 1 && n > math.MaxUint64/suf.mult {
					return 0, fmt.Errorf("units: size %q overflows", s)
				}
				return n * suf.mult, nil
			}
			f, err := strconv.ParseFloat(num, 64)
			if err != nil || f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
				continue
			}
			v := f * float64(suf.mult)
			if v >= math.MaxUint64 {
				return 0, fmt.Errorf("units: size %q overflows", s)
			}
			return uint64(v), nil
		}
	}
	return 0, fmt.Errorf("units: cannot parse size %q (want e.g. 4096, 64KiB, 1MiB, 2G)", s)
}

// FormatSize prints n with the largest binary unit that keeps it >= 1,
// e.g. 1048576 -> "1MiB", 1536 -> "1.5KiB".
func FormatSize(n uint64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	v := float64(n)
	i := 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if v == math.Trunc(v) {
		return fmt.Sprintf("%d%s", uint64(v), units[i])
	}
	return fmt.Sprintf("%.1f%s", v, units[i])
}

// ParseDuration parses a Go duration ("30s", "1m30s"); a bare number means
// seconds, the unit admins expect for timeouts.
func ParseDuration(s string) (time.Duration, error) {
	t := strings.TrimSpace(s)
	if n, err := strconv.ParseFloat(t, 64); err == nil {
		if n < 0 {
			return 0, fmt.Errorf("units: negative duration %q", s)
		}
		return time.Duration(n * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(t)
	if err != nil {
		return 0, fmt.Errorf("units: cannot parse duration %q (want e.g. 30s, 2m, 500ms)", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("units: negative duration %q", s)
	}
	return d, nil
}

// Size is a byte count that implements pflag.Value and
// encoding.TextUnmarshaler, so flags and TOML config files share one parser.
type Size uint64

func (s *Size) String() string { return FormatSize(uint64(*s)) }
func (s *Size) Set(v string) error {
	n, err := ParseSize(v)
	if err != nil {
		return err
	}
	*s = Size(n)
	return nil
}
func (s *Size) Type() string                 { return "size" }
func (s *Size) UnmarshalText(b []byte) error { return s.Set(string(b)) }
func (s Size) MarshalText() ([]byte, error)  { return []byte(FormatSize(uint64(s))), nil }

// Duration is a time.Duration that implements pflag.Value and
// encoding.TextUnmarshaler.
type Duration time.Duration

func (d *Duration) String() string { return time.Duration(*d).String() }
func (d *Duration) Set(v string) error {
	n, err := ParseDuration(v)
	if err != nil {
		return err
	}
	*d = Duration(n)
	return nil
}
func (d *Duration) Type() string                 { return "duration" }
func (d *Duration) UnmarshalText(b []byte) error { return d.Set(string(b)) }
func (d Duration) MarshalText() ([]byte, error)  { return []byte(time.Duration(d).String()), nil }
