package client

import (
	"context"
	"sync"

	"github.com/weft-fs/weft/proto"
)

// Small files from the lookup (docs/caching.md, "Small files from the
// lookup"): a lookup can bring a small file's copy with its attributes
// (proto.LookupCopier), and the read-only open that follows is then made
// from the lease cache (OpenCached): one round trip for a file read cold,
// where a lookup and an open took two. The copy costs the leader a read of
// it, which a lookup for a stat (ls -l, find, mdtest's stat phase) would
// pay for nothing, so a lookup asks for copies only while this client's
// recent lookups of files that could have one were mostly followed by an
// open for reading (copyDemand).

// copyDemand counts, over a sliding window, the lookups answered by the
// leader that found a file a copy could serve (copyEligible), and how many
// of those files were opened for reading afterwards.
type copyDemand struct {
	mu             sync.Mutex
	lookups, opens int
	// recent holds the files of the counted lookups not yet opened.
	recent map[proto.Ino]struct{}
}

const (
	// demandWindow: past this many lookups both counts are halved, so
	// the last hundred or so decide.
	demandWindow = 128
	// demandMin lookups are needed before copies are asked for.
	demandMin = 4
	// demandRecent bounds copyDemand.recent (cleared when full).
	demandRecent = 1024
)

// copyEligible reports whether a lookup could bring a copy of a's file, or
// make it openable from the cache: a regular file of at most MaxFileCopy
// bytes that every class may read.
func copyEligible(a *proto.Attr) bool {
	return a.ReadableByAll() && a.Size <= proto.MaxFileCopy
}

// want reports whether lookups should ask for copies now: at least half
// of the recent eligible lookups were followed by an open.
func (d *copyDemand) want() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lookups >= demandMin && 2*d.opens >= d.lookups
}

// looked counts a lookup the leader answered with a.
func (d *copyDemand) looked(a *proto.Attr) {
	if !copyEligible(a) {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.recent == nil || len(d.recent) >= demandRecent {
		d.recent = map[proto.Ino]struct{}{}
	}
	d.recent[a.Ino] = struct{}{}
	d.lookups++
	if d.lookups >= demandWindow {
		d.lookups /= 2
		d.opens /= 2
	}
}

// opened counts a read-only open of ino, if a counted lookup found it.
func (d *copyDemand) opened(ino proto.Ino) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.recent[ino]; ok {
		delete(d.recent, ino)
		d.opens++
	}
}

// lookupMeta looks name in parent up on the metadata service, asking for
// the file's copy (data, and whether it may be opened from the cache at
// once: openable) when the service offers copies and this client would
// open from them: it holds leases, may pin, and its lookups are being
// followed by opens (copyDemand). As openMeta does for opens.
func (c *Client) lookupMeta(ctx context.Context, parent proto.Ino, name string) (a proto.Attr, data []byte, openable bool, err error) {
	if lc, ok := c.lookupCopies.get(); ok && c.leases != nil && c.pinner != nil && !c.noPins.Load() && c.demand.want() {
		a, data, openable, err = lc.LookupCopy(ctx, parent, name)
		if !c.lookupCopies.lacks(err) {
			return a, data, openable, err
		}
	}
	a, err = c.meta.Lookup(ctx, parent, name)
	return a, nil, false, err
}
