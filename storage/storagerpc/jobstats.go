package storagerpc

import (
	"context"
	"encoding/binary"
	"fmt"
	"syscall"
	"time"

	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/wire"
)

// Job statistics (ops 140..145 are this file's).
const (
	// OpJob wraps another storage request with the job id it is made for
	// (proto.WithJob): the server counts it for the job (package jobstats)
	// and serves the inner request as if it came alone.
	//
	//	u8   version (jobEnvelopeVersion)
	//	u16  the inner op (never OpJob itself)
	//	str  job id (u32 length, at most proto.MaxJobID bytes, proto.ValidJobID)
	//	...  the inner request's body
	OpJob uint16 = 140
	// OpJobStats returns the server's per-job statistics:
	//
	//	u8 version (jobStatsReqVersion), str job ("": all) -> proto.EncodeJobStats
	//
	// Only servers (the metadata service gathering them) may ask.
	OpJobStats uint16 = 141
	// OpJobRead and OpJobWrite are OpJob around OpRead and OpWrite (the
	// same body; the inner op must be that one): their own codes so that
	// the per-operation metrics (package metrics names them "read" and
	// "write") keep counting data traffic by kind when jobs are tagged.
	OpJobRead  uint16 = 142
	OpJobWrite uint16 = 143
)

// jobOp is the op code a request of op for a job is sent with.
func jobOp(op uint16) uint16 {
	switch op {
	case OpRead:
		return OpJobRead
	case OpWrite:
		return OpJobWrite
	case OpReadSums:
		return OpJobReadSums
	}
	return OpJob
}

const (
	jobEnvelopeVersion = 1
	jobStatsReqVersion = 1
)

// jobEnvelope returns the part that makes a request of op a request of
// OpJob for job.
func jobEnvelope(op uint16, job string) []byte {
	e := wire.NewEncoder(7 + len(job))
	e.U8(jobEnvelopeVersion)
	e.U16(op)
	e.String(job)
	return e.B
}

// decodeJobEnvelope reads jobEnvelope's part off the front of b.
func decodeJobEnvelope(outer uint16, b []byte) (op uint16, job string, rest []byte, err error) {
	d := wire.NewDecoder(b)
	if v := d.U8(); d.Err() == nil && v != jobEnvelopeVersion {
		return 0, "", nil, fmt.Errorf("storagerpc: job envelope version %d not supported (want %d)", v, jobEnvelopeVersion)
	}
	op = d.U16()
	job = d.StringMax(proto.MaxJobID)
	if err := d.Err(); err != nil {
		return 0, "", nil, fmt.Errorf("storagerpc: job envelope: %w", err)
	}
	if op == OpJob || op == OpJobStats || op == OpJobRead || op == OpJobWrite || op == OpJobReadSums || jobOp(op) != outer {
		return 0, "", nil, fmt.Errorf("storagerpc: job envelope of op %d around op %d", outer, op)
	}
	if err := proto.ValidJobID(job); err != nil {
		return 0, "", nil, fmt.Errorf("storagerpc: job envelope: %w", err)
	}
	return op, job, d.Remaining(), nil
}

// serveJob serves an OpJob, OpJobRead or OpJobWrite request: the inner
// request with the job in ctx, counted for the job in Options.Jobs.
func (h *Handler) serveJob(ctx context.Context, outer uint16, req []byte) ([]byte, error) {
	op, job, inner, err := decodeJobEnvelope(outer, req)
	if err != nil {
		return h.bad(outer, req, err)
	}
	if h.jobs == nil || job == "" {
		return h.serve(proto.WithJob(ctx, job), op, inner)
	}
	var written uint64
	if op == OpWrite {
		// Before Serve: the body is not ours after it (DoneWithRequest).
		if w, err := DecodeWrite(inner); err == nil {
			written = uint64(len(w.Data))
		}
	}
	start := time.Now()
	resp, err := h.serve(proto.WithJob(ctx, job), op, inner)
	var read uint64
	if err == nil && op == OpRead {
		read = uint64(len(resp))
	}
	if err == nil && op == OpReadSums && len(resp) >= 5 {
		read = uint64(binary.LittleEndian.Uint32(resp[1:])) // the bytes may follow by sendfile
	}
	if err != nil {
		written = 0
	}
	name := OpName(op)
	if name == "" {
		name = "unknown"
	}
	h.jobs.Record(job, name, read, written, time.Since(start), err != nil)
	return resp, err
}

// serveJobStats serves OpJobStats.
func (h *Handler) serveJobStats(ctx context.Context, req []byte) ([]byte, error) {
	d := wire.NewDecoder(req)
	if v := d.U8(); d.Err() == nil && v != jobStatsReqVersion {
		return h.bad(OpJobStats, req, fmt.Errorf("storagerpc: job statistics request version %d not supported", v))
	}
	job := d.StringMax(proto.MaxJobID)
	if err := d.Done(); err != nil {
		return h.bad(OpJobStats, req, fmt.Errorf("storagerpc: job statistics request: %w", err))
	}
	if err := h.guard.serverOnly(ctx, OpJobStats); err != nil {
		return nil, err
	}
	if h.jobs == nil {
		return nil, fmt.Errorf("storagerpc: this server keeps no job statistics: %w", syscall.ENOSYS)
	}
	e := wire.NewEncoder(256)
	proto.EncodeJobStats(e, h.jobs.Snapshot(job))
	return e.B, nil
}

// JobStats asks the server of target t for its job statistics (job, or
// every job if ""): the server answers for all its targets. Only servers
// may ask (meta.Server.JobStats gathers them).
func (c *Client) JobStats(ctx context.Context, t proto.TargetID, job string) ([]proto.JobStat, error) {
	e := wire.NewEncoder(8 + len(job))
	e.U8(jobStatsReqVersion)
	e.String(job)
	addr, err := c.resolve(ctx, t)
	if err != nil {
		return nil, fmt.Errorf("storagerpc: target %d: %w", t, err)
	}
	b, err := c.pool.Call(ctx, addr, OpJobStats, e.B)
	if err != nil {
		return nil, err
	}
	d := wire.NewDecoder(b)
	st := proto.DecodeJobStats(d)
	if err := d.Done(); err != nil {
		return nil, fmt.Errorf("storagerpc: job statistics answer: %w: %w", err, syscall.EIO)
	}
	return st, nil
}
