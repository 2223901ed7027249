// Package dashboard is weft's web dashboard, served by the metadata
// service (`weft meta --http ADDR`): the file system's health, capacity and
// inodes per target, throughput and IOPS over time, metadata requests per
// second, the top jobs, and the mounted clients, on one page with no external service
// and no resource from outside the binary.
//
// # Parts
//
//   - A sampler asks the Source (the metadata server) for its status every
//     Options.Interval and keeps the last Options.Keep samples: the rates
//     between two samples of the targets' cumulative I/O counters (which
//     storage servers send with every heartbeat) and of the metadata
//     server's request count, and the space used.
//   - HTTP: GET / (the page, embedded), /api/status (the health.Report of
//     `weft status --json`), /api/history (the samples), /api/jobs (the
//     top jobs: the per-job statistics of the metadata service and every
//     storage server, summed per job, most requests first; see TopJobs).
//
// # Invariants
//
//   - Rates are never negative: a counter that went down (its storage
//     server restarted) contributes nothing to that interval, and a target
//     seen for the first time contributes from its next sample on.
//   - The page only reads: nothing served here changes the file system.
//     It names client hosts and addresses, so serve it on a management
//     network only (like --metrics).
package dashboard
