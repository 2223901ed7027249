// Package metrics exposes what a weft process is doing in Prometheus'
// text format, for the dashboards and alerts storage admins already run.
//
// It measures at the transport boundary: Transport returns a transport
// (transport.Observed) whose listeners count, time and size every request
// they serve (weft_rpc_server_*) and whose connections do the same for every
// call made (weft_rpc_client_*), labelled by operation name. The servers
// and the client keep no metrics code of their own. NewRegistry adds the
// Go runtime and process collectors (resident memory, CPU, open
// descriptors, goroutines) and Handler serves a registry over HTTP.
//
// A mount's client adds RegisterClient's gauges, read at every scrape:
// the run-time parameters it applied (weft_client_param{name}) and its
// storage requests under way per server (weft_client_storage_inflight).
//
// Besides the transport, Scrub counts a storage server's scrub
// (weft_scrub_bytes_total, weft_scrub_corrupt_total, per target), through
// the storage.ScrubObserver the server calls.
//
// Invariants: observing changes no behaviour (transport.Observed passes
// requests, responses, errors and contexts through); the per-call cost is
// a map read under a read lock and a few atomic operations on metric
// handles created once per operation.
package metrics
