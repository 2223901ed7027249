package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/weft-fs/weft/transport"
)

// observedEcho serves, over a transport observed into reg, op 1 by echoing,
// op 2 by failing and op 3 by answering ENOENT; it returns the server's
// address and a pool to call it, both closed when the test ends.
func observedEcho(t *testing.T, reg *prometheus.Registry, name Namer) (string, *transport.Pool) {
	t.Helper()
	tr, err := Transport(transport.NewTCP(), reg, name)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tr.Listen("127.0.0.1:0", func(_ context.Context, op uint16, req []byte) ([]byte, error) {
		switch op {
		case 2:
			return nil, errors.New("no")
		case 3:
			return nil, fmt.Errorf("no such name: %w", syscall.ENOENT)
		}
		return req, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	pool := transport.NewPool(tr, transport.PoolOptions{})
	t.Cleanup(func() { pool.Close(); ln.Close() })
	return ln.Addr(), pool
}

func TestTransportCountsCallsAndServedRequests(t *testing.T) {
	reg := NewRegistry()
	name := func(op uint16) string { return map[uint16]string{1: "echo", 2: "fail", 3: "lookup"}[op] }
	addr, pool := observedEcho(t, reg, name)
	for range 4 {
		if _, err := pool.Call(context.Background(), addr, 1, make([]byte, 100)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Call(context.Background(), addr, 2, nil); err == nil {
		t.Fatal("op 2 should fail")
	}
	if _, err := pool.Call(context.Background(), addr, 3, nil); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("op 3: %v, want ENOENT", err)
	}
	want := `
# HELP weft_rpc_server_requests_total Requests started, by operation (server side).
# TYPE weft_rpc_server_requests_total counter
weft_rpc_server_requests_total{op="echo"} 4
weft_rpc_server_requests_total{op="fail"} 1
weft_rpc_server_requests_total{op="lookup"} 1
# HELP weft_rpc_client_errors_total Requests that ended in an error, by operation (client side) and class: "answer", a file system answer that is part of normal work (ENOENT, EEXIST, EACCES, ...); "failure", everything else (timeouts, lost connections, EIO, ENOSPC, ...).
# TYPE weft_rpc_client_errors_total counter
weft_rpc_client_errors_total{class="answer",op="echo"} 0
weft_rpc_client_errors_total{class="answer",op="fail"} 0
weft_rpc_client_errors_total{class="answer",op="lookup"} 1
weft_rpc_client_errors_total{class="failure",op="echo"} 0
weft_rpc_client_errors_total{class="failure",op="fail"} 1
weft_rpc_client_errors_total{class="failure",op="lookup"} 0
# HELP weft_rpc_server_response_bytes_total Response payload bytes, by operation (server side).
# TYPE weft_rpc_server_response_bytes_total counter
weft_rpc_server_response_bytes_total{op="echo"} 400
weft_rpc_server_response_bytes_total{op="fail"} 0
weft_rpc_server_response_bytes_total{op="lookup"} 0
# HELP weft_rpc_client_inflight Requests in progress (client side).
# TYPE weft_rpc_client_inflight gauge
weft_rpc_client_inflight 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"weft_rpc_server_requests_total", "weft_rpc_client_errors_total",
		"weft_rpc_server_response_bytes_total", "weft_rpc_client_inflight"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(reg, "weft_rpc_client_seconds"); n != 3 {
		t.Fatalf("client latency histograms: %d, want one per op (3)", n)
	}
}

func TestTransportTwiceInOneRegistryFails(t *testing.T) {
	reg := NewRegistry()
	if _, err := Transport(transport.NewTCP(), reg, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := Transport(transport.NewTCP(), reg, nil); err == nil {
		t.Fatal("a second set of weft_rpc metrics was registered")
	}
}

func TestOpNumber(t *testing.T) {
	if got := OpNumber(123); got != "op_123" {
		t.Fatalf("OpNumber(123) = %q", got)
	}
}

// TestGrafanaDashboardSeries: every weft_* series the Grafana dashboard in
// docs/grafana queries is one these metrics export (a renamed metric must
// not leave an empty panel behind).
func TestGrafanaDashboardSeries(t *testing.T) {
	b, err := os.ReadFile("../docs/grafana/weft.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("docs/grafana/weft.json: %v", err)
	}
	// Series exist once observed: one call that works, one that fails.
	reg := NewRegistry()
	addr, pool := observedEcho(t, reg, nil)
	for op := uint16(1); op <= 2; op++ {
		_, _ = pool.Call(context.Background(), addr, op, []byte("x"))
	}
	sc, err := NewScrub(reg) // a storage server's
	if err != nil {
		t.Fatal(err)
	}
	sc.ScrubBytes(1, 4096)
	sc.ScrubCorrupt(1)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, f := range fams {
		have[f.GetName()] = true
		if f.GetType() == dto.MetricType_HISTOGRAM {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				have[f.GetName()+s] = true
			}
		}
	}
	name := regexp.MustCompile(`\b(weft_[a-z_]+|process_[a-z_]+)\b`)
	n := 0
	for _, p := range dash.Panels {
		for _, q := range p.Targets {
			for _, m := range name.FindAllString(q.Expr, -1) {
				n++
				if !have[m] {
					t.Errorf("panel %q queries %s, which weft does not export", p.Title, m)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("the dashboard queries no weft series")
	}
}
