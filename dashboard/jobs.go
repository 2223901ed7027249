package dashboard

import (
	"cmp"
	"context"
	"net/http"
	"slices"
	"time"

	"github.com/weft-fs/weft/proto"
)

// JobSource is what a Source offers for the "top jobs" panel (meta.Server
// does): the per-job statistics of the metadata service and every storage
// server (see package jobstats).
type JobSource interface {
	JobStats(ctx context.Context, job string) ([]proto.JobStat, error)
}

// topJobs is how many jobs /api/jobs lists.
const topJobs = 20

// Job is one line of the "top jobs" panel: a job's statistics summed over
// the servers that counted it.
type Job struct {
	Job          string    `json:"job"`
	Requests     uint64    `json:"requests"`      // metadata and storage requests
	MetaRequests uint64    `json:"meta_requests"` // of which metadata
	ReadBytes    uint64    `json:"read_bytes"`
	WriteBytes   uint64    `json:"write_bytes"`
	MeanLatency  float64   `json:"mean_latency_seconds"`
	LastSeen     time.Time `json:"last_seen"`
}

// TopJobs sums st per job and returns the n with the most requests (ties:
// most bytes, then by id).
func TopJobs(st []proto.JobStat, n int) []Job {
	byJob := map[string]*Job{}
	lat := map[string]time.Duration{}
	for _, s := range st {
		j := byJob[s.Job]
		if j == nil {
			j = &Job{Job: s.Job}
			byJob[s.Job] = j
		}
		j.Requests += s.Requests
		if s.Service == "meta" {
			j.MetaRequests += s.Requests
		}
		j.ReadBytes += s.ReadBytes
		j.WriteBytes += s.WriteBytes
		lat[s.Job] += s.Latency
		if s.LastSeen.After(j.LastSeen) {
			j.LastSeen = s.LastSeen
		}
	}
	out := make([]Job, 0, len(byJob))
	for id, j := range byJob {
		if j.Requests > 0 {
			j.MeanLatency = (lat[id] / time.Duration(j.Requests)).Seconds()
		}
		out = append(out, *j)
	}
	slices.SortFunc(out, func(a, b Job) int {
		return cmp.Or(cmp.Compare(b.Requests, a.Requests), cmp.Compare(b.ReadBytes+b.WriteBytes, a.ReadBytes+a.WriteBytes), cmp.Compare(a.Job, b.Job))
	})
	return out[:min(n, len(out))]
}

func (d *Dashboard) serveJobs(w http.ResponseWriter, r *http.Request) {
	js, ok := d.src.(JobSource)
	if !ok {
		writeJSON(w, []Job{})
		return
	}
	st, err := js.JobStats(r.Context(), "")
	if err != nil {
		http.Error(w, "jobstats: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	writeJSON(w, TopJobs(st, topJobs))
}
