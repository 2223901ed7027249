// Package jobstats keeps per-job request statistics on a server, like
// Lustre's jobstats: for every job id that requests carry (see
// proto.WithJob; a mount takes it from an environment variable of the
// calling process), the operations by kind and their errors, bytes read
// and written, latency (sum, count and a histogram) and when the job was
// first and last seen.
//
// A Table is what a metadata or storage server records into (from its RPC
// handler: metarpc and storagerpc call Record once per request that names a
// job) and what `weft jobstats`, the dashboard and Prometheus read (Snapshot,
// and the Table as a prometheus.Collector).
//
// Invariants:
//   - Memory is bounded: a job not seen for Options.Idle is dropped (checked
//     when a new job arrives and on every read), and at most Options.Max
//     jobs are kept (a new job past it evicts the least recently seen one),
//     each with at most maxOps operation kinds. The Prometheus label "job"
//     therefore has at most Max values at any time.
//   - Requests that name no job are not counted (the server's own
//     per-operation metrics count everything, see package metrics).
//   - Recording costs one mutex and a map lookup; nothing is allocated for
//     a job and operation already known.
package jobstats
