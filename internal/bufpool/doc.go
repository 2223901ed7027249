// Package bufpool recycles byte buffers in power-of-two size classes, so
// that a stream of large messages (frame bodies, read and write buffers)
// does not allocate, zero and garbage-collect a fresh buffer each time.
//
// Invariants: Get(n) returns a slice of length n with undefined contents;
// buffers from Min to Max bytes have a power-of-two capacity and are
// recycled by Put; smaller and larger ones are plain allocations of exactly
// n bytes, and Put ignores them (and any slice it did not hand out).
package bufpool
