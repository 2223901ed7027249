package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weft-fs/weft/proto"
)

// Scrub counts a storage server's scrub per target: the bytes it checked
// (weft_scrub_bytes_total) and the corrupt objects found, by the scrub or
// by a client's read (weft_scrub_corrupt_total). It implements
// storage.ScrubObserver.
type Scrub struct {
	bytes, corrupt *prometheus.CounterVec
}

// NewScrub registers the scrub's counters in reg.
func NewScrub(reg prometheus.Registerer) (*Scrub, error) {
	s := &Scrub{
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "weft_scrub_bytes_total",
			Help: "Bytes the scrub read and checked against their CRC32C, per target."}, []string{"target"}),
		corrupt: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "weft_scrub_corrupt_total",
			Help: "Corrupt objects found (by the scrub or by reads) and reported for repair, per target."}, []string{"target"}),
	}
	for _, c := range []prometheus.Collector{s.bytes, s.corrupt} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func targetLabel(t proto.TargetID) string { return strconv.FormatUint(uint64(t), 10) }

// ScrubBytes counts n bytes checked on target t.
func (s *Scrub) ScrubBytes(t proto.TargetID, n uint64) {
	s.bytes.WithLabelValues(targetLabel(t)).Add(float64(n))
}

// ScrubCorrupt counts a corrupt object found on target t.
func (s *Scrub) ScrubCorrupt(t proto.TargetID) {
	s.corrupt.WithLabelValues(targetLabel(t)).Inc()
}
