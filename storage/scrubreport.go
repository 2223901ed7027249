package storage

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/weft-fs/weft/proto"
)

// ScrubObserver counts what the scrub does (the metrics package's
// weft_scrub_bytes_total and weft_scrub_corrupt_total).
type ScrubObserver interface {
	ScrubBytes(t proto.TargetID, n uint64)
	ScrubCorrupt(t proto.TargetID)
}

// Reports to the metadata service (reportLoop).
const (
	// scrubReportEvery is how often a target's changed scrub state is
	// reported; corrupt objects are reported at once.
	scrubReportEvery = 5 * time.Second
	// scrubReportIdle: an unchanged state is reported again this often,
	// so that a new metadata leader learns it.
	scrubReportIdle = time.Minute
	// scrubPendingMax bounds the corrupt objects kept per target while
	// the metadata service cannot be told (more are found again by the
	// next pass or read).
	scrubPendingMax = 16 * proto.MaxScrubFound
)

// scrubReporter tells the metadata service of the objects its targets
// find corrupt and of their scrub state.
type scrubReporter struct {
	mu      sync.Mutex
	pending map[*Target]map[proto.ObjectID]struct{}
	kick    chan struct{}
	every   time.Duration // scrubReportEvery (tests: less)
}

func newScrubReporter() *scrubReporter {
	return &scrubReporter{pending: map[*Target]map[proto.ObjectID]struct{}{}, kick: make(chan struct{}, 1), every: scrubReportEvery}
}

// found queues obj of t for the next report, at once. It never blocks
// (it is the targets' corrupt hook).
func (r *scrubReporter) found(t *Target, obj proto.ObjectID) {
	r.keep(t, []proto.ObjectID{obj})
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// keep queues objs of t for the next report.
func (r *scrubReporter) keep(t *Target, objs []proto.ObjectID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.pending[t]
	if m == nil {
		m = map[proto.ObjectID]struct{}{}
		r.pending[t] = m
	}
	for _, obj := range objs {
		if len(m) < scrubPendingMax {
			m[obj] = struct{}{}
		}
	}
}

// take removes and returns up to proto.MaxScrubFound objects queued for t.
func (r *scrubReporter) take(t *Target) []proto.ObjectID {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []proto.ObjectID
	for obj := range r.pending[t] {
		if len(out) == proto.MaxScrubFound {
			break
		}
		out = append(out, obj)
		delete(r.pending[t], obj)
	}
	return out
}

// loop reports until ctx ends: a target's found objects at once, its
// state when it changed (every scrubReportEvery) or every
// scrubReportIdle. Objects whose report failed are sent again.
func (r *scrubReporter) loop(ctx context.Context, srv *Server, rec proto.ScrubReceiver, log *slog.Logger) {
	type sent struct {
		st proto.ScrubTarget
		at time.Time
	}
	last := map[proto.TargetID]sent{}
	tick := time.NewTicker(r.every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-r.kick:
		}
		for _, t := range srv.Targets() {
			st := t.ScrubState()
			found := r.take(t)
			l, ok := last[st.Target]
			if len(found) == 0 && ok && l.st == st && time.Since(l.at) < scrubReportIdle {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, scrubReportIdle)
			err := rec.ReportScrub(cctx, proto.ScrubReport{ScrubTarget: st, Found: found})
			cancel()
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				log.Warn("storage: scrub report failed; sent again", "target", st.Target, "objects", len(found), "err", err)
				r.keep(t, found) // with the next tick: no busy retry
				continue
			}
			if len(found) > 0 {
				log.Info("storage: corrupt objects reported", "target", st.Target, "objects", len(found))
			}
			last[st.Target] = sent{st, time.Now()}
		}
	}
}
