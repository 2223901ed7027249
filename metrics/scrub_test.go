package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestScrubCounters(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, err := NewScrub(reg)
	if err != nil {
		t.Fatal(err)
	}
	s.ScrubBytes(3, 4096)
	s.ScrubBytes(3, 100)
	s.ScrubBytes(4, 1)
	s.ScrubCorrupt(3)
	want := `
# HELP weft_scrub_bytes_total Bytes the scrub read and checked against their CRC32C, per target.
# TYPE weft_scrub_bytes_total counter
weft_scrub_bytes_total{target="3"} 4196
weft_scrub_bytes_total{target="4"} 1
# HELP weft_scrub_corrupt_total Corrupt objects found (by the scrub or by reads) and reported for repair, per target.
# TYPE weft_scrub_corrupt_total counter
weft_scrub_corrupt_total{target="3"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "weft_scrub_bytes_total", "weft_scrub_corrupt_total"); err != nil {
		t.Fatal(err)
	}
	if _, err := NewScrub(reg); err == nil {
		t.Fatal("registering the counters twice succeeded")
	}
}
