package meta

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"sync"
	"syscall"
	"time"

	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/transport"
)

// Metadata leases (docs/caching.md): the leader lets a client session that
// polls for invalidations (LeasePoll) cache what it read, and tells it
// before a change of that is acknowledged to anyone.
//
// A lease is "session S holds inode X": S may answer X's attributes and,
// for a directory, lookups of names in X (found or not) from its cache.
// Every Lookup and GetAttr of a polling session takes leases on what it
// read; so do the creates of a session on the new entry. A command that
// changes X (leaseBreaks) queues an invalidation (X, name) for every
// holder and, before the command's caller gets its reply, waits until
// each other holder acknowledged it (its next poll) or is dead (no poll
// arrived for DefaultLeaseTerm): so when a change returns, no live
// mount still answers from what it replaced. The caller's own session is
// told too but not waited for: it may be the one blocking its kernel.
//
// A holder that stops polling is dropped DefaultLeaseTerm after its last
// poll arrived, with all its leases; its client stops trusting its cache
// clientLeaseTerm after it sent its last answered poll, which is earlier.
// Leases live in the leader's memory only: a new leader (or a holder
// dropped and coming back) answers with a new epoch, and a client that
// sees its epoch change drops its whole cache.

// DefaultLeaseTerm is how long the leader keeps a silent holder's leases:
// the longest a change waits for a mount that stopped answering.
const DefaultLeaseTerm = 2 * time.Second

// leaseHeartbeat is how long a poll waits for an invalidation before it is
// answered empty; a live client thus renews its trust several times a term.
const leaseHeartbeat = DefaultLeaseTerm / 5

// maxHolderLeases bounds the leases of one session; past it, what it
// reads is invalidated as soon as it is granted (so it is not cached).
const maxHolderLeases = 1 << 20

// brokenSlots is the size of the table of recent breaks by inode hash.
const brokenSlots = 4096

// leaseTable is the leader's record of who caches what.
type leaseTable struct {
	term time.Duration
	// beat is how long a poll waits for an invalidation before it is
	// answered empty (leaseHeartbeat, or less: Server.boundPollBeat).
	beat time.Duration
	now  func() time.Time

	mu      sync.Mutex
	epoch   uint64 // this leadership's; holders' epochs derive from it
	nextInc uint64 // holder incarnations
	gen     uint64 // counts breaks
	// broken[ino%brokenSlots] is gen of the last break of an inode in
	// that slot: a grant that began before it may have read what the
	// break replaced (grant).
	broken  [brokenSlots]uint64
	holders map[session]*leaseHolder
	byIno   map[proto.Ino]map[*leaseHolder]struct{}
	// fenced counts the unlinks under way that reclaim an inode by
	// themselves (claimReclaim): a lease granted on it meanwhile comes
	// with an invalidation at once.
	fenced map[proto.Ino]int
}

// leaseHolder is one polling session.
type leaseHolder struct {
	sess  session
	epoch uint64
	seen  time.Time // arrival of its last poll
	next  uint64    // seq of the last invalidation queued
	acked uint64
	queue []proto.LeaseInval // not acknowledged yet, by seq
	// pending counts the invalidations in queue per inode (claimReclaim).
	pending map[proto.Ino]int
	inos    map[proto.Ino]struct{}
	wake    chan struct{} // 1-buffered: something was queued
	ack     chan struct{} // closed (and replaced) when acked moves
	dead    bool
}

func newLeaseTable(term time.Duration, now func() time.Time) *leaseTable {
	if term <= 0 {
		term = DefaultLeaseTerm
	}
	if now == nil {
		now = time.Now
	}
	t := &leaseTable{term: term, beat: min(leaseHeartbeat, term/2), now: now}
	t.reset()
	return t
}

// reset forgets every lease and starts a new epoch (a new leader).
func (t *leaseTable) reset() {
	var b [8]byte
	_, _ = rand.Read(b[:])
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, h := range t.holders {
		t.dropLocked(h)
	}
	t.epoch = binary.LittleEndian.Uint64(b[:]) &^ 0xffffffff
	t.nextInc = 0
	t.holders = map[session]*leaseHolder{}
	t.byIno = map[proto.Ino]map[*leaseHolder]struct{}{}
	t.fenced = map[proto.Ino]int{}
}

func (t *leaseTable) aliveLocked(h *leaseHolder, now time.Time) bool {
	return !h.dead && now.Before(h.seen.Add(t.term))
}

// dropLocked forgets h and its leases and releases whoever waits on it.
func (t *leaseTable) dropLocked(h *leaseHolder) {
	if h.dead {
		return
	}
	h.dead = true
	for ino := range h.inos {
		if m := t.byIno[ino]; m != nil {
			delete(m, h)
			if len(m) == 0 {
				delete(t.byIno, ino)
			}
		}
	}
	h.inos, h.queue, h.pending = nil, nil, nil
	if t.holders[h.sess] == h {
		delete(t.holders, h.sess)
	}
	close(h.ack)
}

// claimReclaim reports whether an unlink by self may reclaim ino by
// itself: no live holder other than self holds a lease on ino or has not
// yet acknowledged an invalidation of it (its client may have opened the
// file from its cache without telling the leader, and pins such opens
// before it acknowledges: client/cached.go). If so, ino is fenced until
// unfence: a lease granted on it meanwhile (a lookup that read it before
// the unlink was applied) comes with an invalidation at once, so no
// client opens it from its cache on the strength of that grant (the
// client opens only what a poll answered after it cached it confirmed,
// or what a grant reported clean: grant).
func (t *leaseTable) claimReclaim(ino proto.Ino, self session) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	for h := range t.byIno[ino] {
		if h.sess == self || !t.aliveLocked(h, now) {
			continue
		}
		if _, ok := h.inos[ino]; ok || h.pending[ino] > 0 {
			return false
		}
	}
	t.fenced[ino]++
	return true
}

// unfence ends a claimReclaim of ino.
func (t *leaseTable) unfence(ino proto.Ino) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c := t.fenced[ino]; c > 1 {
		t.fenced[ino] = c - 1
	} else {
		delete(t.fenced, ino)
	}
}

// begin returns the break generation before a read that may grant.
func (t *leaseTable) begin() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.gen
}

// grant records that sess holds inos, read after begin returned g. An inode
// changed since g (or one sharing its slot) gets an invalidation at once:
// what was read may predate the change. Sessions that do not poll get
// nothing. clean: sess polls and holds every one of inos with no
// invalidation of them queued here (what it read is current, and no
// unlink reclaiming one of them by itself is under way: claimReclaim).
func (t *leaseTable) grant(sess session, g uint64, name string, inos ...proto.Ino) (clean bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	h := t.holders[sess]
	now := t.now()
	if h == nil || !t.aliveLocked(h, now) {
		return false
	}
	clean = true
	for i, ino := range inos {
		if ino == 0 {
			continue
		}
		if !t.holdLocked(h, ino, g) {
			n := ""
			if i == 0 {
				n = name // the first inode is the directory the name was looked up in
			}
			t.queueLocked(h, proto.LeaseInval{Ino: ino, Name: n})
			clean = false
		}
	}
	return clean
}

// holdLocked records that h holds ino, read after begin returned g, and
// reports whether what was read may be trusted: false if h holds too many
// leases, ino (or an inode sharing its slot) was changed since g, or an
// unlink reclaiming it by itself is under way (claimReclaim). The caller
// then queues an invalidation of it at once.
func (t *leaseTable) holdLocked(h *leaseHolder, ino proto.Ino, g uint64) bool {
	return t.addLocked(h, ino) && t.unchangedLocked(ino, g)
}

// unchangedLocked reports whether ino (and every inode sharing its slot)
// has not been broken since g, and no unlink reclaiming it by itself is
// under way.
func (t *leaseTable) unchangedLocked(ino proto.Ino, g uint64) bool {
	return t.broken[uint64(ino)%brokenSlots] <= g && t.fenced[ino] == 0
}

// addLocked records that h holds ino, unless h holds too many leases.
func (t *leaseTable) addLocked(h *leaseHolder, ino proto.Ino) bool {
	if _, ok := h.inos[ino]; ok {
		return true
	}
	if len(h.inos) >= maxHolderLeases {
		return false
	}
	h.inos[ino] = struct{}{}
	m := t.byIno[ino]
	if m == nil {
		m = map[*leaseHolder]struct{}{}
		t.byIno[ino] = m
	}
	m[h] = struct{}{}
	return true
}

// keepHeld keeps of fcs the files sess holds a lease on, read after begin
// returned g, with nothing of them to invalidate: no invalidation queued
// for sess, no break since g, no unlink reclaiming one by itself under way
// (holdLocked's checks, without granting anything new). It grants no
// lease: what sess did not look up, list or make, it is not told of.
func (t *leaseTable) keepHeld(sess session, g uint64, fcs []proto.FileCopy) []proto.FileCopy {
	t.mu.Lock()
	defer t.mu.Unlock()
	h := t.holders[sess]
	if h == nil || !t.aliveLocked(h, t.now()) {
		return nil
	}
	kept := fcs[:0]
	for _, fc := range fcs {
		ino := fc.Attr.Ino
		if _, ok := h.inos[ino]; !ok || h.pending[ino] > 0 || !t.unchangedLocked(ino, g) {
			continue
		}
		kept = append(kept, fc)
	}
	return kept
}

// polls reports whether sess polls, alive, as a holder of leases.
func (t *leaseTable) polls(sess session) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	h := t.holders[sess]
	return h != nil && t.aliveLocked(h, t.now())
}

// grantDir records that sess holds dir and the inodes of ents, a part of
// its listing read after begin returned g (the kernel caches names and
// attributes from READDIRPLUS). If dir changed since g, every name listed
// is invalidated at once: one of them may be gone.
func (t *leaseTable) grantDir(sess session, g uint64, dir proto.Ino, ents []proto.DirEntry) {
	t.mu.Lock()
	defer t.mu.Unlock()
	h := t.holders[sess]
	if h == nil || !t.aliveLocked(h, t.now()) {
		return
	}
	if !t.addLocked(h, dir) || t.broken[uint64(dir)%brokenSlots] > g {
		for _, e := range ents {
			t.queueLocked(h, proto.LeaseInval{Ino: dir, Name: e.Name})
		}
	}
	for _, e := range ents {
		if !t.holdLocked(h, e.Attr.Ino, g) {
			t.queueLocked(h, proto.LeaseInval{Ino: e.Attr.Ino})
		}
	}
}

func (t *leaseTable) queueLocked(h *leaseHolder, iv proto.LeaseInval) {
	h.next++
	iv.Seq = h.next
	h.queue = append(h.queue, iv)
	if h.pending != nil { // nil once dropped
		h.pending[iv.Ino]++
	}
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// leaseWait is what a change must wait for: holder h acknowledging seq.
type leaseWait struct {
	h   *leaseHolder
	seq uint64
}

// breakLeases queues the invalidations of a change to every holder of the
// inodes it names (the holder loses its lease on them) and returns what
// the change must wait for (wait): the acknowledgements of every holder
// but self. A create (own non-nil) is not told to its own session, which
// takes leases on own (the directory first, then the new inode) instead,
// as a read that began at g0 would: a break by someone else since then
// invalidates them at once. Nor are the first selfKnows of ivs: the
// caller's reply carries what they changed (an unlink's or rmdir's
// directory, with its new attributes), and its session keeps its lease.
// With selfGone, the rest of ivs name inodes nothing reaches any more (an
// unlink reclaimed them): self loses its leases on them without being
// told.
func (t *leaseTable) breakLeases(self session, g0 uint64, ivs []proto.LeaseInval, own []proto.Ino, name string, selfKnows int, selfGone bool) []leaseWait {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.gen++
	var waits []leaseWait
	now := t.now()
	// racing[i]: own[i] may have been broken by another change since g0
	// (the slots are shared by inode hash: perhaps another inode's
	// break). Not if self still holds its lease on it: every break takes
	// that away. Without this, a new inode sharing the slot of the
	// directory a session creates in told it to forget the name it just
	// made, and it stopped answering the lookups before its creates.
	mine := t.holders[self]
	var racing [2]bool
	for i, ino := range own[:min(len(own), 2)] {
		held := false
		if mine != nil {
			_, held = mine.inos[ino]
		}
		racing[i] = !held && t.broken[uint64(ino)%brokenSlots] > g0
	}
	for i, iv := range ivs {
		t.broken[uint64(iv.Ino)%brokenSlots] = t.gen
		m := t.byIno[iv.Ino]
		for h := range m {
			if !t.aliveLocked(h, now) {
				t.dropLocked(h)
				continue
			}
			if h.sess == self && (own != nil || i < selfKnows) {
				continue
			}
			// h stays listed under the inode (m): told of one name of a
			// directory, its client keeps the directory's other names,
			// and must hear of their changes too (a rename's two names
			// in one directory are two invalidations of one inode).
			delete(h.inos, iv.Ino)
			if h.sess == self && selfGone {
				continue
			}
			t.queueLocked(h, iv)
			if h.sess != self {
				waits = append(waits, leaseWait{h, h.next})
			}
		}
		if len(m) == 0 {
			delete(t.byIno, iv.Ino)
		}
	}
	if mine != nil && t.aliveLocked(mine, now) {
		for i, ino := range own[:min(len(own), 2)] {
			if !t.addLocked(mine, ino) || racing[i] {
				n := ""
				if i == 0 {
					n = name
				}
				t.queueLocked(mine, proto.LeaseInval{Ino: ino, Name: n})
			}
		}
	}
	return waits
}

// wait waits until every holder in ws acknowledged, or is dead (no poll
// for the lease term: it was dropped, and its client stopped trusting its
// cache before that), or ctx ends.
func (t *leaseTable) wait(ctx context.Context, ws []leaseWait) error {
	for _, w := range ws {
		for {
			t.mu.Lock()
			if w.h.dead || w.h.acked >= w.seq {
				t.mu.Unlock()
				break
			}
			now := t.now()
			if !t.aliveLocked(w.h, now) {
				t.dropLocked(w.h)
				t.mu.Unlock()
				break
			}
			left := w.h.seen.Add(t.term).Sub(now)
			ch := w.h.ack
			t.mu.Unlock()
			tm := time.NewTimer(left)
			select {
			case <-ch:
			case <-tm.C:
			case <-ctx.Done():
				tm.Stop()
				return ctx.Err()
			}
			tm.Stop()
		}
	}
	return nil
}

// poll is one LeasePoll of sess: it acknowledges everything up to ack,
// registers the session as a holder if it is not one (a new epoch), and
// answers the invalidations not yet acknowledged, waiting up to the
// heartbeat for one.
func (t *leaseTable) poll(ctx context.Context, sess session, ack uint64) proto.LeasePoll {
	t.mu.Lock()
	h := t.holders[sess]
	now := t.now()
	if h != nil && !t.aliveLocked(h, now) {
		t.dropLocked(h)
		h = nil
	}
	if h == nil {
		t.nextInc++
		h = &leaseHolder{sess: sess, epoch: t.epoch | (t.nextInc & 0xffffffff), inos: map[proto.Ino]struct{}{}, pending: map[proto.Ino]int{},
			wake: make(chan struct{}, 1), ack: make(chan struct{})}
		t.holders[sess] = h
	} else if ack > h.acked && ack <= h.next {
		h.acked = ack
		i := 0
		for i < len(h.queue) && h.queue[i].Seq <= ack {
			if c := h.pending[h.queue[i].Ino]; c > 1 {
				h.pending[h.queue[i].Ino] = c - 1
			} else {
				delete(h.pending, h.queue[i].Ino)
			}
			i++
		}
		h.queue = append(h.queue[:0], h.queue[i:]...)
		close(h.ack)
		h.ack = make(chan struct{})
	}
	h.seen = now
	t.mu.Unlock()

	tm := time.NewTimer(t.beat)
	defer tm.Stop()
	for {
		t.mu.Lock()
		if len(h.queue) > 0 || h.dead {
			break
		}
		t.mu.Unlock()
		select {
		case <-h.wake:
			continue
		case <-tm.C:
		case <-ctx.Done():
		}
		t.mu.Lock()
		break
	}
	defer t.mu.Unlock()
	out := proto.LeasePoll{Epoch: h.epoch, Term: t.term}
	if h.dead {
		out.Epoch = 0 // dropped while waiting: the client must drop all
		return out
	}
	n := min(len(h.queue), proto.MaxPollInvals)
	out.Invals = append([]proto.LeaseInval(nil), h.queue[:n]...)
	return out
}

// drop forgets the leases of sess (its session ended).
func (t *leaseTable) drop(sess session) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if h := t.holders[sess]; h != nil {
		t.dropLocked(h)
	}
}

// sweep drops holders that stopped polling.
func (t *leaseTable) sweep() {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	for _, h := range t.holders {
		if !t.aliveLocked(h, now) {
			t.dropLocked(h)
		}
	}
}

// sessionOf returns the session of the request served with ctx, without
// checking anything (authorize takes it from here too).
func sessionOf(ctx context.Context) session {
	var sess session
	sess.id, _ = proto.SessionFrom(ctx)
	if p, ok := transport.PeerFrom(ctx); ok {
		sess.remote, sess.name = true, p.Name
	}
	return sess
}

// leaseVictims returns the inodes a command removes or replaces by name
// (unlink, rmdir, rename): their link counts and ctimes change, and they
// are not named in the command. Read before the command is applied; a
// race with another change of the same names only costs an invalidation
// more or, for the inode that name had a moment before, one less (it is
// then the other change's to invalidate).
func (s *Server) leaseVictims(c *Command) []proto.Ino {
	var names [2]struct {
		dir  proto.Ino
		name string
	}
	switch c.Op {
	case OpUnlink, OpRmdir:
		names[0].dir, names[0].name = c.Parent, c.Name
	case OpRename:
		names[0].dir, names[0].name = c.Parent, c.Name
		names[1].dir, names[1].name = c.NewParent, c.NewName
	default:
		return nil
	}
	var out []proto.Ino
	for _, n := range names {
		if n.dir == 0 {
			continue
		}
		if de, ok, err := loadDirent(s.st, n.dir, n.name); err == nil && ok {
			out = append(out, de.Ino)
		}
	}
	return out
}

// breakLeases tells every holder of what command c (just applied, with
// result res) changed, and waits for the holders other than the caller
// (see leaseTable.breakLeases). g0 is the break generation from before c
// was applied.
func (s *Server) breakLeases(ctx context.Context, c *Command, res *applyResult, g0 uint64, victims []proto.Ino) error {
	var ivs []proto.LeaseInval
	var own []proto.Ino
	selfKnows, selfGone := 0, false
	switch c.Op {
	case OpInit, OpRegisterTarget, OpGCDone, OpSessionDrop, OpTargetState:
		return nil
	case OpCreate, OpMkdir, OpSymlink:
		// The creator caches the new entry from its reply.
		if res.attr.Ino != 0 {
			own = []proto.Ino{c.Parent, res.attr.Ino}
		}
	case OpWriteDone:
		// So does a writer the attributes its close or fsync recorded.
		if res.attr.Ino == c.Ino {
			own = []proto.Ino{c.Ino}
		}
	case OpUnlink, OpRmdir:
		// The remover's mount drops the name itself (its kernel too, as
		// FUSE does for its own unlink), and the reply carries the
		// directory's new attributes (UnlinkAt, RmdirAt), which telling
		// it of its own change would throw away: the next look at the
		// directory would ask again. The inode that lost its name is
		// still told (the mount may cache it under another name),
		// unless the unlink reclaimed it: no name reaches it any more and
		// nobody has it open, so what the remover cached of it can never
		// be asked for again. Telling it would cost the remover's mount
		// a poll (a round trip to the leader) per file removed.
		selfKnows = 1
		selfGone = c.Op == OpUnlink && res.reclaimed
	}
	if c.Parent != 0 {
		ivs = append(ivs, proto.LeaseInval{Ino: c.Parent, Name: c.Name})
	}
	if c.NewParent != 0 {
		ivs = append(ivs, proto.LeaseInval{Ino: c.NewParent, Name: c.NewName})
	}
	if c.Ino != 0 {
		ivs = append(ivs, proto.LeaseInval{Ino: c.Ino})
	}
	if c.Op == OpSetProject {
		for _, ino := range c.Inos {
			ivs = append(ivs, proto.LeaseInval{Ino: ino})
		}
	}
	for _, ino := range victims {
		ivs = append(ivs, proto.LeaseInval{Ino: ino})
	}
	if len(ivs) == 0 {
		return nil
	}
	waits := s.leases.breakLeases(sessionOf(ctx), g0, ivs, own, c.Name, selfKnows, selfGone)
	if len(waits) == 0 {
		return nil
	}
	return s.leases.wait(ctx, waits)
}

// LeasePoll implements proto.LeaseService: a client session that polls
// holds leases on what it reads (leases.go, docs/caching.md). It passes
// the read barrier first: a deposed leader that does not know it yet
// registers no holder.
//
// The answer says for how long after the poll arrived the client may
// trust its cache (LeasePoll.Valid). A single server's leases last as
// long as it does: the term. A replicated leader's last only as long as
// its leadership is sure: once it is deposed, a new leader that knows
// none of them acknowledges changes without telling anyone. So just
// before answering it passes a read barrier once more, one whose lease
// (Replica.ReadLease) has at least two poll beats to run, and bounds
// Valid by that lease's end: no other member can become leader before
// it (readBarrier), and the client counts from when it sent the poll,
// which is earlier than its arrival. Without lease reads there is no
// such bound, and clients get nothing to trust.
func (s *Server) LeasePoll(ctx context.Context, ack uint64) (proto.LeasePoll, error) {
	arrived := time.Now()
	cl, err := s.reader(ctx)
	if err != nil {
		return proto.LeasePoll{}, err
	}
	if cl.sess.id == (proto.SessionID{}) {
		return proto.LeasePoll{}, errnof(syscall.EINVAL, "metadata leases need a session (a non-zero session id)")
	}
	p := s.leases.poll(ctx, cl.sess, ack)
	p.Valid = p.Term
	if s.replica != nil {
		until, err := s.replica.leadUntil(ctx, 2*s.leases.beat)
		if err != nil {
			return proto.LeasePoll{}, s.readFailed(err)
		}
		p.Valid = max(0, until.Sub(arrived))
	}
	return p, nil
}

// boundPollBeat shortens the poll beat of a replicated leader to a third
// of its read lease, so that a client's trust, bounded by the lease
// (LeasePoll), is renewed before it runs out.
func (s *Server) boundPollBeat(readLease time.Duration) {
	if readLease > 0 {
		s.leases.beat = min(s.leases.beat, readLease/3)
	}
}
