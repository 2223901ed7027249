package metrics

import (
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

type fakeClient struct {
	mu       sync.Mutex
	params   map[string]float64
	inflight map[string]int64
}

func (f *fakeClient) ParamValues() map[string]float64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.params
}

func (f *fakeClient) StorageInflight() map[string]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inflight
}

// The gauges show the client's values at each scrape.
func TestClientGauges(t *testing.T) {
	reg := prometheus.NewRegistry()
	src := &fakeClient{params: map[string]float64{"client.rpcs_in_flight": 0, "client.read_ahead": 0},
		inflight: map[string]int64{"10.0.0.1:7001": 3}}
	if err := RegisterClient(reg, src); err != nil {
		t.Fatal(err)
	}
	src.mu.Lock()
	src.params = map[string]float64{"client.rpcs_in_flight": 4, "client.read_ahead": 8 << 20}
	src.inflight = map[string]int64{"10.0.0.1:7001": 1, "10.0.0.2:7001": 0}
	src.mu.Unlock()
	want := `
# HELP weft_client_param A run-time parameter as this mount applies it: client.read_ahead and client.write_behind in bytes (read_ahead 0: auto, from each file's layout), client.rpcs_in_flight per storage server (0: no bound).
# TYPE weft_client_param gauge
weft_client_param{name="client.read_ahead"} 8.388608e+06
weft_client_param{name="client.rpcs_in_flight"} 4
# HELP weft_client_storage_inflight Storage requests this mount has under way, by storage server address.
# TYPE weft_client_storage_inflight gauge
weft_client_storage_inflight{server="10.0.0.1:7001"} 1
weft_client_storage_inflight{server="10.0.0.2:7001"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "weft_client_param", "weft_client_storage_inflight"); err != nil {
		t.Fatal(err)
	}
	if err := RegisterClient(reg, src); err == nil {
		t.Fatal("registering the gauges twice succeeded")
	}
}
