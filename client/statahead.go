package client

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/weft-fs/weft/proto"
)

// Names listed ahead (docs/caching.md, "Names listed ahead"): a mount that
// looks up one name after another in a directory, each missing its lease
// cache (a fresh mount reading a dataset, mdtest-hard's read after a
// restart), costs the leader a round trip per name. After stataheadMin
// such lookups in a row in one directory, the client lists the directory
// in the background (ReadDir, which grants its session leases on the
// directory and every inode listed, as for the kernel's READDIRPLUS) and
// caches the names and attributes, so the lookups that follow are
// answered from the cache; the opens that follow them then read small
// files ahead (ahead.go), as on a mount that made or listed the files.
//
// Only lookups that found their name count: a create loop's lookups of
// new names (not found) end the run, so a directory being filled is not
// listed over and over. A listing reads stataheadPages pages (of
// readDirBatch entries) from where the previous listing of the directory
// stopped, so a reader needs a run of misses per few thousand names; once
// a listing reached the directory's end (or failed: no permission to
// list it, say), the directory is not listed again until an invalidation
// or a change of this client touched it (its slot in the lease cache
// moved). Only the directory of the last lookup is followed: lookups
// alternating between two directories start no listing.

const (
	// stataheadMin lookups in a row in one directory that missed the cache
	// start a listing of it.
	stataheadMin = 32
	// stataheadPages is how many pages one listing reads.
	stataheadPages = 4
)

// statahead counts the lookups that missed, and lists.
type statahead struct {
	mu     sync.Mutex
	dir    proto.Ino
	misses int
	busy   bool
	// after is where the next listing of dir starts: past the last name
	// the previous one read.
	after string
	// done: dir was listed to its end, or its listing failed, when the
	// lease cache's sequence was doneAt; it is listed again only once
	// dir's slot moved past it.
	done   bool
	doneAt uint64
	// cached counts the entries cached from listings (Client.ListedAhead).
	cached atomic.Uint64
}

// missed counts a lookup in dir the cache could not answer, which found
// its name or not (found); ok: list dir from after. moved reports whether
// dir's slot in the lease cache moved since a sequence number.
func (s *statahead) missed(dir proto.Ino, found bool, moved func(uint64) bool) (after string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if dir != s.dir {
		s.dir, s.misses, s.after, s.done = dir, 0, "", false
	}
	if !found {
		s.misses = 0
		return "", false
	}
	s.misses++
	if s.misses < stataheadMin || s.busy {
		return "", false
	}
	s.misses = 0
	if s.done {
		if !moved(s.doneAt) {
			return "", false
		}
		s.done, s.after = false, ""
	}
	s.busy = true
	return s.after, true
}

// listed ends a listing of dir: the next one starts after after; done: it
// reached the directory's end, or failed, and began at sequence at.
func (s *statahead) listed(dir proto.Ino, after string, done bool, at uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.busy = false
	if dir != s.dir {
		return
	}
	// The lookups that missed while the listing was under way do not
	// count towards the next one.
	s.misses, s.after = 0, after
	if done {
		s.done, s.doneAt, s.after = true, at, ""
	}
}

// listAhead lists dir from after in the background into the lease cache,
// stataheadPages pages at most. ctx is the lookup's: the listing is made
// with its caller's credentials.
func (c *Client) listAhead(ctx context.Context, dir proto.Ino, after string) {
	c.wg.Add(1) // Close waits for it
	go func() {
		defer c.wg.Done()
		next, done, at := after, false, c.leases.begin()
		defer func() { c.statahead.listed(dir, next, done, at) }()
		for range stataheadPages {
			s0 := c.leases.begin()
			rctx, cancel := c.rpcCtx(ctx)
			stop := context.AfterFunc(c.base, cancel)
			ents, err := c.meta.ReadDir(rctx, dir, next, readDirBatch)
			stop()
			cancel()
			if err != nil {
				c.log.Debug("listing a directory ahead of its lookups", "dir", dir, "err", err)
				done = true // not again until the directory changes
				return
			}
			c.statahead.cached.Add(uint64(c.leases.putListing(s0, dir, ents)))
			if len(ents) < readDirBatch {
				done = true
				return
			}
			next = ents[len(ents)-1].Name
		}
	}()
}

// ListedAhead returns how many entries this client cached from listings
// made ahead of their lookups.
func (c *Client) ListedAhead() uint64 { return c.statahead.cached.Load() }
