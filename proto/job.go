package proto

import (
	"context"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/weft-fs/weft/wire"
)

// MaxJobID is the longest job id a request may carry (Lustre's limit is
// 32; batch systems' ids with a step suffix fit in 64).
const MaxJobID = 64

// ValidJobID reports whether id may name a job: at most MaxJobID bytes of
// printable UTF-8 without spaces ("" is no job), so it is safe as a
// Prometheus label value and in one column of `weft jobstats`.
func ValidJobID(id string) error {
	if len(id) > MaxJobID {
		return fmt.Errorf("proto: job id of %d bytes, at most %d", len(id), MaxJobID)
	}
	if !utf8.ValidString(id) {
		return fmt.Errorf("proto: job id %q is not UTF-8", id)
	}
	for _, r := range id {
		if r <= ' ' || r == 0x7f {
			return fmt.Errorf("proto: job id %q has a space or control character", id)
		}
	}
	return nil
}

// WithJob returns ctx carrying the job id on whose behalf a request is
// made ("" for none): servers count requests per job (package jobstats).
func WithJob(ctx context.Context, job string) context.Context {
	r := identityOf(ctx)
	r.job = job
	return context.WithValue(ctx, requestKey{}, &r)
}

// WithCredJob is WithJob(WithCred(ctx, c), job) with one allocation (the
// FUSE adapter's one call per system call).
func WithCredJob(ctx context.Context, c Cred, job string) context.Context {
	r := identityOf(ctx)
	r.cred, r.hasCred, r.job = c, true, job
	return context.WithValue(ctx, requestKey{}, &r)
}

// JobFrom returns the job id ctx carries ("" for none).
func JobFrom(ctx context.Context) string {
	if r, ok := ctx.Value(requestKey{}).(*requestIdentity); ok {
		return r.job
	}
	return ""
}

// JobStat is what one server counted for one job (package jobstats).
type JobStat struct {
	Job     string
	Service string // "meta" or "storage"
	Server  string // the server's address (filled in by whoever gathers several)
	Ops     []JobOp
	// ReadBytes and WriteBytes are data bytes (storage servers only).
	ReadBytes, WriteBytes uint64
	// Requests and Latency are the count and total time of the requests
	// served for the job.
	Requests            uint64
	Latency             time.Duration
	FirstSeen, LastSeen time.Time
}

// JobOp is the count of one kind of operation of a job, and of those that
// failed.
type JobOp struct {
	Name          string
	Count, Errors uint64
}

// Op returns the count of operation name (0 if none).
func (s JobStat) Op(name string) uint64 {
	for _, o := range s.Ops {
		if o.Name == name {
			return o.Count
		}
	}
	return 0
}

// jobStatsVersion is the format of EncodeJobStats:
//
//	u8   version
//	u32  n jobs, each:
//	     str job, str service, str server,
//	     u32 n ops, each: str name, u64 count, u64 errors
//	     u64 read bytes, u64 write bytes, u64 requests, i64 latency (ns),
//	     i64 first seen, i64 last seen (Unix ns)
const jobStatsVersion = 1

// MaxJobStats bounds the jobs one answer may carry (a gathering of every
// server's table, each bounded by jobstats.Options.Max).
const MaxJobStats = 1 << 20

// EncodeJobStats appends stats to e in the wire form (metarpc's and
// storagerpc's job statistics answers).
func EncodeJobStats(e *wire.Encoder, stats []JobStat) {
	e.U8(jobStatsVersion)
	e.U32(uint32(len(stats)))
	for _, s := range stats {
		e.String(s.Job)
		e.String(s.Service)
		e.String(s.Server)
		e.U32(uint32(len(s.Ops)))
		for _, o := range s.Ops {
			e.String(o.Name)
			e.U64(o.Count)
			e.U64(o.Errors)
		}
		e.U64(s.ReadBytes)
		e.U64(s.WriteBytes)
		e.U64(s.Requests)
		e.I64(int64(s.Latency))
		e.I64(s.FirstSeen.UnixNano())
		e.I64(s.LastSeen.UnixNano())
	}
}

// DecodeJobStats reads what EncodeJobStats wrote; errors are left in d.
func DecodeJobStats(d *wire.Decoder) []JobStat {
	if v := d.U8(); d.Err() == nil && v != jobStatsVersion {
		d.Fail(fmt.Errorf("proto: job statistics format %d not supported (want %d)", v, jobStatsVersion))
		return nil
	}
	n := d.Count(MaxJobStats, 4*3+4+8*6)
	var out []JobStat
	for i := 0; i < n && d.Err() == nil; i++ {
		s := JobStat{Job: d.StringMax(MaxJobID), Service: d.StringMax(64), Server: d.StringMax(1024)}
		m := d.Count(256, 4+16)
		for k := 0; k < m && d.Err() == nil; k++ {
			s.Ops = append(s.Ops, JobOp{Name: d.StringMax(64), Count: d.U64(), Errors: d.U64()})
		}
		s.ReadBytes = d.U64()
		s.WriteBytes = d.U64()
		s.Requests = d.U64()
		s.Latency = time.Duration(d.I64())
		s.FirstSeen = time.Unix(0, d.I64())
		s.LastSeen = time.Unix(0, d.I64())
		out = append(out, s)
	}
	if d.Err() != nil {
		return nil
	}
	return out
}
