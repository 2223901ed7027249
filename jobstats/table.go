package jobstats

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weft-fs/weft/proto"
)

// Defaults of Options.
const (
	// DefaultIdle is how long a job is kept after its last request
	// (Lustre's job_cleanup_interval is 10 minutes too).
	DefaultIdle = 10 * time.Minute
	// DefaultMax bounds the jobs kept (and the "job" label's values).
	DefaultMax = 1024
)

// maxOps bounds the operation kinds kept per job: the op names of one
// service are a fixed set well below it, so it only guards against a bug.
const maxOps = 64

// latencyBuckets span a loopback small call (~20 µs) to a stalled disk
// (>2 s), as package metrics' do.
var latencyBuckets = prometheus.ExponentialBuckets(10e-6, 4, 10)

// Options configure a Table.
type Options struct {
	// Service names what is counted in the metrics ("meta", "storage").
	Service string
	// Idle: a job not seen for this long is dropped (default DefaultIdle).
	Idle time.Duration
	// Max: at most this many jobs are kept (default DefaultMax).
	Max int
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Table holds the statistics of the jobs a server saw recently. It is safe
// for concurrent use.
type Table struct {
	o Options

	mu   sync.Mutex
	jobs map[string]*job

	descOps, descErrs, descBytes, descSeconds, descLast *prometheus.Desc
}

type job struct {
	ops           map[string]*opCount
	read, written uint64
	count         uint64
	sum           time.Duration
	buckets       [11]uint64 // per latencyBuckets upper bound, not cumulative; the last is past them all
	first, last   time.Time
}

type opCount struct{ n, errs uint64 }

// New returns an empty table.
func New(o Options) *Table {
	if o.Idle <= 0 {
		o.Idle = DefaultIdle
	}
	if o.Max <= 0 {
		o.Max = DefaultMax
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	labels := prometheus.Labels{"service": o.Service}
	return &Table{
		o:    o,
		jobs: map[string]*job{},
		descOps: prometheus.NewDesc("weft_job_requests_total",
			"Requests served for a job, by operation (jobs idle past --jobstats-cleanup are dropped).", []string{"job", "op"}, labels),
		descErrs: prometheus.NewDesc("weft_job_errors_total",
			"Requests served for a job that ended in an error, by operation.", []string{"job", "op"}, labels),
		descBytes: prometheus.NewDesc("weft_job_bytes_total",
			"Data bytes read or written for a job (storage servers).", []string{"job", "dir"}, labels),
		descSeconds: prometheus.NewDesc("weft_job_seconds",
			"Time to serve a job's requests.", []string{"job"}, labels),
		descLast: prometheus.NewDesc("weft_job_last_seen_seconds",
			"When the job's last request was served (Unix time).", []string{"job"}, labels),
	}
}

// Record counts one request of job: operation op, the data bytes it read
// and wrote, how long it took to serve and whether it failed. An empty job
// is not counted.
func (t *Table) Record(jobID, op string, read, written uint64, took time.Duration, failed bool) {
	if jobID == "" {
		return
	}
	now := t.o.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	j := t.jobs[jobID]
	if j == nil {
		t.makeRoomLocked(now)
		j = &job{ops: map[string]*opCount{}, first: now}
		t.jobs[jobID] = j
	}
	c := j.ops[op]
	if c == nil {
		if len(j.ops) >= maxOps {
			op = "other"
			if c = j.ops[op]; c == nil {
				c = &opCount{}
				j.ops[op] = c
			}
		} else {
			c = &opCount{}
			j.ops[op] = c
		}
	}
	c.n++
	if failed {
		c.errs++
	}
	j.read += read
	j.written += written
	j.count++
	j.sum += took
	j.buckets[bucket(took)]++
	j.last = now
}

func bucket(d time.Duration) int {
	s := d.Seconds()
	for i, ub := range latencyBuckets {
		if s <= ub {
			return i
		}
	}
	return len(latencyBuckets) // only in the count (+Inf)
}

// makeRoomLocked drops idle jobs and, at the cap, the least recently seen.
func (t *Table) makeRoomLocked(now time.Time) {
	t.expireLocked(now)
	for len(t.jobs) >= t.o.Max {
		var oldest string
		var at time.Time
		for id, j := range t.jobs {
			if oldest == "" || j.last.Before(at) {
				oldest, at = id, j.last
			}
		}
		delete(t.jobs, oldest)
	}
}

func (t *Table) expireLocked(now time.Time) {
	for id, j := range t.jobs {
		if now.Sub(j.last) > t.o.Idle {
			delete(t.jobs, id)
		}
	}
}

// Len returns the number of jobs kept.
func (t *Table) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.jobs)
}

// Snapshot returns the statistics of every job kept (after dropping idle
// ones), sorted by job id; only is "" for all jobs or names one.
func (t *Table) Snapshot(only string) []proto.JobStat {
	now := t.o.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expireLocked(now)
	out := make([]proto.JobStat, 0, len(t.jobs))
	for id, j := range t.jobs {
		if only != "" && id != only {
			continue
		}
		s := proto.JobStat{Job: id, Service: t.o.Service, ReadBytes: j.read, WriteBytes: j.written,
			Requests: j.count, Latency: j.sum, FirstSeen: j.first, LastSeen: j.last}
		for name, c := range j.ops {
			s.Ops = append(s.Ops, proto.JobOp{Name: name, Count: c.n, Errors: c.errs})
		}
		slices.SortFunc(s.Ops, func(a, b proto.JobOp) int { return cmp.Compare(a.Name, b.Name) })
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b proto.JobStat) int { return cmp.Compare(a.Job, b.Job) })
	return out
}

// Describe implements prometheus.Collector.
func (t *Table) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{t.descOps, t.descErrs, t.descBytes, t.descSeconds, t.descLast} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: one series per job kept (jobs
// dropped as idle or over the cap disappear, so the cardinality is bounded).
func (t *Table) Collect(ch chan<- prometheus.Metric) {
	now := t.o.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expireLocked(now)
	for id, j := range t.jobs {
		for name, c := range j.ops {
			ch <- prometheus.MustNewConstMetric(t.descOps, prometheus.CounterValue, float64(c.n), id, name)
			ch <- prometheus.MustNewConstMetric(t.descErrs, prometheus.CounterValue, float64(c.errs), id, name)
		}
		if j.read > 0 || j.written > 0 {
			ch <- prometheus.MustNewConstMetric(t.descBytes, prometheus.CounterValue, float64(j.read), id, "read")
			ch <- prometheus.MustNewConstMetric(t.descBytes, prometheus.CounterValue, float64(j.written), id, "write")
		}
		cum := map[float64]uint64{}
		var acc uint64
		for i, ub := range latencyBuckets {
			acc += j.buckets[i]
			cum[ub] = acc
		}
		ch <- prometheus.MustNewConstHistogram(t.descSeconds, j.count, j.sum.Seconds(), cum, id)
		ch <- prometheus.MustNewConstMetric(t.descLast, prometheus.GaugeValue, float64(j.last.UnixNano())/1e9, id)
	}
}
