package tests

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weft-fs/weft/internal/testcluster"
)

// TestParams: on a live cluster, `weft param set` changes what the
// metadata daemon logs at once (its log level), the mount applies its
// read-ahead window, write-behind budget, storage requests in flight and
// log level (and works within them), client.checksums is read-only,
// values set without
// --persist are gone after a restart while persisted ones stay, and a
// bad value is refused. The mount's --metrics show the values it
// applied (weft_client_param) and its storage requests under way per
// server.
func TestParams(t *testing.T) {
	mountMetrics := freeAddr(t)
	c := testcluster.Start(t, testcluster.Options{Servers: 1, Targets: 2, MetaArgs: []string{"--log-level", "warn"},
		MountArgs: []string{"--metrics", mountMetrics}})
	c.WaitTargetsUp(2)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // a hang guard
	defer cancel()
	weft := func(args ...string) string {
		t.Helper()
		out, err := c.Weft(ctx, append(args, "--meta", c.MetaAddr(), "--keys", c.Keys("meta"))...)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}

	// At warn, a set logs nothing; once log.level.meta is info, the next
	// set is logged at info.
	weft("param", "set", "client.read_ahead=4MiB")
	if strings.Contains(c.Log("meta"), "parameter set") {
		t.Fatalf("logged at info while at warn:\n%s", c.Log("meta"))
	}
	weft("param", "set", "log.level.meta=info")
	weft("param", "set", "client.read_ahead=8MiB")
	if log := c.Log("meta"); !strings.Contains(log, "parameter set") || !strings.Contains(log, "client.read_ahead") {
		t.Fatalf("the metadata daemon's log after log.level.meta=info:\n%s", log)
	}
	// client.checksums is read-only: the storage servers' checksums are
	// always on.
	if out, err := c.Weft(ctx, "param", "set", "client.checksums=off", "--meta", c.MetaAddr(), "--keys", c.Keys("meta")); err == nil || !strings.Contains(out, "read-only") {
		t.Fatalf("client.checksums=off: %v\n%s", err, out)
	}
	if v := weft("param", "get", "client.checksums"); v != "on" {
		t.Fatalf("client.checksums = %q", v)
	}
	weft("param", "set", "rebuild.rate=100MiB", "--persist")
	if list := weft("param", "list"); !strings.Contains(list, "rebuild.rate") || !strings.Contains(list, "persisted") {
		t.Fatalf("param list:\n%s", list)
	}

	// A bad value is refused before anything changes.
	if out, err := c.Weft(ctx, "param", "set", "rebuild.rate=fast", "--meta", c.MetaAddr(), "--keys", c.Keys("meta")); err == nil || !strings.Contains(out, "rebuild.rate") {
		t.Fatalf("a bad value was accepted: %v\n%s", err, out)
	}

	// The mount takes the parameters with its next session renewal: its
	// log level (at warn it would not log the line at info) and its
	// read-ahead window, which the line names.
	weft("param", "set", "client.read_ahead=2MiB")
	weft("param", "set", "client.write_behind=1MiB")
	weft("param", "set", "client.rpcs_in_flight=1")
	weft("param", "set", "log.level.client=info")
	// So do the storage servers (every 10 s): their log level and the
	// rebuild rate.
	weft("param", "set", "log.level.storage=info")
	for _, w := range []struct{ proc, want1, want2 string }{
		{"mount-0", "client.read_ahead=2MiB", "client.write_behind=1MiB"},
		{"mount-0", "client.rpcs_in_flight=1", "log.level.client=info"},
		{"storage-0", "rebuild.rate=100MiB", "log.level.storage=info"},
	} {
		deadline := time.Now().Add(2 * time.Minute) // a hang guard; renewals come every lease/3
		for {
			log := c.Log(w.proc)
			if i := strings.LastIndex(log, "run-time parameters applied"); i >= 0 && strings.Contains(log[i:], w.want1) && strings.Contains(log[i:], w.want2) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s did not apply the parameters:\n%s", w.proc, log)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	// The mount's metrics show what it applied.
	fams := scrape(t, mountMetrics)
	for _, p := range []struct {
		name string
		want float64
	}{{"client.read_ahead", 2 << 20}, {"client.write_behind", 1 << 20}, {"client.rpcs_in_flight", 1}} {
		if got := value(fams, "weft_client_param", "", "name", p.name); got != p.want {
			t.Errorf("the mount's weft_client_param{name=%q} = %v, want %v", p.name, got, p.want)
		}
	}

	// The mount works within them: a file larger than the write-behind
	// budget, written and read with one storage request per server in
	// flight, reads back right.
	data := make([]byte, 9<<20+123)
	for i := range data {
		data[i] = byte(i * 7 / 5)
	}
	p := filepath.Join(c.Mount(0), "tuned")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(p); err != nil || !bytes.Equal(b, data) {
		t.Fatalf("read back under the tuned mount: %v", err)
	}
	// The storage server it used shows, nothing under way once idle.
	fams = scrape(t, mountMetrics)
	if f := fams["weft_client_storage_inflight"]; f == nil || len(f.GetMetric()) != 1 ||
		f.GetMetric()[0].GetGauge().GetValue() != 0 || len(f.GetMetric()[0].GetLabel()) != 1 || f.GetMetric()[0].GetLabel()[0].GetName() != "server" {
		t.Errorf("the mount's weft_client_storage_inflight after its I/O ended: %v", f)
	}

	c.StopMeta()
	c.StartMeta()
	c.WaitTargetsUp(2)
	if v := weft("param", "get", "rebuild.rate"); v != "100 MiB" && v != "100MiB" {
		t.Fatalf("persisted rebuild.rate after a restart = %q", v)
	}
	if v := weft("param", "get", "client.checksums"); v != "on" {
		t.Fatalf("client.checksums after a restart = %q, want the default", v)
	}
}
