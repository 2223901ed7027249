package client

import (
	"context"
	"sync/atomic"

	"github.com/weft-fs/weft/layout"
)

// Read-ahead: when the reads through one handle look sequential, the client
// fetches the chunks (one stripe unit each, at most 1 MiB; of an EC file a
// row, if at most 4 MiB, see raGeometry) ahead of the
// reader from their targets concurrently, so a single sequential reader
// keeps several targets busy even though the kernel sends it one or two
// reads at a time.
//
// Sequential detection is per handle (File): a read is sequential when it
// starts at most one chunk before the previous read of the handle and at
// most one window past its end (so strided readers such as ior-hard's, which skip the
// records of the other processes, count), and read-ahead starts at the
// third read in a row that looks sequential. Fetched chunks are shared per inode: several
// processes reading one file interleaved (ior-hard) are served from the same
// chunks, and a reader that is not sequential still uses the chunks that
// cover it but never drops them.
//
// Invariants (under inodeState.mu):
//   - chunks are only created while no write of this client is in flight on
//     the file and nothing is dirty, and every accepted write or truncate
//     drops them all, so a chunk never holds data older than this client's
//     own writes;
//   - Open drops them too (close-to-open: data cached before an open is
//     never served after it);
//   - every chunk holds its size of the client budget from the moment it is
//     scheduled (taken without waiting: when the budget is exhausted there
//     is simply no read-ahead) until it is both dropped and fetched, so the
//     memory of read-ahead is bounded by the budget; an inode keeps at most
//     a window plus raSlack chunks (the lowest one, once a reader is past
//     it, makes room for the next), and drops them all on flush and on the
//     last release.

const (
	raMaxChunk  = 1 << 20
	raMaxWindow = 8 << 20
	// raMinChunks keeps several chunks in flight even for files striped
	// over one or two targets: a target serves concurrent reads of one
	// object in parallel too.
	raMinChunks = 4
	// raMinHits is how many sequential reads in a row start read-ahead.
	raMinHits = 2
	// raSlack is how many chunks an inode keeps beyond one window, for
	// readers lagging behind the one furthest ahead.
	raSlack = 4
)

type raChunk struct {
	c    *Client
	off  uint64
	buf  []byte
	done chan struct{}
	err  error
	// refs counts the map entry, the fetch and each reader copying out;
	// the last one returns the buffer and its budget.
	refs atomic.Int32
}

func (ch *raChunk) unref() {
	if ch.refs.Add(-1) == 0 {
		n := uint64(len(ch.buf))
		ch.c.bufs.Put(ch.buf)
		ch.buf = nil
		ch.c.budget.release(n)
	}
}

type readAhead struct {
	chunk  uint64              // chunk size the map is keyed by
	chunks map[uint64]*raChunk // by offset, a multiple of chunk
}

// raStream is the sequential-read state of one handle (under
// inodeState.mu).
type raStream struct {
	prev, next uint64 // start and end of the previous read
	hits       int    // consecutive sequential reads
}

// raGeometry returns the chunk size and window for layout l. The window
// covers every data column once (an EC stripe has ECData of them), at
// least raMinChunks chunks, at most raMaxWindow. An EC file's chunk is a
// row when the window holds two: a row is read at once, so with a data
// shard's server down it is decoded from ECData shards read once
// (ecReadRange), not a shard's worth at a time from all the others.
func raGeometry(l layout.Layout) (chunk, window uint64) {
	chunk = min(l.StripeSize, raMaxChunk)
	cols := uint64(max(l.StripeCount, 1))
	if l.Kind == layout.EC {
		cols *= uint64(max(l.ECData, 1))
		if rb := l.RowBytes(); rb > chunk && rb <= raMaxWindow/2 {
			chunk = rb
		}
	}
	window = min(max(cols*l.StripeSize, raMinChunks*chunk), raMaxWindow)
	return chunk, window
}

// dropRALocked forgets all read-ahead chunks. Fetches still running finish
// into buffers nobody will read and give their memory back.
func (st *inodeState) dropRALocked() {
	for _, ch := range st.ra.chunks {
		ch.unref()
	}
	st.ra.chunks = nil
	st.small = nil // the file's copy is served where read-ahead is (copies.go)
}

// evictBehindLocked drops the chunk with the lowest offset if it lies
// wholly before off, and reports whether it did. Evicting only the lowest
// chunk, and only behind the reader asking for room, means a chunk that was
// evicted is not fetched again while the set is full: several processes
// reading one file interleaved (ior-hard) never make each other refetch.
func (st *inodeState) evictBehindLocked(off uint64) bool {
	var low *raChunk
	for _, ch := range st.ra.chunks {
		if low == nil || ch.off < low.off {
			low = ch
		}
	}
	if low == nil || low.off+uint64(len(low.buf)) > off {
		return false
	}
	delete(st.ra.chunks, low.off)
	low.unref()
	return true
}

// raPiece is a part of a read: served by chunk ch, or read directly (nil).
type raPiece struct {
	off, end uint64
	ch       *raChunk
}

// readAheadLocked notes the read [off, off+len(p)) of stream s, schedules
// prefetching when the stream is sequential, and splits the read (clamped
// to size) into pieces served by fetched chunks and pieces to read directly.
// It returns nil when no chunk covers any of the read. The chunks of the
// pieces returned are referenced; the caller unrefs them.
func (c *Client) readAheadLocked(st *inodeState, s *raStream, p []byte, off, size uint64) []raPiece {
	l := st.layout
	if len(l.Targets) == 0 || l.StripeSize == 0 {
		return nil
	}
	chunk, window := raGeometry(l)
	if w := c.params.raWindow.Load(); w > 0 {
		window = min(max(w, chunk), raMaxWindow) // client.read_ahead (params.go)
	}
	end := min(off+uint64(len(p)), size)
	// Sequential: near the previous read, allowing a gap of up to a window
	// (strided readers) and a step back of up to a chunk (the kernel's
	// asynchronous read-ahead requests may arrive slightly out of order).
	if s.next > 0 && off+chunk >= s.prev && off <= s.next+window {
		s.hits++
	} else {
		s.hits = 0
	}
	s.prev, s.next = off, end
	if st.ra.chunk != chunk {
		st.dropRALocked()
		st.ra.chunk = chunk
	}
	// Read-ahead starts at the third read in a row that looks sequential
	// (a random reader is rarely taken for a sequential one twice in a
	// row) with one chunk and doubles up to the window.
	if s.hits >= raMinHits && len(st.inflight) == 0 && !st.dirty {
		full := window
		window = min(window, chunk<<min(s.hits-raMinHits, 8))
		if st.ra.chunks == nil {
			st.ra.chunks = make(map[uint64]*raChunk)
		}
		maxChunks := int(full/chunk) + raSlack
		for co := off - off%chunk; co < min(off+window, size); co += chunk {
			if st.ra.chunks[co] != nil {
				continue
			}
			if len(st.ra.chunks) >= maxChunks && !st.evictBehindLocked(off) {
				break
			}
			n := min(chunk, size-co)
			if !c.budget.tryAcquire(n) {
				break
			}
			ch := &raChunk{c: c, off: co, buf: c.bufs.Get(int(n)), done: make(chan struct{})}
			ch.refs.Store(2)
			st.ra.chunks[co] = ch
			c.wg.Add(1)
			go c.fetch(st, l, ch, st.job)
		}
	}
	if len(st.ra.chunks) == 0 {
		return nil
	}
	var pieces []raPiece
	hit := false
	for pos := off; pos < end; {
		co := pos - pos%chunk
		pe := min(co+chunk, end)
		ch := st.ra.chunks[co]
		if ch != nil && pe <= co+uint64(len(ch.buf)) {
			ch.refs.Add(1)
			hit = true
		} else {
			ch = nil
		}
		pieces = append(pieces, raPiece{off: pos, end: pe, ch: ch})
		pos = pe
	}
	if !hit {
		return nil
	}
	return pieces
}

func (c *Client) fetch(st *inodeState, l layout.Layout, ch *raChunk, job string) {
	defer c.wg.Done()
	ctx, cancel := context.WithTimeout(withJob(c.base, job), c.cfg.Timeout)
	ch.err = c.readRange(ctx, st, l, ch.off, ch.buf)
	cancel()
	close(ch.done)
	ch.unref()
}
