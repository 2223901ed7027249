package client

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/weft-fs/weft/proto"
)

// Metadata leases (docs/caching.md): a client with Config.Leases polls the
// metadata leader for invalidations (proto.LeaseService) and, while that
// works, answers Lookup (found or not) and GetAttr from what it read
// before. The leader tells it of every change made elsewhere before that
// change is acknowledged, and keeps its leases at most the lease term
// after its last poll arrived; this client trusts them only until
// clientTerm after it sent its last answered poll (a shorter time, by its
// own clock, which starts earlier), so a client cut off from the leader
// stops answering from its cache before the leader gives up on it; and
// never longer than the answer's Valid after it sent the poll: a
// replicated leader's leases die with its leadership, and Valid ends
// before another member can lead (meta.Server.LeasePoll).

// clientTermShare is the share of the leader's lease term this client
// trusts its cache for after sending a poll that was answered.
const clientTermShare = 0.75

// maxLeaseEntries bounds the cache; past it, everything is dropped (the
// leader may then send invalidations of things no longer cached, which
// cost nothing).
const maxLeaseEntries = 1 << 20

// leaseSlots is the size of the table of recent invalidations by inode
// hash (see leaseCache.seq).
const leaseSlots = 4096

// maxLeaseCopyBytes bounds the small files' copies the cache keeps (a
// lookup's copy past it is not kept: the open asks the leader).
const maxLeaseCopyBytes = 64 << 20

// cachedAttr is an inode's cached attributes with the stamp they were
// cached at (leaseCache.stamp). A lookup that answered the file's copy
// (proto.LookupCopier) leaves it in data, the file's whole content at
// these attributes; openable: the leader granted the lease with nothing of
// the file to invalidate, so an open may be made from the entry at once
// (getOpenable).
type cachedAttr struct {
	proto.Attr
	stamp    uint64
	data     []byte
	openable bool
	// ahead: data came with a read-ahead (ahead.go), not a lookup.
	ahead bool
}

type dirName struct {
	dir  proto.Ino
	name string
}

// leaseCache is what this client holds under lease.
type leaseCache struct {
	log     *slog.Logger
	svc     proto.LeaseService
	onInval func([]proto.LeaseInval) // told of what changed elsewhere, before it is acknowledged
	// beforeAck runs before the invalidations are acknowledged (all: the
	// whole cache was dropped): the client pins its opens made from the
	// cache there (cached.go).
	beforeAck func(invals []proto.LeaseInval, all bool)

	mu    sync.Mutex
	epoch uint64
	ack   uint64
	trust time.Time // monotonic: nothing is answered from the cache after it
	// seq counts invalidations (and this client's own changes); slots
	// holds, per inode hash, the seq of the last one. A read that began
	// when seq was s0 is cached only if none of its inodes' slots moved
	// past s0: it may have read what the invalidation replaced.
	seq   uint64
	slots [leaseSlots]uint64
	attrs map[proto.Ino]cachedAttr
	// stamp counts the attributes cached, and confirmed is the stamp when
	// the last answered poll was sent: attributes stamped at or below it
	// were cached before a poll whose answer carried every invalidation
	// queued for this client until then (openable, for OpenCached).
	stamp, confirmed uint64
	// copyBytes is the length of the copies in attrs (maxLeaseCopyBytes).
	copyBytes int
	names     map[dirName]proto.Ino // 0: no such entry (a negative lookup)
	// complete holds the directories whose every entry is in names: ones
	// this client made (empty then) and has created in since, with the
	// lease on them unbroken. A name of one that names lacks does not
	// exist, so the lookup the kernel sends before every create there is
	// answered here. Any invalidation of the directory, and any change of
	// it by this client other than a create that succeeded, ends it.
	complete map[proto.Ino]struct{}

	hits, misses uint64
}

func newLeaseCache(svc proto.LeaseService, log *slog.Logger) *leaseCache {
	return &leaseCache{svc: svc, log: log, attrs: map[proto.Ino]cachedAttr{}, names: map[dirName]proto.Ino{}, complete: map[proto.Ino]struct{}{}}
}

// run polls until ctx ends.
func (l *leaseCache) run(ctx context.Context, timeout time.Duration) {
	for ctx.Err() == nil {
		l.mu.Lock()
		ack, stamp := l.ack, l.stamp
		l.mu.Unlock()
		sent := time.Now()
		pctx, cancel := context.WithTimeout(ctx, timeout)
		p, err := l.svc.LeasePoll(pctx, ack)
		cancel()
		if err != nil {
			// Trust lapses by itself; try again soon.
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		l.mu.Lock()
		dropped := false
		if p.Epoch != l.epoch || p.Epoch == 0 {
			dropped = true
			if n := len(l.attrs) + len(l.names); n > 0 {
				l.log.Info("client: metadata lease cache dropped: the leader forgot this mount's leases (a new leader, or this mount was silent for longer than the lease term)",
					"entries", n, "epoch", p.Epoch)
			}
			l.clearLocked()
			l.epoch, l.ack = p.Epoch, 0
		}
		for _, iv := range p.Invals {
			l.dropLocked(iv.Ino, iv.Name)
			l.ack = max(l.ack, iv.Seq)
		}
		if len(p.Invals) < proto.MaxPollInvals {
			// The answer carried everything queued when it left (a
			// full one may not have).
			l.confirmed = max(l.confirmed, stamp)
		}
		if p.Epoch != 0 {
			// Never longer than the leader is sure to lead (p.Valid):
			// a new leader knows none of these leases.
			l.trust = sent.Add(min(time.Duration(float64(p.Term)*clientTermShare), p.Valid))
		}
		tell := l.onInval
		l.mu.Unlock()
		if l.beforeAck != nil && (dropped || len(p.Invals) > 0) {
			l.beforeAck(p.Invals, dropped)
		}
		if len(p.Invals) > 0 && tell != nil {
			tell(p.Invals) // before the next poll acknowledges them
		}
	}
}

func (l *leaseCache) clearLocked() {
	l.seq++
	for i := range l.slots {
		l.slots[i] = l.seq
	}
	clear(l.attrs)
	l.copyBytes = 0
	clear(l.names)
	clear(l.complete)
}

// dropLocked forgets ino's attributes and, with a name, the entry of ino
// (a directory) by that name and the attributes of the inode it named.
func (l *leaseCache) dropLocked(ino proto.Ino, name string) {
	l.seq++
	l.slots[uint64(ino)%leaseSlots] = l.seq
	l.delAttrLocked(ino)
	delete(l.complete, ino)
	if name != "" {
		k := dirName{ino, name}
		if child, ok := l.names[k]; ok {
			delete(l.names, k)
			if child != 0 {
				l.slots[uint64(child)%leaseSlots] = l.seq
				l.delAttrLocked(child)
			}
		}
	}
}

// trustedLocked reports whether the cache may answer now.
func (l *leaseCache) trustedLocked() bool {
	return l.epoch != 0 && time.Now().Before(l.trust)
}

// moved reports whether an invalidation or a change of this client
// touched ino (or an inode sharing its slot) since begin returned s0.
func (l *leaseCache) moved(s0 uint64, ino proto.Ino) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.movedLocked(s0, ino)
}

// begin returns the sequence number before a read that may be cached.
func (l *leaseCache) begin() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seq
}

func (l *leaseCache) movedLocked(s0 uint64, inos ...proto.Ino) bool {
	for _, ino := range inos {
		if l.slots[uint64(ino)%leaseSlots] > s0 {
			return true
		}
	}
	return false
}

func (l *leaseCache) fullLocked() {
	if len(l.attrs)+len(l.names)+len(l.complete) >= maxLeaseEntries {
		l.clearLocked()
	}
}

// setAttrLocked caches a's attributes, stamped.
func (l *leaseCache) setAttrLocked(a proto.Attr) {
	l.setEntryLocked(cachedAttr{Attr: a})
}

// setEntryLocked caches e, stamped, keeping its copy only while the copies
// fit in maxLeaseCopyBytes.
func (l *leaseCache) setEntryLocked(e cachedAttr) {
	l.delAttrLocked(e.Ino)
	if len(e.data) > 0 && l.copyBytes+len(e.data) > maxLeaseCopyBytes {
		e.data = nil
	}
	l.copyBytes += len(e.data)
	l.stamp++
	e.stamp = l.stamp
	l.attrs[e.Ino] = e
}

// tookCopy forgets the copy of ino's entry once an open from the cache took
// it (its handle serves it now): the copy saved the open its round trip,
// and the next open asks the leader, which answers it again. So the copies
// kept are those of files looked up or read ahead and not yet opened.
//
// ahead: the copy came with a read-ahead.
func (l *leaseCache) tookCopy(ino proto.Ino) (ahead bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dropCopyLocked(ino)
}

// dropCopyLocked forgets the copy of ino's entry, keeping its attributes;
// ahead: the copy came with a read-ahead.
func (l *leaseCache) dropCopyLocked(ino proto.Ino) (ahead bool) {
	e, ok := l.attrs[ino]
	if !ok || e.data == nil {
		return false
	}
	l.copyBytes -= len(e.data)
	ahead = e.ahead
	e.data, e.ahead = nil, false
	l.attrs[ino] = e
	return ahead
}

// delAttrLocked forgets ino's attributes (and copy).
func (l *leaseCache) delAttrLocked(ino proto.Ino) {
	if e, ok := l.attrs[ino]; ok {
		l.copyBytes -= len(e.data)
		delete(l.attrs, ino)
	}
}

// getOpenable is getAttr for an open from the cache (OpenCached), with the
// file's copy if a lookup brought one: only attributes cached before the
// last answered poll was sent, whose answer would have carried an
// invalidation the leader queued when it granted the lease (meta's
// claimReclaim), or ones the leader said were granted with nothing to
// invalidate (openable).
func (l *leaseCache) getOpenable(ino proto.Ino) (proto.Attr, []byte, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.trustedLocked() {
		return proto.Attr{}, nil, false
	}
	e, ok := l.attrs[ino]
	if !ok || (e.stamp > l.confirmed && !e.openable) {
		return proto.Attr{}, nil, false
	}
	return e.Attr, e.data, true
}

// getAttr answers ino's attributes from the cache.
func (l *leaseCache) getAttr(ino proto.Ino) (proto.Attr, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.trustedLocked() {
		l.misses++
		return proto.Attr{}, false
	}
	e, ok := l.attrs[ino]
	if ok {
		l.hits++
	} else {
		l.misses++
	}
	return e.Attr, ok
}

// lookup answers a lookup from the cache: found says whether the name
// exists (a negative entry if not), ok whether the cache knew.
func (l *leaseCache) lookup(dir proto.Ino, name string) (a proto.Attr, found, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.trustedLocked() {
		l.misses++
		return proto.Attr{}, false, false
	}
	ino, ok := l.names[dirName{dir, name}]
	if !ok {
		if _, all := l.complete[dir]; all {
			l.hits++
			return proto.Attr{}, false, true
		}
		l.misses++
		return proto.Attr{}, false, false
	}
	if ino == 0 {
		l.hits++
		return proto.Attr{}, false, true
	}
	e, ok := l.attrs[ino]
	a = e.Attr
	if ok {
		l.hits++
	} else {
		l.misses++
	}
	return a, ok, ok
}

// putAttr caches a read of a's inode that began at s0.
func (l *leaseCache) putAttr(s0 uint64, a proto.Attr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.epoch == 0 || l.movedLocked(s0, a.Ino) {
		return
	}
	l.fullLocked()
	l.setAttrLocked(a)
}

// putLookup caches a lookup of name in dir that began at s0: found with
// attributes a, or not found (a.Ino 0).
func (l *leaseCache) putLookup(s0 uint64, dir proto.Ino, name string, a proto.Attr) {
	l.putLookupCopy(s0, dir, name, a, nil, false)
}

// putLookupCopy is putLookup of a lookup that also answered the file's copy
// (data, nil: none) and whether it may be opened at once (openable).
func (l *leaseCache) putLookupCopy(s0 uint64, dir proto.Ino, name string, a proto.Attr, data []byte, openable bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.epoch == 0 || l.movedLocked(s0, dir, a.Ino) {
		return
	}
	l.fullLocked()
	l.names[dirName{dir, name}] = a.Ino
	if a.Ino != 0 {
		if uint64(len(data)) != a.Size {
			data = nil
		}
		l.setEntryLocked(cachedAttr{Attr: a, data: data, openable: openable})
	}
}

// openedFromLeader is told of an open of ino that asked the leader and got
// the file's copy: the open's handle serves the file now, so a copy of it
// that a read-ahead under way brings is not kept (the slot moves: putAhead
// leaves it out), nor one already cached.
func (l *leaseCache) openedFromLeader(ino proto.Ino) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seq++
	l.slots[uint64(ino)%leaseSlots] = l.seq
	l.dropCopyLocked(ino)
}

// putListing caches a listing of dir that began at s0 (the leader granted
// leases on dir and every inode listed, and queued invalidations of any it
// changed since), as lookups of each name; the attributes of an inode
// cached already are kept (they are under lease too, and may carry a
// copy). It returns how many entries it cached.
func (l *leaseCache) putListing(s0 uint64, dir proto.Ino, ents []proto.DirEntry) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.epoch == 0 || l.movedLocked(s0, dir) {
		return 0
	}
	n := 0
	for _, e := range ents {
		if e.Attr.Ino == 0 || l.movedLocked(s0, e.Attr.Ino) {
			continue
		}
		l.fullLocked()
		l.names[dirName{dir, e.Name}] = e.Attr.Ino
		if _, ok := l.attrs[e.Attr.Ino]; !ok {
			l.setAttrLocked(e.Attr)
		}
		n++
	}
	return n
}

// trusted reports whether the cache answers now.
func (l *leaseCache) trusted() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.trustedLocked()
}

// putAhead caches the copies a read-ahead that began at s0 brought
// (proto.CopyPrefetcher), as openable: the leader answered only files this
// session holds leases on with nothing of them to invalidate. A file an
// invalidation or a change of this client touched since s0 is left out,
// and so is one whose entry has a copy already. It returns how many
// copies it kept (within maxLeaseCopyBytes).
func (l *leaseCache) putAhead(s0 uint64, fcs []proto.FileCopy) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.epoch == 0 {
		return 0
	}
	kept := 0
	for _, fc := range fcs {
		ino := fc.Attr.Ino
		if ino == 0 || len(fc.Data) == 0 || uint64(len(fc.Data)) != fc.Attr.Size || l.movedLocked(s0, ino) {
			continue
		}
		if e, ok := l.attrs[ino]; ok && e.data != nil {
			continue
		}
		l.fullLocked()
		l.setEntryLocked(cachedAttr{Attr: fc.Attr, data: fc.Data, openable: true, ahead: true})
		if l.attrs[ino].data != nil {
			kept++
		}
	}
	return kept
}

// own drops what a change made here affects: the attributes of inos and,
// for a change by name, the entry (dir, name) and the attributes of the
// directory and of what the entry named. Called before the change is sent
// (so that no read under way caches what it replaces) and after it
// returned (so that no read that began before it stays cached).
func (l *leaseCache) own(dir proto.Ino, name string, inos ...proto.Ino) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ownLocked(dir, name, inos...)
}

func (l *leaseCache) ownLocked(dir proto.Ino, name string, inos ...proto.Ino) {
	if dir != 0 {
		l.dropLocked(dir, name)
	}
	for _, ino := range inos {
		if ino != 0 {
			l.dropLocked(ino, "")
		}
	}
}

// Leases reports whether this client caches metadata under leases, and
// how many lookups and stats its cache answered (hits) or did not.
func (c *Client) Leases() (on bool, hits, misses uint64) {
	if c.leases == nil {
		return false, 0, 0
	}
	c.leases.mu.Lock()
	defer c.leases.mu.Unlock()
	return true, c.leases.hits, c.leases.misses
}

// OnLeaseInval sets what is told of the invalidations the metadata leader
// sends (a FUSE mount drops the kernel's entries and attributes with it);
// the leader hears they were done only after it returns. Set it before
// the first call.
func (c *Client) OnLeaseInval(f func([]proto.LeaseInval)) {
	if c.leases != nil {
		c.leases.mu.Lock()
		c.leases.onInval = f
		c.leases.mu.Unlock()
	}
}

// changing drops what a change by this client (of the entry name in dir,
// and of inos) affects from the lease cache: call it before the change,
// and the function it returns after.
func (c *Client) changing(dir proto.Ino, name string, inos ...proto.Ino) func() {
	if c.leases == nil {
		return func() {}
	}
	c.leases.own(dir, name, inos...)
	return func() { c.leases.own(dir, name, inos...) }
}

// creating is called before this client creates name in dir (or, with
// inos, records a write's size and times: WriteDone): it drops what the
// call changes and returns the sequence for created or changed.
func (c *Client) creating(dir proto.Ino, name string, inos ...proto.Ino) uint64 {
	l := c.leases
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	// As own, but a complete directory stays complete: until the create
	// returns, name is as absent as it was (created settles it).
	_, all := l.complete[dir]
	l.ownLocked(dir, name, inos...)
	if all {
		l.complete[dir] = struct{}{}
	}
	return l.seq
}

// changed caches the attributes a WriteDone that began at s0 returned:
// the leader gives this session a lease on the inode with it instead of
// an invalidation (meta/leases.go), so the stat after a close costs no
// round trip.
func (c *Client) changed(s0 uint64, ino proto.Ino, a proto.Attr, err error) {
	l := c.leases
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil && a.Ino == ino && l.epoch != 0 && !l.movedLocked(s0, ino) {
		l.fullLocked()
		l.setAttrLocked(a)
	} else {
		l.delAttrLocked(ino)
	}
	// Reads of the inode that began before the change must not cache
	// what it replaced.
	l.seq++
	l.slots[uint64(ino)%leaseSlots] = l.seq
}

// created caches what a create that began at s0 returned: the leader
// gave this session leases on the directory and the new inode with it.
// The directory's attributes changed and are dropped.
func (c *Client) created(s0 uint64, dir proto.Ino, name string, a proto.Attr, err error) {
	l := c.leases
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	// A complete directory stays so if the create succeeded: had
	// anything else changed the directory since the create began, it
	// would not be complete any more (an invalidation of it, or a change
	// of this client's other than a create, ends that). The slots are no
	// test of it: they are shared by inode hash, so with creates in
	// several directories at once a new inode's slot is now and then
	// another directory's (inode 4,099, directory 3), and the directory
	// lost its completeness for good (4 processes creating: half the
	// lookups before a create went to the leader).
	made := err == nil && a.Ino != 0 && l.epoch != 0
	// The reply's attributes (and, in a directory not known complete,
	// its name) may be cached only if nothing that could have replaced
	// them arrived while the create was under way.
	fresh := made && !l.movedLocked(s0, dir, a.Ino)
	if made {
		l.fullLocked() // first: a full cache drops the completeness too
	}
	_, all := l.complete[dir]
	keep := made && all
	if fresh || keep {
		l.names[dirName{dir, name}] = a.Ino
	}
	if fresh {
		l.setAttrLocked(a)
	}
	l.seq++
	l.slots[uint64(dir)%leaseSlots] = l.seq
	l.delAttrLocked(dir)
	if keep {
		l.complete[dir] = struct{}{}
	} else {
		delete(l.complete, dir)
	}
}

// madeDir records that the directory a Mkdir that began at s0 made (a,
// just created) is empty: this session took a lease on it with the
// reply (meta/leases.go), so until an invalidation of it arrives, every
// entry it gets is this client's own create.
func (c *Client) madeDir(s0 uint64, a proto.Attr) {
	l := c.leases
	if l == nil || !a.IsDir() {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.epoch != 0 && !l.movedLocked(s0, a.Ino) {
		l.fullLocked()
		l.complete[a.Ino] = struct{}{}
	}
}
