// Package pace limits background work (the metadata service's rebuild, the
// storage servers' scrub) to a number of bytes per second, so that clients
// keep most of the bandwidth.
//
// A Pacer is shared by every worker of one job: each range of n bytes
// reserves n/rate seconds after the ranges reserved before it, and Wait
// returns when its reservation begins. The rate may change at any moment
// (a run-time parameter); a change applies from the next range, and what
// a slower rate had reserved is forgotten. Rate 0 means no limit.
package pace
