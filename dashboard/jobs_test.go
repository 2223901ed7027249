package dashboard

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/weft-fs/weft/proto"
)

type jobsSource struct {
	fixedSource
	jobs []proto.JobStat
}

func (s *jobsSource) JobStats(context.Context, string) ([]proto.JobStat, error) { return s.jobs, nil }

// TestTopJobs: a job's lines from several servers are summed, jobs come
// most requests first, and /api/jobs serves them (an empty list from a
// source without job statistics).
func TestTopJobs(t *testing.T) {
	t0 := time.Unix(1000, 0)
	src := &jobsSource{jobs: []proto.JobStat{
		{Job: "small", Service: "meta", Requests: 3, Latency: 3 * time.Millisecond, LastSeen: t0},
		{Job: "big", Service: "meta", Requests: 10, Latency: 10 * time.Millisecond, LastSeen: t0},
		{Job: "big", Service: "storage", Server: "s1", Requests: 5, WriteBytes: 500, Latency: 5 * time.Millisecond, LastSeen: t0.Add(time.Second)},
		{Job: "big", Service: "storage", Server: "s2", Requests: 5, ReadBytes: 7, Latency: 5 * time.Millisecond, LastSeen: t0},
	}}
	rec := httptest.NewRecorder()
	New(src, Options{}).Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/api/jobs", nil))
	var got []Job
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatalf("%s: %v", rec.Body, err)
	}
	if len(got) != 2 || got[0].Job != "big" || got[1].Job != "small" {
		t.Fatalf("top jobs %+v", got)
	}
	b := got[0]
	if b.Requests != 20 || b.MetaRequests != 10 || b.WriteBytes != 500 || b.ReadBytes != 7 || b.MeanLatency != 0.001 || !b.LastSeen.Equal(t0.Add(time.Second)) {
		t.Fatalf("big %+v", b)
	}
	if top := TopJobs(src.jobs, 1); len(top) != 1 || top[0].Job != "big" {
		t.Fatalf("top 1: %+v", top)
	}
	rec = httptest.NewRecorder()
	New(&fixedSource{}, Options{}).Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/api/jobs", nil))
	if rec.Body.String() != "[]" {
		t.Fatalf("no job source: %s", rec.Body)
	}
}
