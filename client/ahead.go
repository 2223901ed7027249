package client

import (
	"context"
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
// An open from a copy brought ahead near the end of what the last
// read-ahead covered asks for the files after it at once, so that a reader
// going on in order finds them cached (one read-ahead under way at a
// time). Copies that are not opened cost the leader reads and this client
// memory, so an open that asked the leader starts a read-ahead only while
// at least half of the copies brought were opened (aheadDemand), or once
// every aheadProbe such opens otherwise (a reader that started reading in
// order is found again), and lets some go by after an answer that brought
// nothing (its session holds no leases on the files after, or they have no
// copies).

// aheadDemand decides when to read ahead, and counts.
type aheadDemand struct {
	// busy: a read-ahead is under way (one at a time).
	busy atomic.Bool
	// total counts the copies brought ahead (Client.AheadCopies).
	total atomic.Uint64

	mu sync.Mutex
	// brought and used count, over a sliding window, the copies brought
	// into the cache ahead and the opens made from them.
	brought, used int
	// skip is how many opportunities to let go by (after an empty answer).
	skip int
	// refused counts the opportunities refused since the last probe.
	refused int
	// end is the last inode number the latest read-ahead covered: an
	// open from its copies near it asks for the files after it before
	// the reader gets there (next).
	end proto.Ino
}

const (
	// aheadWindow is how many inode numbers after the opened file are
	// asked for.
	aheadWindow = 128
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
	// numbers of the end of what was covered asks for the next ones.
	aheadLead = aheadWindow / 2
)

// want reports whether to read ahead now.
func (d *aheadDemand) want() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
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

// add counts n copies brought by one read-ahead that covered the inode
// numbers up to end.
func (d *aheadDemand) add(n int, end proto.Ino) {
	d.total.Add(uint64(n))
	d.mu.Lock()
	defer d.mu.Unlock()
	d.end = max(d.end, end)
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

// opened counts an open of ino made from a copy brought ahead, and
// returns where to read ahead from next, if ino is near the end of what
// was covered.
func (d *aheadDemand) opened(ino proto.Ino) (next proto.Ino, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.used++
	if ino < d.end && ino+aheadLead >= d.end {
		return d.end, true
	}
	return 0, false
}

// readAhead brings, in the background, the copies of the files numbered
// after ino into the lease cache, when the leader offers them, this
// client opens from its cache (as lookupMeta asks), and, for an open that
// asked the leader (not inOrder: an open from a copy brought ahead), the
// copies it brought before were mostly opened (aheadDemand.want). ctx is
// the open's: the read-ahead is made with its caller's credentials, and
// outlives it.
func (c *Client) readAhead(ctx context.Context, ino proto.Ino, inOrder bool) {
	cp, ok := c.copiesAhead.get()
	if !ok || c.leases == nil || c.pinner == nil || c.noPins.Load() || (!inOrder && !c.ahead.want()) {
		return
	}
	if !c.ahead.busy.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer c.ahead.busy.Store(false)
		rctx, cancel := c.rpcCtx(ctx)
		defer cancel()
		defer context.AfterFunc(c.base, cancel)()
		s0 := c.leases.begin()
		fcs, err := cp.CopiesAfter(rctx, ino, aheadWindow)
		if err != nil {
			if !c.copiesAhead.lacks(err) {
				c.log.Debug("reading small files ahead", "ino", ino, "err", err)
			}
			return
		}
		end := ino + aheadWindow
		if len(fcs) == proto.MaxCopiesAfter {
			end = fcs[len(fcs)-1].Attr.Ino // cut short: the rest is next
		}
		c.ahead.add(c.leases.putAhead(s0, fcs), end)
	}()
}

// AheadCopies returns how many small files' copies this client brought
// into its lease cache ahead of their opens.
func (c *Client) AheadCopies() uint64 { return c.ahead.total.Load() }
