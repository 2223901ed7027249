package tests

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/weft-fs/weft/internal/testcluster"
)

// freeAddr returns a loopback address nobody listens on right now, and
// that no test cluster of this process is given (a port picked apart
// from the cluster's could be picked again for one of its servers).
func freeAddr(t *testing.T) string {
	t.Helper()
	return testcluster.FreeAddr(t)
}

// scrape reads and parses http://addr/metrics.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("scrape %s: %v", addr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %s, %v", addr, resp.Status, err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parse metrics of %s: %v", addr, err)
	}
	return fams
}

// value returns the value of the sample of family name whose op label is
// op (op "" = the unlabelled sample), or -1 if there is none.
// value returns the value of the series of metric name with label op ("":
// a metric without one) and the other labels given as name, value pairs
// (-1: none).
func value(fams map[string]*dto.MetricFamily, name, op string, labels ...string) float64 {
	f := fams[name]
	if f == nil {
		return -1
	}
	want := map[string]string{}
	if op != "" {
		want["op"] = op
	}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	for _, m := range f.GetMetric() {
		matched := 0
		for _, l := range m.GetLabel() {
			if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
				matched++
			}
		}
		if matched != len(want) {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	return -1
}

// TestMetrics runs every daemon with --metrics and checks that what a user
// did through the mount shows up in each process's counters.
func TestMetrics(t *testing.T) {
	metaAddr, storageAddr, mountAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	c := testcluster.Start(t, testcluster.Options{
		Servers: 1, Targets: 2,
		MetaArgs:    []string{"--metrics", metaAddr},
		StorageArgs: []string{"--metrics", storageAddr},
		MountArgs:   []string{"--metrics", mountAddr},
	})
	mnt := c.Mount(0)
	const size = 3<<20 + 5
	data := pattern(7, 0, size)
	p := filepath.Join(mnt, "f")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(p)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back: %d bytes, %v", len(got), err)
	}
	if _, err := os.Stat(filepath.Join(mnt, "missing")); !os.IsNotExist(err) {
		t.Fatalf("stat of a missing file: %v", err)
	}

	meta := scrape(t, metaAddr)
	for _, op := range []string{"create_open", "lookup", "write_done"} {
		if v := value(meta, "weft_rpc_server_requests_total", op); v < 1 {
			t.Errorf("meta: weft_rpc_server_requests_total{op=%q} = %v, want >= 1", op, v)
		}
	}
	if v := value(meta, "weft_rpc_server_errors_total", "lookup", "class", "answer"); v < 1 {
		t.Errorf("meta: the failed lookup of a missing file was not counted as an answer (%v)", v)
	}
	if v := value(meta, "weft_rpc_server_errors_total", "lookup", "class", "failure"); v != 0 {
		t.Errorf("meta: a lookup of a missing file counted as a failure (%v): an alert on failures would fire", v)
	}
	if v := value(meta, "weft_rpc_server_seconds", "create_open"); v < 1 {
		t.Errorf("meta: no latency samples for create_open (%v)", v)
	}

	storage := scrape(t, storageAddr)
	if v := value(storage, "weft_rpc_server_request_bytes_total", "write"); v < size {
		t.Errorf("storage: write request bytes %v, want >= %d", v, size)
	}
	if v := value(storage, "weft_rpc_server_response_bytes_total", "read"); v < size {
		t.Errorf("storage: read response bytes %v, want >= %d", v, size)
	}
	if v := value(storage, "process_resident_memory_bytes", ""); v <= 0 {
		t.Errorf("storage: process_resident_memory_bytes = %v", v)
	}

	// The mount's counters are client-side: what it asked of the servers.
	mount := scrape(t, mountAddr)
	if v := value(mount, "weft_rpc_client_request_bytes_total", "write"); v < size {
		t.Errorf("mount: write request bytes %v, want >= %d", v, size)
	}
	if v := value(mount, "weft_rpc_client_requests_total", "create_open"); v < 1 {
		t.Errorf("mount: weft_rpc_client_requests_total{op=create_open} = %v", v)
	}
	// Every object of f was written by this mount: the storage servers'
	// write replies counted its blocks, and its close asked nothing more.
	if v := value(mount, "weft_rpc_client_requests_total", "allocated"); v > 0 { // -1: never called
		t.Errorf("mount: %v allocated calls for a file it wrote whole, want 0", v)
	}
	var sb syscall.Stat_t
	if err := syscall.Stat(p, &sb); err != nil || sb.Blocks < size/512 {
		t.Errorf("st_blocks of f: %d (%v), want at least %d", sb.Blocks, err, size/512)
	}
	// The kernel sends RELEASE after close(2) has returned, and the mount
	// renews its session in the background: a call may be in flight at
	// any one scrape, but none may stay there once the mount is idle,
	// except its lease poll, which always waits at the metadata leader
	// for invalidations (docs/caching.md) and is answered and sent again
	// at least every second.
	waitFor(t, "the idle mount's calls in flight to drain to its lease poll", func() bool {
		return value(scrape(t, mountAddr), "weft_rpc_client_inflight", "") <= 1
	})
	polls := value(scrape(t, mountAddr), "weft_rpc_client_requests_total", "lease_poll")
	waitFor(t, "the idle mount's lease poll to be answered and sent again", func() bool {
		return value(scrape(t, mountAddr), "weft_rpc_client_requests_total", "lease_poll") > polls
	})
	if t.Failed() {
		fmt.Println(c.Log("meta"))
	}
}

// TestMetricsBusyPort: a daemon whose --metrics port is taken fails at
// start with a message naming the flag, instead of running unobserved.
func TestMetricsBusyPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c := testcluster.Start(t, testcluster.Options{Servers: 1, Targets: 1, Mounts: -1})
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	out, err := exec.CommandContext(ctx, c.Bin(), "storage", "--listen", freeAddr(t), "--meta", c.MetaAddr(), "--keys", c.Keys("storage"),
		"--target", t.TempDir(), "--metrics", ln.Addr().String()).CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("storage with a busy --metrics port still running after %v:\n%s", hangGuard, out)
	}
	if err == nil {
		t.Fatalf("storage started with a busy --metrics port:\n%s", out)
	}
	if !bytes.Contains(out, []byte("--metrics")) {
		t.Fatalf("error does not name --metrics:\n%s", out)
	}
}
