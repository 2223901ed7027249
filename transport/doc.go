// Package transport moves request and response frames between weft
// processes. The Transport interface is what the rest of weft uses; TCP is the
// implementation today, and an RDMA transport can fill the same interface.
//
// Frames are multiplexed: many calls are in flight on one connection at once,
// each tagged with a request id, answered in any order.
package transport
