package metrics

import (
	"sort"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weft-fs/weft/storage/localread"
)

// ClientSource is what a mount's client tells its metrics
// (client.Client has it): the run-time parameters it applies, as numbers,
// and its storage requests under way per server address.
type ClientSource interface {
	ParamValues() map[string]float64
	StorageInflight() map[string]int64
}

// LocalReadSource is what a ClientSource may also tell (client.Client
// has it): its short-circuit local reads (package storage/localread); ok
// is false when they are off.
type LocalReadSource interface {
	LocalReads() (localread.Counts, bool)
}

// clientCollector reads a ClientSource at every scrape, so the values are
// those of the moment (a `weft param set` shows at the mount's next
// session renewal).
type clientCollector struct {
	src      ClientSource
	param    *prometheus.Desc
	inflight *prometheus.Desc
	local    *prometheus.Desc
}

// RegisterClient adds a mount's weft_client_param{name} (the run-time
// parameters it applied: docs/params.md) and
// weft_client_storage_inflight{server} gauges to reg, and
// weft_client_local_reads_total{result} when the source is a
// LocalReadSource with local reads on.
func RegisterClient(reg prometheus.Registerer, src ClientSource) error {
	return reg.Register(&clientCollector{
		src: src,
		param: prometheus.NewDesc("weft_client_param",
			"A run-time parameter as this mount applies it: client.read_ahead and client.write_behind in bytes (read_ahead 0: auto, from each file's layout), client.rpcs_in_flight per storage server (0: no bound).",
			[]string{"name"}, nil),
		inflight: prometheus.NewDesc("weft_client_storage_inflight",
			"Storage requests this mount has under way, by storage server address.",
			[]string{"server"}, nil),
		local: prometheus.NewDesc("weft_client_local_reads_total",
			"Storage reads of this mount by how they went: result=local read from the object's file on this host (short-circuit, every block checked), direct the local reads that bypassed the page cache (O_DIRECT: large aligned reads; also counted in local), fallback went over RPC although the server is on this host (checksum mismatch, missing object, error), open counts objects opened locally. Absent when local reads are off.",
			[]string{"result"}, nil),
	})
}

// Describe implements prometheus.Collector.
func (c *clientCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.param
	ch <- c.inflight
	ch <- c.local
}

// Collect implements prometheus.Collector.
func (c *clientCollector) Collect(ch chan<- prometheus.Metric) {
	params := c.src.ParamValues()
	names := make([]string, 0, len(params))
	for n := range params {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		ch <- prometheus.MustNewConstMetric(c.param, prometheus.GaugeValue, params[n], n)
	}
	for addr, n := range c.src.StorageInflight() {
		ch <- prometheus.MustNewConstMetric(c.inflight, prometheus.GaugeValue, float64(n), addr)
	}
	if lr, ok := c.src.(LocalReadSource); ok {
		if n, on := lr.LocalReads(); on {
			ch <- prometheus.MustNewConstMetric(c.local, prometheus.CounterValue, float64(n.Local), "local")
			ch <- prometheus.MustNewConstMetric(c.local, prometheus.CounterValue, float64(n.Direct), "direct")
			ch <- prometheus.MustNewConstMetric(c.local, prometheus.CounterValue, float64(n.Fallback), "fallback")
			ch <- prometheus.MustNewConstMetric(c.local, prometheus.CounterValue, float64(n.Opens), "open")
		}
	}
}
