package metrics

import (
	"sort"

	"github.com/prometheus/client_golang/prometheus"
)

// ClientSource is what a mount's client tells its metrics
// (client.Client has it): the run-time parameters it applies, as numbers,
// and its storage requests under way per server address.
type ClientSource interface {
	ParamValues() map[string]float64
	StorageInflight() map[string]int64
}

// clientCollector reads a ClientSource at every scrape, so the values are
// those of the moment (a `weft param set` shows at the mount's next
// session renewal).
type clientCollector struct {
	src      ClientSource
	param    *prometheus.Desc
	inflight *prometheus.Desc
}

// RegisterClient adds a mount's weft_client_param{name} (the run-time
// parameters it applied: docs/params.md) and
// weft_client_storage_inflight{server} gauges to reg.
func RegisterClient(reg prometheus.Registerer, src ClientSource) error {
	return reg.Register(&clientCollector{
		src: src,
		param: prometheus.NewDesc("weft_client_param",
			"A run-time parameter as this mount applies it: client.read_ahead and client.write_behind in bytes (read_ahead 0: auto, from each file's layout), client.rpcs_in_flight per storage server (0: no bound).",
			[]string{"name"}, nil),
		inflight: prometheus.NewDesc("weft_client_storage_inflight",
			"Storage requests this mount has under way, by storage server address.",
			[]string{"server"}, nil),
	})
}

// Describe implements prometheus.Collector.
func (c *clientCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.param
	ch <- c.inflight
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
}
