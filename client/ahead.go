package client

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/weft-fs/weft/proto"
)

// Small files read ahead (docs/caching.md, "Small files read ahead"):
// files made one after another get consecutive inode numbers and are
// often read back in that order (a dataset of small samples, mdtest-hard's
// files), so when an open for reading asked the leader for a small file's
// copy, this client asks it, in the background, for the copies of the
// files numbered after it (proto.CopyPrefetcher), keeps them in its lease
// cache, and opens those files from there (OpenCached) without a round
// trip each. The leader answers only files this session holds leases on
// with nothing of them to invalidate and every class may read, so what
// comes ahead is what the cache could open already but for the bytes.
//
// Read-aheads follow streams: runs of inode numbers being read in order
// (several readers, or one reader in several places, make several; up to
// aheadStreams are followed, the least recently used given up for a new
// one). An open that asked the leader starts a stream at its file unless
// one covers it with a read-ahead under way (which may bring the file; a
// stream that covered it otherwise starts again there: the file was
// opened before and is read again); an open from
// a copy brought ahead near the end of its stream asks for the files after
// it at once, so that a reader going on in order finds them cached. One
// read-ahead per stream is under way at a time. Copies that are not opened
// cost the leader reads and this client memory, so an open that asked the
// leader starts a stream only while at least half of the copies brought
// were opened (aheadDemand), or once every aheadProbe such opens otherwise
// (a reader that started reading in order is found again), and lets some
// go by after an answer that brought nothing (its session holds no leases
// on the files after, or they have no copies).

// aheadStream is one stream: the inode numbers from to last were covered
// (asked for, or the file that started it), and busy while a read-ahead
// of it is under way; stamp orders the streams by last use.
type aheadStream struct {
	from, last proto.Ino
	busy       bool
	stamp      uint64
}

// aheadDemand decides when to read ahead, and counts.
type aheadDemand struct {
	// total counts the copies brought ahead (Client.AheadCopies).
	total atomic.Uint64

	mu      sync.Mutex
	streams [aheadStreams]aheadStream
	clock   uint64
	// brought and used count, over a sliding window, the copies brought
	// into the cache ahead and the opens made from them.
	brought, used int
	// skip is how many opportunities to let go by (after an empty answer).
	skip int
	// refused counts the opportunities refused since the last probe.
	refused int
}

const (
	// aheadStreams is how many streams are followed.
	aheadStreams = 4
	// aheadWindow is how many inode numbers one read-ahead asks for.
	aheadWindow = 256
	// aheadMin copies are brought before their use decides.
	aheadMin = 64
	// aheadWindowCount: past this many copies brought, both counts are
	// halved, so the last few hundred decide.
	aheadWindowCount = 1024
	// aheadSkip opportunities are let go by after an answer that brought
	// nothing.
	aheadSkip = 32
	// aheadProbe: one opportunity in this many is taken even while the
	// copies brought were mostly not opened.
	aheadProbe = 64
	// aheadLead: an open from a copy brought ahead within this many inode
	// numbers of the end of its stream asks for the next ones.
	aheadLead = aheadWindow / 2
)

// coveringLocked returns the stream that covers ino, or -1.
func (d *aheadDemand) coveringLocked(ino proto.Ino) int {
	for i := range d.streams {
		if st := &d.streams[i]; st.last != 0 && st.from <= ino && ino <= st.last {
			return i
		}
	}
	return -1
}

// wantLocked reports whether an open that asked the leader may start a
// stream now.
func (d *aheadDemand) wantLocked() bool {
	if d.skip > 0 {
		d.skip--
		return false
	}
	if d.brought < aheadMin || 2*d.used >= d.brought {
		return true
	}
	d.refused++
	if d.refused >= aheadProbe {
		d.refused = 0
		return true
	}
	return false
}

// missed is told of an open of ino that asked the leader and got its
// copy; ok: start a read-ahead after ino, of stream i.
func (d *aheadDemand) missed(ino proto.Ino) (i int, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	j := d.coveringLocked(ino)
	if j >= 0 && d.streams[j].busy {
		return 0, false // its read-ahead under way may bring the file
	}
	if !d.wantLocked() {
		return 0, false
	}
	// A stream that covered the file without its copy being in the cache
	// (opened before, and read again: the page cache was dropped, say)
	// starts again here; otherwise the least recently used idle one does.
	i = j
	if i < 0 {
		for k := range d.streams {
			if !d.streams[k].busy && (i < 0 || d.streams[k].stamp < d.streams[i].stamp) {
				i = k
			}
		}
		if i < 0 {
			return 0, false // every stream is reading ahead
		}
	}
	d.clock++
	d.streams[i] = aheadStream{from: ino, last: ino, busy: true, stamp: d.clock}
	return i, true
}

// opened counts an open of ino made from a copy brought ahead; ok: start
// a read-ahead of stream i after after, ino being near its end.
func (d *aheadDemand) opened(ino proto.Ino) (i int, after proto.Ino, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.used++
	i = d.coveringLocked(ino)
	if i < 0 {
		return 0, 0, false
	}
	st := &d.streams[i]
	d.clock++
	st.stamp = d.clock
	if st.busy || ino+aheadLead < st.last {
		return 0, 0, false
	}
	st.busy = true
	return i, st.last, true
}

// done ends stream i's read-ahead, which brought n copies and covered the
// inode numbers up to last.
func (d *aheadDemand) done(i, n int, last proto.Ino) {
	d.total.Add(uint64(n))
	d.mu.Lock()
	defer d.mu.Unlock()
	st := &d.streams[i]
	st.busy = false
	st.last = max(st.last, last)
	// A stream that ran into another takes what the other covered.
	for j := range d.streams {
		if o := &d.streams[j]; j != i && o.last != 0 && !o.busy && o.from > st.from && o.from <= st.last+1 {
			st.last = max(st.last, o.last)
			*o = aheadStream{}
		}
	}
	if n == 0 {
		d.skip = aheadSkip
		return
	}
	d.brought += n
	if d.brought >= aheadWindowCount {
		d.brought /= 2
		d.used /= 2
	}
}

// readAheadOK reports whether this client may read ahead: the leader
// offers it, and opens are made from the lease cache.
func (c *Client) readAheadOK() bool {
	_, ok := c.copiesAhead.get()
	return ok && c.leases != nil && c.pinner != nil && !c.noPins.Load()
}

// readAhead brings, in the background, the copies of the files numbered
// after after into the lease cache, for stream i. ctx is the open's: the
// read-ahead is made with its caller's credentials, and outlives it.
func (c *Client) readAhead(ctx context.Context, i int, after proto.Ino) {
	cp, ok := c.copiesAhead.get()
	if !ok {
		c.ahead.done(i, 0, after)
		return
	}
	c.wg.Add(1) // Close waits for it, as for the files' read-aheads
	go func() {
		defer c.wg.Done()
		rctx, cancel := c.rpcCtx(ctx)
		defer cancel()
		defer context.AfterFunc(c.base, cancel)()
		s0 := c.leases.begin()
		fcs, through, err := cp.CopiesAfter(rctx, after, aheadWindow)
		if err == nil {
			err = checkAhead(after, through, fcs)
		}
		if err != nil {
			if !c.copiesAhead.lacks(err) {
				c.log.Debug("reading small files ahead", "after", after, "err", err)
			}
			c.ahead.done(i, 0, after)
			return
		}
		c.ahead.done(i, c.leases.putAhead(s0, fcs), through)
	}()
}

// checkAhead checks a read-ahead's answer: the files in ascending order,
// within (after, through], and through within the window asked for.
func checkAhead(after, through proto.Ino, fcs []proto.FileCopy) error {
	if through < after || through-after > aheadWindow {
		return fmt.Errorf("a read-ahead after inode %d answered to %d, beyond the %d asked for", after, through, aheadWindow)
	}
	prev := after
	for _, fc := range fcs {
		if fc.Attr.Ino <= prev || fc.Attr.Ino > through {
			return fmt.Errorf("a read-ahead after inode %d to %d answered inode %d (after %d)", after, through, fc.Attr.Ino, prev)
		}
		prev = fc.Attr.Ino
	}
	return nil
}

// AheadCopies returns how many small files' copies this client brought
// into its lease cache ahead of their opens.
func (c *Client) AheadCopies() uint64 { return c.ahead.total.Load() }
