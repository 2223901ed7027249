package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/weft-fs/weft/proto"
)

type fixedSource struct {
	st  proto.ClusterStatus
	err error
}

func (f *fixedSource) Status(context.Context) (proto.ClusterStatus, error) { return f.st, f.err }

func status(requests uint64, io ...proto.IOCounters) proto.ClusterStatus {
	st := proto.ClusterStatus{FSID: "fs", Requests: requests}
	for i, c := range io {
		st.Targets = append(st.Targets, proto.TargetInfo{ID: proto.TargetID(i + 1), Addr: "s:1", Up: true,
			Total: 100, Used: 10, Free: 90, Device: "disk", IO: c})
	}
	return st
}

// TestRates: samples are the per-second increase of the counters between
// two statuses; a counter that went down (a restarted server) adds
// nothing, a new target starts at its next sample, and the first status
// only starts the series.
func TestRates(t *testing.T) {
	d := New(&fixedSource{}, Options{Keep: 2})
	t0 := time.Unix(1000, 0)
	d.add(status(100, proto.IOCounters{Reads: 10, ReadBytes: 1000}), t0)
	if len(d.History()) != 0 {
		t.Fatal("a sample from a single status")
	}
	d.add(status(300, proto.IOCounters{Reads: 30, ReadBytes: 3000, Writes: 4, WriteBytes: 400}, proto.IOCounters{Reads: 7}), t0.Add(2*time.Second))
	s := d.History()[0]
	if s.Reads != 10 || s.ReadBytes != 1000 || s.Writes != 2 || s.WriteBytes != 200 || s.MetaRequests != 100 ||
		s.TotalBytes != 100 || s.UsedBytes != 20 || s.TargetsUp != 2 || s.Time != t0.Add(2*time.Second).UnixMilli() {
		t.Fatalf("sample %+v", s)
	}
	// Target 1 restarted (counters back near 0); target 2 read 8 more.
	d.add(status(300, proto.IOCounters{Reads: 1}, proto.IOCounters{Reads: 15}), t0.Add(4*time.Second))
	if s := d.History()[1]; s.Reads != 4 || s.MetaRequests != 0 {
		t.Fatalf("after a restart: %+v", s)
	}
	d.add(status(310), t0.Add(5*time.Second))
	if h := d.History(); len(h) != 2 || h[1].MetaRequests != 10 {
		t.Fatalf("Keep 2: %+v", h)
	}
}

func TestHandler(t *testing.T) {
	src := &fixedSource{st: status(5, proto.IOCounters{})}
	d := New(src, Options{Addr: "m:7400"})
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/"); code != 200 || !strings.Contains(body, `id="targets"`) || !strings.Contains(body, "app.js") {
		t.Fatalf("/: %d %.200s", code, body)
	}
	if code, body := get("/app.js"); code != 200 || !strings.Contains(body, "api/status") {
		t.Fatalf("/app.js: %d", code)
	}
	code, body := get("/api/status")
	var r struct {
		Healthy bool
		Meta    struct{ Addr string }
		Targets []struct{ ID int }
	}
	if err := json.Unmarshal([]byte(body), &r); code != 200 || err != nil || !r.Healthy || r.Meta.Addr != "m:7400" || len(r.Targets) != 1 {
		t.Fatalf("/api/status: %d %s %v", code, body, err)
	}
	if code, body := get("/api/history"); code != 200 || !strings.Contains(body, `"samples":[]`) {
		t.Fatalf("/api/history: %d %s", code, body)
	}
	src.err = errors.New("meta down")
	if code, body := get("/api/status"); code != http.StatusServiceUnavailable || !strings.Contains(body, "meta down") {
		t.Fatalf("/api/status of a failing source: %d %s", code, body)
	}
}
