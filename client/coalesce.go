package client

import (
	"time"

	"github.com/weft-fs/weft/layout"
)

// Write coalescing: an accepted write is not sent at once but kept in an
// open extent of its inode, and writes that are contiguous with (or
// overlap) an open extent are merged into it, so a stream of small or
// unaligned writes — the kernel cuts buffered writes at page boundaries,
// and ior-hard's 47,008-byte records of several processes interleave in one
// shared file — reaches the storage targets as a few large RPCs instead of
// one RPC and one read-modify-write of partial checksum blocks per write.
//
// Extents never cross a chunk boundary (a multiple of chunkSize, which
// divides the stripe unit), so each one is a single storage RPC. An extent
// is sent when it fills its chunk, when it reaches the end of its chunk
// with no other extent open in that chunk (a sequential stream), when more
// than maxOpenExtents are open (the least recently written goes), when the
// per-file or global memory limit needs its bytes, before a read, flush,
// fsync or truncate that must see it, and at the latest idleFlush after it
// was last written or maxExtentAge after it was opened (a timer; for an EC
// file, whose chunk is a row, ecIdleFlush and ecMaxExtentAge), so data
// never sits unsent while the file stays open.
//
// Only bytes this client was given are ever sent: gaps between extents are
// never filled (a disjoint writer on another mount must not be clobbered).

const (
	// maxExtent is the largest chunk: big enough that an RPC's fixed cost
	// vanishes, small enough that several chunks of a stripe unit go to
	// their target in parallel.
	maxExtent = 1 << 20
	// maxOpenExtents bounds the extents open per inode: enough for the
	// records of several processes writing one file interleaved, each a
	// little ahead of or behind the others.
	maxOpenExtents = 16
	// idleFlush sends an extent no write has touched for this long.
	idleFlush = 3 * time.Millisecond
	// maxExtentAge sends an extent that keeps being rewritten.
	maxExtentAge = 30 * time.Millisecond
	// ecIdleFlush and ecMaxExtentAge replace them for an extent of an EC
	// file that is not yet a whole row: sent so, it costs a read of the
	// row's shards and a conditional write of all of them (ecUpdateRow),
	// about three times a whole row's cost. A sequential writer on a
	// loaded machine easily pauses a few milliseconds between two writes
	// of one row; it seldom pauses 25.
	ecIdleFlush    = 25 * time.Millisecond
	ecMaxExtentAge = 250 * time.Millisecond
)

// flushDelays returns after how long an open extent of layout l that no
// write touched is sent, and after how long it is sent anyway.
func flushDelays(l layout.Layout) (idle, age time.Duration) {
	if l.Kind == layout.EC {
		return ecIdleFlush, ecMaxExtentAge
	}
	return idleFlush, maxExtentAge
}

// extent is accepted bytes not yet sent: [off, off+len(buf)), within one
// chunk. buf comes from Client.bufs; its length counts in the budget.
type extent struct {
	off     uint64
	buf     []byte
	born    int64 // unix ns when opened
	touched int64 // unix ns of the last write merged into it
}

func (e *extent) end() uint64 { return e.off + uint64(len(e.buf)) }

// maxECChunk bounds an EC file's chunk (a row): half the per-file
// write-behind budget.
const maxECChunk = maxFileInflight / 2

// chunkSize is the largest power of two up to maxExtent that divides the
// stripe unit (the unit itself when it is smaller or odd), so a chunk never
// crosses a stripe-unit boundary. For an EC file it is a row (ECData
// units, up to maxECChunk): a sequential writer's rows are then sent
// whole and encoded without reading anything back.
func chunkSize(l layout.Layout) uint64 {
	if l.Kind == layout.EC {
		if rb := l.RowBytes(); rb > 0 && rb <= maxECChunk {
			return rb
		}
	}
	ss := l.StripeSize
	if ss <= maxExtent {
		return ss
	}
	for c := uint64(maxExtent); c >= 4096; c /= 2 {
		if ss%c == 0 {
			return c
		}
	}
	return ss
}

// bufferLocked merges p at off into the open extents, cutting it at chunk
// boundaries, and sends the extents that are ready. It returns how many
// new bytes are buffered (p's bytes minus those that overwrote buffered
// ones). The caller made sure [off, off+len(p)) overlaps no write in
// flight.
func (st *inodeState) bufferLocked(p []byte, off uint64, now int64) (added uint64) {
	chunk := chunkSize(st.layout)
	for len(p) > 0 {
		cend := (off/chunk + 1) * chunk
		n := min(uint64(len(p)), cend-off)
		e, grew := st.mergeLocked(p[:n], off, chunk, now)
		added += grew
		st.maybeSendLocked(e, chunk)
		p, off = p[n:], off+n
	}
	for len(st.open) > maxOpenExtents {
		oldest := 0
		for i, e := range st.open {
			if e.touched < st.open[oldest].touched {
				oldest = i
			}
		}
		st.sendLocked(st.open[oldest])
	}
	st.armTimerLocked()
	return added
}

// mergeLocked puts p (within one chunk) at off into the open extent it
// touches or overlaps, joining the extents it bridges, or opens a new one.
func (st *inodeState) mergeLocked(p []byte, off, chunk uint64, now int64) (*extent, uint64) {
	end := off + uint64(len(p))
	lo, hi := off, end
	var hits []*extent
	for _, e := range st.open {
		if e.off/chunk == off/chunk && e.off <= end && off <= e.end() {
			hits = append(hits, e)
			lo, hi = min(lo, e.off), max(hi, e.end())
		}
	}
	var old uint64
	for _, e := range hits {
		old += uint64(len(e.buf))
	}
	// Common case: appending to (or rewriting inside) one extent whose
	// buffer has room.
	if len(hits) == 1 && hits[0].off == lo && uint64(cap(hits[0].buf)) >= hi-lo {
		e := hits[0]
		e.buf = e.buf[:hi-lo]
		copy(e.buf[off-lo:], p)
		e.touched = now
		return e, hi - lo - old
	}
	e := &extent{off: lo, buf: st.c.bufs.Get(int(hi - lo)), born: now, touched: now}
	for _, h := range hits {
		copy(e.buf[h.off-lo:], h.buf)
		e.born = min(e.born, h.born)
		st.c.bufs.Put(h.buf)
		st.removeOpenLocked(h)
	}
	copy(e.buf[off-lo:], p)
	st.open = append(st.open, e)
	return e, hi - lo - old
}

func (st *inodeState) removeOpenLocked(e *extent) {
	for i, o := range st.open {
		if o == e {
			st.open = append(st.open[:i], st.open[i+1:]...)
			return
		}
	}
}

// maybeSendLocked sends e if it filled its chunk, or reached the chunk's
// end with no other extent of the chunk open (nothing left to wait for).
func (st *inodeState) maybeSendLocked(e *extent, chunk uint64) {
	if e.end()%chunk != 0 && uint64(len(e.buf)) < chunk {
		return
	}
	if uint64(len(e.buf)) < chunk {
		for _, o := range st.open {
			if o != e && o.off/chunk == e.off/chunk {
				return
			}
		}
	}
	st.sendLocked(e)
}

// sendLocked moves e from the open extents to the writes in flight and
// sends it in the background.
func (st *inodeState) sendLocked(e *extent) {
	st.removeOpenLocked(e)
	pw := &pendingWrite{off: e.off, end: e.end(), job: st.job}
	st.inflight = append(st.inflight, pw)
	l := st.layout
	exts := l.Extents(pw.off, pw.end-pw.off)
	// Fsync syncs the stripes written since the last one; it pushes every
	// open extent first, so marking them here, once per send rather than
	// once per write, marks every stripe an acknowledged write touched.
	for _, x := range exts {
		st.unsynced[x.Stripe] = true
		st.written[x.Stripe] = max(st.written[x.Stripe], x.ObjOff+x.Len)
	}
	st.c.wg.Add(1)
	go st.c.writeBehind(st, pw, l, exts, e.buf)
}

// pushLocked sends every open extent overlapping [off, end).
func (st *inodeState) pushLocked(off, end uint64) {
	for i := 0; i < len(st.open); {
		if e := st.open[i]; e.off < end && off < e.end() {
			st.sendLocked(e)
			continue
		}
		i++
	}
}

// pushAllLocked sends every open extent.
func (st *inodeState) pushAllLocked() {
	for len(st.open) > 0 {
		st.sendLocked(st.open[0])
	}
}

// armTimerLocked makes sure a timer will look at the open extents.
func (st *inodeState) armTimerLocked() {
	if len(st.open) == 0 || st.timerArmed {
		return
	}
	st.timerArmed = true
	idle, _ := flushDelays(st.layout)
	if st.timer == nil {
		st.timer = time.AfterFunc(idle, st.onTimer)
	} else {
		st.timer.Reset(idle)
	}
}

// onTimer sends the extents idle for idleFlush or open for maxExtentAge and
// re-arms for the others.
func (st *inodeState) onTimer() {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.timerArmed = false
	now := time.Now().UnixNano()
	next := int64(-1)
	idle, age := flushDelays(st.layout)
	for i := 0; i < len(st.open); {
		e := st.open[i]
		due := min(e.touched+int64(idle), e.born+int64(age))
		if due <= now {
			st.sendLocked(e)
			continue
		}
		if next < 0 || due < next {
			next = due
		}
		i++
	}
	if next >= 0 {
		st.timerArmed = true
		st.timer.Reset(time.Duration(next - now))
	}
}

// stopTimerLocked stops the timer; a callback already running finds
// nothing open (the caller pushed everything) and does nothing.
func (st *inodeState) stopTimerLocked() {
	if st.timer != nil {
		st.timer.Stop()
	}
	st.timerArmed = false
}
