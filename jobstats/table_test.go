package jobstats

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func TestRecordAndSnapshot(t *testing.T) {
	c := &clock{time.Unix(1000, 0)}
	tb := New(Options{Service: "storage", Now: c.now})
	tb.Record("", "write", 0, 10, time.Millisecond, false) // no job: not counted
	tb.Record("a", "write", 0, 100, time.Millisecond, false)
	tb.Record("a", "write", 0, 50, 3*time.Millisecond, true)
	tb.Record("a", "read", 7, 0, time.Millisecond, false)
	c.t = c.t.Add(time.Second)
	tb.Record("b", "read", 5, 0, time.Millisecond, false)
	s := tb.Snapshot("")
	if len(s) != 2 || s[0].Job != "a" || s[1].Job != "b" {
		t.Fatalf("snapshot %+v", s)
	}
	a := s[0]
	if a.Op("write") != 2 || a.Op("read") != 1 || a.WriteBytes != 150 || a.ReadBytes != 7 || a.Requests != 3 ||
		a.Latency != 5*time.Millisecond || a.Ops[1].Errors != 1 || a.Service != "storage" || !a.LastSeen.Equal(time.Unix(1000, 0)) {
		t.Fatalf("job a %+v", a)
	}
	if only := tb.Snapshot("b"); len(only) != 1 || only[0].ReadBytes != 5 {
		t.Fatalf("snapshot of b %+v", only)
	}
}

// Jobs idle past Idle are dropped, and at most Max are kept (the least
// recently seen goes first), so the label "job" stays bounded.
func TestBounded(t *testing.T) {
	c := &clock{time.Unix(1000, 0)}
	tb := New(Options{Idle: time.Minute, Max: 3, Now: c.now})
	for i := range 3 {
		tb.Record(fmt.Sprint("j", i), "create", 0, 0, 0, false)
		c.t = c.t.Add(time.Second)
	}
	tb.Record("j0", "create", 0, 0, 0, false) // j1 is now the least recently seen
	tb.Record("j3", "create", 0, 0, 0, false)
	var ids []string
	for _, s := range tb.Snapshot("") {
		ids = append(ids, s.Job)
	}
	if strings.Join(ids, ",") != "j0,j2,j3" {
		t.Fatalf("jobs kept %v, want j0,j2,j3", ids)
	}
	c.t = c.t.Add(2 * time.Minute)
	if n := len(tb.Snapshot("")); n != 0 || tb.Len() != 0 {
		t.Fatalf("%d jobs kept after they were idle", n)
	}
}

func TestCollector(t *testing.T) {
	c := &clock{time.Unix(1000, 0)}
	tb := New(Options{Service: "meta", Now: c.now})
	tb.Record("a", "create_open", 0, 0, 20*time.Microsecond, false)
	tb.Record("a", "create_open", 0, 0, 5*time.Second, false) // past the last bucket: in the count only
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(tb)
	want := `
# HELP weft_job_requests_total Requests served for a job, by operation (jobs idle past --jobstats-cleanup are dropped).
# TYPE weft_job_requests_total counter
weft_job_requests_total{job="a",op="create_open",service="meta"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "weft_job_requests_total"); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "weft_job_seconds" {
			continue
		}
		h := mf.Metric[0].GetHistogram()
		b := h.Bucket
		if h.GetSampleCount() != 2 || b[0].GetCumulativeCount() != 0 || b[1].GetCumulativeCount() != 1 || b[len(b)-1].GetCumulativeCount() != 1 {
			t.Fatalf("histogram %v", h)
		}
		return
	}
	t.Fatal("no weft_job_seconds")
}
