// Package checks holds one compile-time switch, Off, for measuring what
// weft's per-request protection costs (issue 7's budget: permission
// enforcement and capability checks may add at most 5 % to 4 KiB random
// reads, mdtest stat and create).
//
// Off is false in every normal build. Only a binary built with
// `go build -tags weft_nocheck` has it true, and then:
//   - the metadata server acts for every authenticated client as root
//     (no permission checks: the credentials a request carries are
//     ignored), still refusing peers that did not authenticate;
//   - storage servers take any capability a client sends without
//     verifying it;
//   - the mount sends no supplementary groups (it does not read
//     /proc/PID/status).
//
// Connections stay mutually authenticated (TLS) either way: that cost is
// per connection, not per request. Such a binary must never serve real
// data: its version string says "checks OFF", every daemon logs it at
// error level at start, and nothing in the repository builds with the tag
// except scripts/bench-ab.sh when asked (--tags-a/--tags-b). Because Off
// is a constant, the normal build compiles the switched-off paths away.
package checks
