package client

import (
	"context"

	"github.com/weft-fs/weft/layout"
	"github.com/weft-fs/weft/proto"
)

// Read-ahead: when reads of a file look sequential, the client fetches the
// next few chunks (one stripe unit each, at most 1 MiB) from their targets
// concurrently, so a single sequential reader keeps several targets busy
// even though the kernel sends it one or two reads at a time.
//
// Invariants (under inodeState.mu):
//   - chunks are only created while no write of this client is in flight on
//     the file, and every accepted write or truncate drops them all, so a
//     chunk never holds data older than this client's own writes;
//   - Open drops them too (close-to-open: data cached before an open is
//     never served after it);
//   - a fetch takes its memory from the client budget without waiting (when
//     the budget is exhausted there is simply no read-ahead) and gives it
//     back when it completes; fetched chunks are bounded per open file by
//     the window (at most 8 MiB) and dropped on flush and last release.

const (
	raMaxChunk  = 1 << 20
	raMaxWindow = 8 << 20
)

type raChunk struct {
	off  uint64
	buf  []byte
	done chan struct{}
	err  error
}

type readAhead struct {
	next   uint64 // where the next sequential read is expected
	chunks []*raChunk
}

// raGeometry returns the chunk size and window for layout l.
func raGeometry(l layout.Layout) (chunk, window uint64) {
	chunk = min(l.StripeSize, raMaxChunk)
	window = min(uint64(max(l.StripeCount, 1))*l.StripeSize, raMaxWindow)
	return chunk, max(window, 2*chunk)
}

// dropRALocked forgets all read-ahead chunks. Fetches still running finish
// into buffers nobody will read and give their memory back.
func (st *inodeState) dropRALocked() {
	st.ra.chunks = nil
}

// readAheadLocked serves a sequential read from prefetched chunks when it
// can, and schedules more prefetching. It returns n >= 0 when p was filled
// (n bytes, the read having been clamped to size), or -1 to read directly.
// It may drop and retake st.mu.
func (c *Client) readAheadLocked(st *inodeState, p []byte, off, size uint64) int {
	l := st.layout
	if len(l.Targets) == 0 || l.StripeSize == 0 {
		return -1
	}
	chunk, window := raGeometry(l)
	end := min(off+uint64(len(p)), size)
	sequential := off <= st.ra.next+chunk && off+window >= st.ra.next && off > 0
	st.ra.next = end
	if !sequential || len(st.inflight) > 0 || st.dirty {
		st.dropRALocked()
		return -1
	}
	// Forget chunks behind the reader.
	keep := st.ra.chunks[:0]
	for _, ch := range st.ra.chunks {
		if ch.off+uint64(len(ch.buf)) > off {
			keep = append(keep, ch)
		}
	}
	clear(st.ra.chunks[len(keep):])
	st.ra.chunks = keep
	// Schedule chunks up to off+window, aligned to chunk.
	from := off - off%chunk
	if n := len(st.ra.chunks); n > 0 {
		last := st.ra.chunks[n-1]
		from = max(from, last.off+uint64(len(last.buf)))
	}
	for co := from; co < min(off+window, size); co += chunk {
		n := min(chunk-co%chunk, size-co)
		if !c.budget.tryAcquire(n) {
			break
		}
		ch := &raChunk{off: co, buf: make([]byte, n), done: make(chan struct{})}
		st.ra.chunks = append(st.ra.chunks, ch)
		c.wg.Add(1)
		go c.fetch(st.ino, l, ch)
	}
	// Serve the read if one chunk covers it.
	for _, ch := range st.ra.chunks {
		if ch.off <= off && end <= ch.off+uint64(len(ch.buf)) {
			st.mu.Unlock()
			<-ch.done
			st.mu.Lock()
			if ch.err != nil {
				return -1
			}
			// Still valid? A write or truncate while we waited drops it.
			for _, cur := range st.ra.chunks {
				if cur == ch {
					return copy(p[:end-off], ch.buf[off-ch.off:])
				}
			}
			return -1
		}
	}
	return -1
}

func (c *Client) fetch(ino proto.Ino, l layout.Layout, ch *raChunk) {
	defer c.wg.Done()
	ctx, cancel := context.WithTimeout(c.base, c.cfg.Timeout)
	ch.err = c.readRange(ctx, ino, l, ch.off, ch.buf)
	cancel()
	close(ch.done)
	c.budget.release(uint64(len(ch.buf)))
}
