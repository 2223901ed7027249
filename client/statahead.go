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
// listed over and over. A listing costs the leader about as much as a
// page of lookups, and is made at most once per stataheadMin lookups that
// missed in the same directory, of at most stataheadMax entries (the next
// listing of a larger directory goes on from there). It needs permission
// to list the directory (the caller's, as the lookup's): without it, the
// lookups go on as before.

const (
	// stataheadMin lookups in a row in one directory that missed the cache
	// start a listing of it.
	stataheadMin = 32
	// stataheadMax bounds the entries one listing caches.
	stataheadMax = 1 << 17
)

// statahead counts the lookups that missed, and lists.
type statahead struct {
	mu     sync.Mutex
	dir    proto.Ino
	misses int
	busy   bool
	// after is where the next listing of dir starts: past the last name
	// the previous one cached, if it stopped at stataheadMax.
	after string
	// cached counts the entries cached from listings (Client.ListedAhead).
	cached atomic.Uint64
}

// missed counts a lookup in dir the cache could not answer, which found
// its name or not (found); ok: list dir from after.
func (s *statahead) missed(dir proto.Ino, found bool) (after string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if dir != s.dir {
		s.dir, s.misses, s.after = dir, 0, ""
	}
	if !found {
		s.misses = 0
		return "", false
	}
	s.misses++
	if s.misses < stataheadMin || s.busy {
		return "", false
	}
	s.misses, s.busy = 0, true
	return s.after, true
}

// listed ends a listing of dir, which stopped before after ("": at the
// end of the directory, or on an error).
func (s *statahead) listed(dir proto.Ino, after string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.busy = false
	if dir == s.dir {
		// The lookups that missed while the listing was under way do not
		// count towards the next one.
		s.after, s.misses = after, 0
	}
}

// listAhead lists dir from after in the background into the lease cache.
// ctx is the lookup's: the listing is made with its caller's credentials.
func (c *Client) listAhead(ctx context.Context, dir proto.Ino, after string) {
	c.wg.Add(1) // Close waits for it
	go func() {
		defer c.wg.Done()
		next := ""
		defer func() { c.statahead.listed(dir, next) }()
		rctx, cancel := c.rpcCtx(ctx)
		defer cancel()
		defer context.AfterFunc(c.base, cancel)()
		for total := 0; ; {
			s0 := c.leases.begin()
			ents, err := c.meta.ReadDir(rctx, dir, after, readDirBatch)
			if err != nil {
				c.log.Debug("listing a directory ahead of its lookups", "dir", dir, "err", err)
				return
			}
			for i := range ents {
				c.merge(&ents[i].Attr)
			}
			c.statahead.cached.Add(uint64(c.leases.putListing(s0, dir, ents)))
			total += len(ents)
			if len(ents) < readDirBatch {
				return
			}
			after = ents[len(ents)-1].Name
			if total >= stataheadMax {
				next = after
				return
			}
		}
	}()
}

// ListedAhead returns how many entries this client cached from listings
// made ahead of their lookups.
func (c *Client) ListedAhead() uint64 { return c.statahead.cached.Load() }
