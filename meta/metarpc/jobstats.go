package metarpc

import (
	"context"
	"fmt"

	"github.com/weft-fs/weft/jobstats"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/wire"
)

// Job statistics (ops 90..95 are this file's).
const (
	// OpJobStats returns the per-job statistics of the metadata service
	// and of the storage servers it asks (JobStatsService).
	OpJobStats uint16 = 90
)

// JobStatsService is what `weft jobstats` and the dashboard ask of the
// metadata service. meta.Server implements it, and so does Client (whose
// JobTable is nil).
type JobStatsService interface {
	// JobStats returns the statistics of job (every job if ""), as the
	// metadata service and each storage server counted them (one entry
	// per job and server). Only root and servers may ask.
	JobStats(ctx context.Context, job string) ([]proto.JobStat, error)
	// JobTable is where the handler counts the requests that name a job
	// (nil: nowhere).
	JobTable() *jobstats.Table
}

// jobStatsReqVersion is the format of jobStatsReq: u8 version, str job.
const jobStatsReqVersion = 1

type jobStatsReq struct{ Job string }

func (m *jobStatsReq) encode(e *wire.Encoder) {
	e.U8(jobStatsReqVersion)
	e.String(m.Job)
}

func (m *jobStatsReq) decode(d *wire.Decoder) {
	if v := d.U8(); d.Err() == nil && v != jobStatsReqVersion {
		d.Fail(fmt.Errorf("metarpc: job statistics request of version %d, want %d", v, jobStatsReqVersion))
		return
	}
	m.Job = d.StringMax(proto.MaxJobID)
}

// jobStatsResp is proto.EncodeJobStats' form.
type jobStatsResp struct{ S []proto.JobStat }

func (m *jobStatsResp) encode(e *wire.Encoder) { proto.EncodeJobStats(e, m.S) }
func (m *jobStatsResp) decode(d *wire.Decoder) { m.S = proto.DecodeJobStats(d) }

// JobStats implements JobStatsService.
func (c *Client) JobStats(ctx context.Context, job string) ([]proto.JobStat, error) {
	var r jobStatsResp
	err := c.do(ctx, OpJobStats, &jobStatsReq{Job: job}, &r)
	return r.S, err
}

// JobTable implements JobStatsService: a client counts nothing.
func (c *Client) JobTable() *jobstats.Table { return nil }
