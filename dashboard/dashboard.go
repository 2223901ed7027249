package dashboard

import (
	"context"
	"embed"
	"encoding/json"
	"io/fs"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/weft-fs/weft/health"
	"github.com/weft-fs/weft/proto"
)

// Source is where the dashboard gets the file system's status: the
// metadata server (meta.Server.Status).
type Source interface {
	Status(ctx context.Context) (proto.ClusterStatus, error)
}

// Options tunes a Dashboard. The zero value is fine.
type Options struct {
	Interval time.Duration // between samples (default 5s)
	Keep     int           // samples kept (default 720: an hour at 5s)
	Addr     string        // the metadata server's address, shown on the page
	Logger   *slog.Logger
	Now      func() time.Time
}

// Sample is the file system over one sampling interval ending at Time.
type Sample struct {
	Time         int64   `json:"t"` // unix milliseconds
	ReadBytes    float64 `json:"read_bytes_per_s"`
	WriteBytes   float64 `json:"write_bytes_per_s"`
	Reads        float64 `json:"reads_per_s"`
	Writes       float64 `json:"writes_per_s"`
	MetaRequests float64 `json:"meta_requests_per_s"`
	UsedBytes    uint64  `json:"used"`  // on the targets that are up
	TotalBytes   uint64  `json:"total"` // a shared file system once
	TargetsUp    int     `json:"targets_up"`
	Clients      int     `json:"clients"`
}

// Dashboard samples a Source and serves the page.
type Dashboard struct {
	src  Source
	opts Options

	mu      sync.Mutex
	samples []Sample // oldest first, at most opts.Keep
	prev    *proto.ClusterStatus
	prevAt  time.Time
}

// New returns a dashboard of src; call Run to sample and Handler to serve.
func New(src Source, opts Options) *Dashboard {
	if opts.Interval <= 0 {
		opts.Interval = 5 * time.Second
	}
	if opts.Keep <= 0 {
		opts.Keep = 720
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Dashboard{src: src, opts: opts}
}

// Run samples every Interval until ctx ends.
func (d *Dashboard) Run(ctx context.Context) {
	t := time.NewTicker(d.opts.Interval)
	defer t.Stop()
	for {
		d.sample(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (d *Dashboard) sample(ctx context.Context) {
	st, err := d.src.Status(ctx)
	if err != nil {
		if ctx.Err() == nil {
			d.opts.Logger.Warn("dashboard: status", "err", err)
		}
		return
	}
	d.add(st, d.opts.Now())
}

// add records st, taken at now, as a sample of the rates since the
// previous one (the first status only starts the series).
func (d *Dashboard) add(st proto.ClusterStatus, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	prev, prevAt := d.prev, d.prevAt
	d.prev, d.prevAt = &st, now
	if prev == nil {
		return
	}
	secs := now.Sub(prevAt).Seconds()
	if secs <= 0 {
		return
	}
	s := Sample{Time: now.UnixMilli(), Clients: len(st.Clients)}
	before := map[proto.TargetID]proto.IOCounters{}
	for _, t := range prev.Targets {
		before[t.ID] = t.IO
	}
	for _, t := range st.Targets {
		b, ok := before[t.ID]
		if !ok {
			continue
		}
		s.ReadBytes += rate(b.ReadBytes, t.IO.ReadBytes, secs)
		s.WriteBytes += rate(b.WriteBytes, t.IO.WriteBytes, secs)
		s.Reads += rate(b.Reads, t.IO.Reads, secs)
		s.Writes += rate(b.Writes, t.IO.Writes, secs)
	}
	s.MetaRequests = rate(prev.Requests, st.Requests, secs)
	ts := make([]health.Target, len(st.Targets))
	for i, t := range st.Targets {
		ts[i] = health.TargetOf(t)
	}
	sum := health.Sum(ts)
	s.UsedBytes, s.TotalBytes, s.TargetsUp = sum.Used, sum.Total, sum.Up
	d.samples = append(d.samples, s)
	if len(d.samples) > d.opts.Keep {
		d.samples = append(d.samples[:0], d.samples[len(d.samples)-d.opts.Keep:]...)
	}
}

// rate is the per-second increase from a to b; 0 when the counter went
// down (a restart started it again).
func rate(a, b uint64, secs float64) float64 {
	if b < a {
		return 0
	}
	return float64(b-a) / secs
}

// History returns the samples, oldest first.
func (d *Dashboard) History() []Sample {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Sample{}, d.samples...)
}

//go:embed static
var static embed.FS

// Handler serves the page and its API.
func (d *Dashboard) Handler() http.Handler {
	mux := http.NewServeMux()
	page, _ := fs.Sub(static, "static")
	mux.Handle("GET /", http.FileServerFS(page))
	mux.HandleFunc("GET /api/status", func(w http.ResponseWriter, r *http.Request) {
		st, err := d.src.Status(r.Context())
		if err != nil {
			http.Error(w, "status: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		writeJSON(w, health.Judge(d.opts.Addr, st))
	})
	mux.HandleFunc("GET /api/jobs", d.serveJobs)
	mux.HandleFunc("GET /api/history", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, struct {
			Interval float64  `json:"interval_seconds"`
			Samples  []Sample `json:"samples"`
		}{d.opts.Interval.Seconds(), d.History()})
	})
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(b)
}
