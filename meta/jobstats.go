package meta

import (
	"context"
	"sync"
	"syscall"
	"time"

	"github.com/weft-fs/weft/jobstats"
	"github.com/weft-fs/weft/proto"
)

// JobStatsAsker is what a storage client offers to ask a storage server
// for its job statistics (storagerpc.Client implements it): the server
// that serves target t answers for all its targets.
type JobStatsAsker interface {
	JobStats(ctx context.Context, t proto.TargetID, job string) ([]proto.JobStat, error)
}

// jobStatsTimeout bounds the wait for one storage server's answer: a
// server that is down costs the report its line, not the whole command.
const jobStatsTimeout = 5 * time.Second

// JobTable is where the metadata RPC handler counts the requests that
// name a job (metarpc.JobStatsService).
func (s *Server) JobTable() *jobstats.Table { return s.jobs }

// JobStats returns the statistics of job (every job if "") kept by this
// server (Server "meta") and by every storage server that is up (Server its
// address), asked concurrently; a storage server that does not answer is
// logged and left out. Only root and servers may ask (EPERM).
func (s *Server) JobStats(ctx context.Context, job string) ([]proto.JobStat, error) {
	cl, err := s.authorize(ctx)
	if err != nil {
		return nil, err
	}
	if !cl.isRoot() {
		return nil, errnof(syscall.EPERM, "jobstats: only root may ask for job statistics")
	}
	if err := proto.ValidJobID(job); err != nil {
		return nil, errnof(syscall.EINVAL, "jobstats: %v", err)
	}
	out := s.jobs.Snapshot(job)
	for i := range out {
		out[i].Server = "meta"
	}
	asker, ok := s.opts.Storage.(JobStatsAsker)
	if !ok {
		return out, nil
	}
	// One target per storage server that is up: its server answers for
	// all of its targets.
	byAddr := map[string]proto.TargetID{}
	for _, t := range s.reg.list() {
		if _, seen := byAddr[t.Addr]; t.Up && !seen {
			byAddr[t.Addr] = t.ID
		}
	}
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for addr, t := range byAddr {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, jobStatsTimeout)
			defer cancel()
			st, err := asker.JobStats(cctx, t, job)
			if err != nil {
				s.log.Warn("meta: jobstats: storage server did not answer", "addr", addr, "err", err)
				return
			}
			for i := range st {
				st[i].Server = addr
			}
			mu.Lock()
			out = append(out, st...)
			mu.Unlock()
		})
	}
	wg.Wait()
	return out, nil
}

func withService(o jobstats.Options, service string) jobstats.Options {
	o.Service = service
	return o
}
