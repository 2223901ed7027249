package client

import "github.com/weft-fs/weft/internal/bufpool"

// newBufPool returns the pool of write-behind, coalescing and read-ahead
// buffers: power-of-two classes from 4 KiB to 4 MiB, so a stream of 1 MiB
// writes does not allocate (and the GC does not scan) a fresh megabyte per
// write, and an extent that grows by merging keeps room to grow in place.
func newBufPool() *bufpool.Pool { return bufpool.New(4<<10, 4<<20) }
