package meta

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/weft-fs/weft/internal/pace"
	"github.com/weft-fs/weft/layout"
	"github.com/weft-fs/weft/meta/store"
	"github.com/weft-fs/weft/proto"
)

// Defaults of the rebuild (Options.Rebuild*; `weft meta --rebuild-after`,
// `--rebuild-rate`).
const (
	// DefaultRebuildAfter is how long a target may be down before the
	// leader marks it out and rebuilds its objects elsewhere: long enough
	// for a reboot or a software upgrade of its server.
	DefaultRebuildAfter = 10 * time.Minute
	// DefaultRebuildRate bounds the bytes/s the rebuild copies over all
	// targets, so clients keep most of the bandwidth.
	DefaultRebuildRate = 256 << 20
	// DefaultRebuildParallel is how many objects are rebuilt at once.
	DefaultRebuildParallel = 4
	// DefaultRebuildInterval is how often the leader checks targets'
	// states; DefaultRebuildScan how often it scans the files for stale
	// objects when there may be some (see loop).
	DefaultRebuildInterval = 2 * time.Second
	DefaultRebuildScan     = time.Minute
	// rebuildChunk is the range one storage request rebuilds.
	rebuildChunk = 4 << 20
	// DefaultMovedObjectGrace: the old object of a slot moved off a
	// target that still serves (drain) is removed this long after the
	// move, so that a reader that opened the file before the move, with
	// the old layout, still finds it.
	DefaultMovedObjectGrace = time.Minute
	// rebuildCallTimeout bounds one storage request.
	rebuildCallTimeout = 2 * time.Minute
)

// rebuildJob is one object to rebuild: the object of slot Slot of a file,
// now on target From, either moved to another target (its target is out,
// draining or removed) or repaired in place (a stale copy on a target that
// is in and up).
type rebuildJob struct {
	Ino   proto.Ino
	Slot  int
	From  proto.TargetID
	Move  bool
	Bytes uint64
}

// rebuilder is the leader's rebuild loop and its progress (see doc.go,
// "Target lifecycle and rebuild").
type rebuilder struct {
	s    *Server
	pace *pace.Pacer
	kick chan struct{}

	mu       sync.Mutex
	st       proto.RebuildStatus
	started  time.Time
	pending  map[proto.TargetID]uint64
	wasUp    map[proto.TargetID]bool
	lastScan time.Time
	// What the last scan saw, to tell whether another is due: whether
	// this member was leader, the state machine's stale-mark count, and
	// whether its pass left objects to do (deferred or failed).
	leading      bool
	scannedMarks uint64
	leftWork     bool

	// repairMu orders in-place repairs (a stale object rewritten on its
	// own target) against ClearStale, weft resync's end: a repair may
	// start only on an object that is still stale, and a ClearStale of an
	// object under repair is refused (EBUSY, resync says to run again).
	// Without it a rebuild that picked a slot before a resync cleared it
	// would empty and rewrite a copy marked fresh, which readers use (and
	// a source lost midway would leave it short). Held across the
	// ClearStale proposal, so a repair that starts after it sees the mark
	// gone.
	repairMu  sync.Mutex
	repairing map[repairKey]bool
	// spoiled holds objects an in-place repair began on and ended without
	// repairing (a source or the target failed): it may have emptied the
	// object after a resync had copied it and before that resync's
	// ClearStale. The next ClearStale of one is refused (EBUSY; resync
	// copies again, after the failed repair) and forgets it.
	spoiled map[repairKey]bool
	// urgent asks for a scan now: a corrupt object was marked stale
	// (scrub.go), and no one else repairs it.
	urgent atomic.Bool
}

// repairKey names one object under in-place repair.
type repairKey struct {
	ino  proto.Ino
	slot int
}

// beginRepair registers an in-place repair of slot of ino if the slot is
// still stale in the committed state (reloaded under repairMu); false if
// it is not (repaired meanwhile, or the file changed).
func (rb *rebuilder) beginRepair(ino proto.Ino, slot int, from proto.TargetID) (bool, error) {
	rb.repairMu.Lock()
	defer rb.repairMu.Unlock()
	n, err := loadInode(rb.s.st, ino)
	if errors.Is(err, syscall.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	l := n.Layout
	if !n.IsRegular() || slot >= len(l.Targets) || l.Targets[slot] != from || !l.IsStale(slot) {
		return false, nil
	}
	if rb.repairing == nil {
		rb.repairing = map[repairKey]bool{}
	}
	rb.repairing[repairKey{ino, slot}] = true
	return true, nil
}

// endRepair ends an in-place repair; repaired says whether it cleared
// the stale mark (else the object is spoiled, see rebuilder.spoiled).
func (rb *rebuilder) endRepair(ino proto.Ino, slot int, repaired bool) {
	rb.repairMu.Lock()
	defer rb.repairMu.Unlock()
	k := repairKey{ino, slot}
	delete(rb.repairing, k)
	if repaired {
		delete(rb.spoiled, k)
		return
	}
	if rb.spoiled == nil {
		rb.spoiled = map[repairKey]bool{}
	}
	rb.spoiled[k] = true
}

// fenceRepair fences the object a rebuild writes (a stale copy repaired
// in place, or the new object of a move) before it does, as weft resync
// does, and returns the fence (the capability's issue time, Unix ns) for
// the rebuild's requests to carry (proto.RebuildRequest.Fence). A write or
// truncate that a client sent to a stale copy before it was marked stale
// (its server cut off, say) and that is delivered only now carries an
// older capability and is refused, so it cannot land on the repair; and a
// rebuild request of this attempt that its storage server runs after this
// service gave up on it (a timeout: the server keeps going) is refused
// once a later repair fenced the object again. 0 without capabilities (no
// key) or with a storage client that cannot fence.
func (s *Server) fenceRepair(ctx context.Context, n *inode, t proto.TargetID, obj proto.ObjectID) (int64, error) {
	rv, ok := s.opts.Storage.(proto.RowVersioner)
	if !ok {
		return 0, nil
	}
	issued := s.opts.Now()
	c, err := s.issueAt(ctx, &n.Attr, proto.AccessWrite, issued)
	if err != nil || c == nil {
		return 0, err
	}
	cctx, cancel := context.WithTimeout(proto.WithCapability(ctx, c), rebuildCallTimeout)
	defer cancel()
	return issued.UnixNano(), rv.Fence(cctx, t, obj)
}

// clearStaleExclusive runs clear (a ClearStale proposal) unless one of
// slots of ino is under an in-place repair by the rebuild (EBUSY).
func (rb *rebuilder) clearStaleExclusive(ino proto.Ino, slots []uint32, clear func() (proto.Attr, error)) (proto.Attr, error) {
	rb.repairMu.Lock()
	defer rb.repairMu.Unlock()
	for _, slot := range slots {
		if rb.repairing[repairKey{ino, int(slot)}] {
			return proto.Attr{}, errnof(syscall.EBUSY, "inode %d slot %d is being repaired by the rebuild: it is fresh once that ends", ino, slot)
		}
	}
	var spoiled []uint32
	for _, slot := range slots {
		k := repairKey{ino, int(slot)}
		if rb.spoiled[k] {
			delete(rb.spoiled, k)
			spoiled = append(spoiled, slot)
		}
	}
	if len(spoiled) > 0 {
		return proto.Attr{}, errnof(syscall.EBUSY, "inode %d slots %v: a repair by the rebuild failed on them meanwhile, perhaps after they were copied: copy them again", ino, spoiled)
	}
	return clear()
}

func newRebuilder(s *Server) *rebuilder {
	rb := &rebuilder{s: s, kick: make(chan struct{}, 1), wasUp: map[proto.TargetID]bool{}}
	rb.pace = pace.New(s.opts.RebuildRate)
	return rb
}

func (rb *rebuilder) wake() { kick(rb.kick) }

// SetRebuildRate changes the rebuild's limit in bytes/s (0: none) at once.
func (s *Server) SetRebuildRate(rate uint64) {
	s.rb.pace.Set(rate)
	s.log.Info("meta: rebuild rate set", "bytes_per_s", rate)
}

// RebuildProgress returns the rebuild's progress.
func (s *Server) RebuildProgress() proto.RebuildStatus {
	rb := s.rb
	rb.mu.Lock()
	defer rb.mu.Unlock()
	st := rb.st
	st.Rate = rb.pace.Rate()
	st.RebuildAfter = s.opts.RebuildAfter
	if st.Active {
		if el := time.Since(rb.started).Seconds(); el > 0 {
			st.Measured = uint64(float64(st.BytesDone) / el)
		}
		if st.Measured > 0 && st.Bytes > st.BytesDone {
			st.ETA = time.Duration(float64(st.Bytes-st.BytesDone) / float64(st.Measured) * float64(time.Second))
		}
	}
	return st
}

func (rb *rebuilder) pendingByTarget() map[proto.TargetID]uint64 {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	out := make(map[proto.TargetID]uint64, len(rb.pending))
	for k, v := range rb.pending {
		out[k] = v
	}
	return out
}

// loop runs on every member and works on the leader only: it marks
// targets down longer than RebuildAfter out, brings back those that
// return, and rebuilds.
func (rb *rebuilder) loop() {
	s := rb.s
	defer s.bg.Done()
	t := time.NewTicker(s.opts.RebuildInterval)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		case <-rb.kick:
		}
		if !s.isLeader() {
			rb.leading = false
			continue
		}
		// A scan reads every inode: it runs at once when a target's
		// objects are to move or a target came back (autoStates), and
		// every RebuildScan when there may be stale objects to repair
		// (stale marks were made since the last scan, this member has just
		// become leader, or the last pass left work); never on an idle,
		// healthy cluster.
		scan := rb.autoStates(s.ctx)
		marks := s.sm.staleMarks.Load()
		due := time.Since(rb.lastScan) >= s.opts.RebuildScan &&
			(rb.leftWork || !rb.leading || marks != rb.scannedMarks)
		if rb.urgent.Swap(false) {
			due = true
		}
		if !scan && !due {
			continue
		}
		rb.leading, rb.scannedMarks = true, marks
		for s.ctx.Err() == nil && s.isLeader() {
			done, err := rb.pass(s.ctx)
			if err != nil {
				s.log.Error("meta: rebuild pass failed", "err", err)
			}
			if done == 0 || err != nil {
				break
			}
		}
	}
}

// autoStates marks targets down longer than RebuildAfter out (auto), and
// auto-out targets that came back in again; it reports whether a scan is
// due: a target's objects are to be moved, or a target came back up
// (its stale objects can be repaired now).
func (rb *rebuilder) autoStates(ctx context.Context) bool {
	s := rb.s
	now := s.reg.now()
	type change struct {
		id proto.TargetID
		st TargetState
	}
	var changes []change
	scan := false
	s.reg.mu.Lock()
	for id, t := range s.reg.byID {
		up := s.reg.up(t, now)
		if up && !rb.wasUp[id] {
			scan = true
		}
		rb.wasUp[id] = up
		switch {
		case t.state == TargetIn && !up && !t.lastSeen.IsZero() && s.opts.RebuildAfter >= 0 &&
			now.Sub(t.lastSeen) > s.opts.RebuildAfter:
			changes = append(changes, change{id, TargetOut})
		case t.state == TargetOut && t.auto && up && t.heard:
			changes = append(changes, change{id, TargetIn})
		}
		if t.state.movesOff() {
			scan = true
		}
	}
	s.reg.mu.Unlock()
	for _, c := range changes {
		if c.st == TargetOut {
			s.log.Warn("meta: target down longer than rebuild_after: marking it out, its objects are rebuilt elsewhere",
				"target", c.id, "rebuild_after", s.opts.RebuildAfter)
		} else {
			s.log.Warn("meta: target marked out while down is back: in again, its stale objects are repaired", "target", c.id)
		}
		if err := s.setTargetState(ctx, c.id, c.st, c.st == TargetOut); err != nil {
			s.log.Error("meta: target state not changed", "target", c.id, "err", err)
		}
		scan = true
	}
	return scan
}

// objectLen is how long the object of slot must be for a file of size
// bytes: its column's share, or for EC parity the stripe's first
// column's.
func objectLen(l layout.Layout, size uint64, slot int) uint64 {
	w := l.Width()
	g, j := slot/w, slot%w
	switch l.Kind {
	case layout.EC:
		k := int(l.ECData)
		if j < k {
			return l.ObjectSize(size, g*k+j)
		}
		return l.ObjectSize(size, g*k)
	case layout.Mirror:
		return l.ObjectSize(size, g)
	}
	return l.ObjectSize(size, slot)
}

// rowExtent is the range of slot's object that a rebuild covers: for an
// EC shard its stripe's row extent (the parity's length, which no shard
// of the stripe exceeds), else the object's length.
func rowExtent(l layout.Layout, size uint64, slot int) uint64 {
	if l.Kind != layout.EC {
		return objectLen(l, size, slot)
	}
	w := l.Width()
	return objectLen(l, size, slot/w*w+int(l.ECData))
}

// findJobs scans every file and returns the objects to rebuild, and how
// many objects have no readable copy left (RAID-0 on a target that is out
// and down).
func (s *Server) findJobs() (jobs []rebuildJob, lost uint64, err error) {
	err = s.scanFiles(func(n *inode) bool {
		l := n.Layout
		for slot, tg := range l.Targets {
			st, up, ok := s.reg.stateOf(tg)
			switch {
			case ok && st.movesOff():
				if l.Kind == layout.RAID0 && !up {
					lost++
					continue
				}
				jobs = append(jobs, rebuildJob{Ino: n.Ino, Slot: slot, From: tg, Move: true, Bytes: objectLen(l, n.Size, slot)})
			case l.IsStale(slot) && up:
				jobs = append(jobs, rebuildJob{Ino: n.Ino, Slot: slot, From: tg, Bytes: objectLen(l, n.Size, slot)})
			}
		}
		return true
	})
	return jobs, lost, err
}

// errDeferred: the object is rebuilt in a later pass (its file is open
// for writing, or was written or changed during the copy).
var errDeferred = errors.New("meta: rebuild deferred")

// pass scans for work and does it, RebuildParallel objects at a time; it
// returns how many objects it rebuilt.
func (rb *rebuilder) pass(ctx context.Context) (int, error) {
	s := rb.s
	rb.lastScan = time.Now()
	jobs, lost, err := s.findJobs()
	rb.leftWork = err != nil || len(jobs) > 0
	if err != nil {
		return 0, err
	}
	pending := map[proto.TargetID]uint64{}
	var bytes uint64
	for _, j := range jobs {
		pending[j.From]++
		bytes += j.Bytes
	}
	rb.mu.Lock()
	rb.pending = pending
	rb.st = proto.RebuildStatus{Active: len(jobs) > 0, Passes: rb.st.Passes + 1, Objects: uint64(len(jobs)), Bytes: bytes, Lost: lost}
	rb.started = time.Now()
	rb.mu.Unlock()
	if lost > 0 {
		s.log.Error("meta: objects with no readable copy (RAID-0 files on lost targets)", "objects", lost)
	}
	if len(jobs) == 0 {
		return 0, nil
	}
	s.log.Info("meta: rebuild pass", "objects", len(jobs), "bytes", bytes, "rate", rb.pace.Rate())
	var (
		wg   sync.WaitGroup
		sem  = make(chan struct{}, max(1, s.opts.RebuildParallel))
		done atomic.Int64
	)
	for _, j := range jobs {
		if ctx.Err() != nil || !s.isLeader() {
			break
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			err := rb.rebuild(ctx, j)
			rb.mu.Lock()
			switch {
			case err == nil:
				rb.st.Done++
				done.Add(1)
				if rb.pending[j.From] > 0 {
					rb.pending[j.From]--
				}
			case errors.Is(err, errDeferred):
				rb.st.Deferred++
			default:
				rb.st.Failed++
			}
			rb.mu.Unlock()
			if err != nil && !errors.Is(err, errDeferred) {
				s.log.Warn("meta: rebuild of an object failed; retried in the next pass", "ino", j.Ino, "slot", j.Slot, "from", j.From, "err", err)
			}
		})
	}
	wg.Wait()
	rb.mu.Lock()
	rb.st.Active = false
	st := rb.st
	rb.mu.Unlock()
	rb.leftWork = st.Done < st.Objects
	s.log.Info("meta: rebuild pass done", "objects", st.Objects, "done", st.Done, "deferred", st.Deferred,
		"failed", st.Failed, "bytes", st.BytesDone)
	return int(done.Load()), nil
}

func (rb *rebuilder) addBytes(n uint64) {
	rb.mu.Lock()
	rb.st.BytesDone += n
	rb.mu.Unlock()
}

// rebuild copies or decodes one object onto its destination through the
// destination's storage server, then records the move (or clears the
// stale mark) with OpMoveSlot, which refuses it if the file was written
// meanwhile.
func (rb *rebuilder) rebuild(ctx context.Context, j rebuildJob) (retErr error) {
	s := rb.s
	rbs, ok := s.opts.Storage.(proto.ObjectRebuilder)
	if !ok {
		return fmt.Errorf("meta: the storage client cannot rebuild objects: %w", syscall.ENOSYS)
	}
	n, err := loadInode(s.st, j.Ino)
	if errors.Is(err, syscall.ENOENT) {
		return nil // deleted meanwhile: nothing to rebuild
	}
	if err != nil {
		return err
	}
	l := n.Layout
	if !n.IsRegular() || j.Slot >= len(l.Targets) || l.Targets[j.Slot] != j.From {
		return nil // changed meanwhile; the next pass sees it as it is
	}
	if s.anyWriteOpen(j.Ino) {
		return errDeferred
	}
	if !j.Move {
		// In place: only while the object is still stale (see repairMu).
		ok, err := rb.beginRepair(j.Ino, j.Slot, j.From)
		if err != nil || !ok {
			return err
		}
		// Only a nil return is a repair (the MoveSlot cleared the mark).
		defer func() { rb.endRepair(j.Ino, j.Slot, retErr == nil) }()
	}
	dst := j.From
	if j.Move {
		if dst, err = s.rebuildDest(n, j.Slot); err != nil {
			return err
		}
	}
	fence, err := s.fenceRepair(ctx, n, dst, proto.ObjectID{Ino: n.Ino, Gen: n.Gen, Stripe: uint32(j.Slot)})
	if err != nil {
		return fmt.Errorf("meta: rebuild inode %d slot %d: fence on target %d: %w", j.Ino, j.Slot, dst, err)
	}
	req, err := s.rebuildSources(n, j, dst)
	if err != nil {
		return err
	}
	req.Fence = fence
	req.Size = objectLen(l, n.Size, j.Slot)
	// An EC shard is rebuilt over its stripe's whole row extent (the
	// parity's length), not only its own bytes: a shard shorter than its
	// stripe (the tail of a small file) still holds every row's version,
	// which a reconstruction of another shard counts (the storage server
	// writes bytes only up to Size and versions for every row).
	size := rowExtent(l, n.Size, j.Slot)
	for off := uint64(0); off < size || off == 0; {
		r := req
		r.Off, r.Len = off, min(rebuildChunk, size-off)
		if off == 0 {
			r.Flags |= proto.RebuildStart
		}
		if off+r.Len >= size {
			r.Flags |= proto.RebuildFinish
		}
		if err := rb.pace.Wait(ctx, r.Len); err != nil {
			return err
		}
		cctx, cancel := context.WithTimeout(ctx, rebuildCallTimeout)
		_, err := rbs.RebuildObject(cctx, r)
		cancel()
		if err != nil {
			return fmt.Errorf("meta: rebuild inode %d slot %d on target %d: %w", j.Ino, j.Slot, dst, err)
		}
		rb.addBytes(r.Len)
		off += r.Len
		if off >= size {
			break
		}
	}
	if s.anyWriteOpen(j.Ino) {
		return errDeferred
	}
	c := &Command{Op: OpMoveSlot, Now: s.now(), Ino: j.Ino, Gen: n.Gen, Slots: []uint32{uint32(j.Slot)},
		TargetID: j.From, Candidates: []proto.TargetID{dst}}
	c.SetAttr.Mtime = n.Mtime
	if _, up, _ := s.reg.stateOf(j.From); up && dst != j.From {
		c.Size = uint64(time.Unix(0, c.Now).Add(s.opts.MovedObjectGrace).UnixNano())
	}
	if _, err := s.propose(ctx, c); err != nil {
		if errors.Is(err, syscall.EBUSY) {
			return errDeferred
		}
		return err
	}
	s.scrubRepaired(j.Ino, n.Gen, j.Slot, j.From)
	s.log.Info("meta: object rebuilt", "ino", j.Ino, "slot", j.Slot, "from", j.From, "to", dst, "bytes", size)
	return nil
}

// rebuildDest picks the target the object of slot moves to: the best
// ranked target that is in, up and not full, in a failure domain none of
// the stripe's other objects is in, holding no object of that name
// waiting for removal.
func (s *Server) rebuildDest(n *inode, slot int) (proto.TargetID, error) {
	l := n.Layout
	w := l.Width()
	g := slot / w
	cands, _, errno := s.reg.candidates()
	if errno != 0 {
		return 0, errnof(errno, "no target to rebuild on")
	}
	used := map[string]bool{}
	on := map[proto.TargetID]bool{}
	for _, tg := range l.Targets {
		on[tg] = true // a file uses a target once (layout.ValidateFile)
	}
	for j := range w {
		if o := l.Slot(g, j); o != slot {
			used[s.reg.domainOf(l.Targets[o])] = true
		}
	}
	for _, c := range cands {
		if on[c] || used[s.reg.domainOf(c)] {
			continue
		}
		if _, err := s.st.Get(store.GCKey(uint32(c), uint64(n.Ino), uint32(slot), n.Gen)); err == nil {
			continue // an old object of this name there is still to be removed
		}
		return c, nil
	}
	return 0, errnof(syscall.ENOSPC, "inode %d slot %d: no target up and in that the file does not use, in a failure domain its stripe does not use", n.Ino, slot)
}

// rebuildSources fills the request's sources: for a copy (mirror, RAID-0,
// or an object moved off a target that still serves it) the fresh copies
// to read from, the object itself first when it is readable; for an EC
// shard that is not, the stripe's other fresh shards to decode it from.
func (s *Server) rebuildSources(n *inode, j rebuildJob, dst proto.TargetID) (proto.RebuildRequest, error) {
	l := n.Layout
	w := l.Width()
	g, shard := j.Slot/w, j.Slot%w
	req := proto.RebuildRequest{Target: dst, Obj: proto.ObjectID{Ino: n.Ino, Gen: n.Gen, Stripe: uint32(j.Slot)}}
	if l.Kind == layout.EC {
		req.Unit = l.StripeSize // its rows' versions travel with the bytes
	}
	readable := func(slot int) bool {
		st, up, ok := s.reg.stateOf(l.Targets[slot])
		return ok && up && !l.IsStale(slot) && st != TargetOut && st != TargetRemoved
	}
	// The object itself, when it is fresh and its target serves
	// (draining, or an out target that still answers): a plain copy. A
	// mirror falls back to the other copies if it does not answer after
	// all (a target lost moments ago still counts up); an EC shard is
	// copied only off a draining target, and decoded otherwise.
	if j.Move && !l.IsStale(j.Slot) {
		if st, up, _ := s.reg.stateOf(j.From); up && (l.Kind != layout.EC || st == TargetDraining) {
			req.Sources = append(req.Sources, proto.RebuildSource{Target: j.From, Slot: uint32(j.Slot)})
		}
	}
	switch l.Kind {
	case layout.Mirror:
		for k := range w {
			if o := l.Slot(g, k); o != j.Slot && readable(o) {
				req.Sources = append(req.Sources, proto.RebuildSource{Target: l.Targets[o], Slot: uint32(o)})
			}
		}
	case layout.EC:
		if len(req.Sources) > 0 {
			break // a copy of the shard itself
		}
		req.ECData, req.ECParity, req.Shard = l.ECData, l.ECParity, uint8(shard)
		for k := range w {
			if o := l.Slot(g, k); o != j.Slot && readable(o) {
				req.Sources = append(req.Sources, proto.RebuildSource{Target: l.Targets[o], Slot: uint32(o), Shard: uint8(k)})
			}
		}
		if len(req.Sources) < int(l.ECData) {
			return req, errnof(syscall.EIO, "inode %d stripe %d: %d shards readable, %d needed", n.Ino, g, len(req.Sources), l.ECData)
		}
		return req, nil
	}
	if len(req.Sources) == 0 {
		return req, errnof(syscall.EIO, "inode %d slot %d: no readable copy to rebuild from", n.Ino, j.Slot)
	}
	return req, nil
}

// domainOf returns a target's failure domain ("" if unknown).
func (r *registry) domainOf(id proto.TargetID) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t := r.byID[id]; t != nil {
		return t.info.FailureDomain()
	}
	return ""
}

// moveSlot applies OpMoveSlot: the object of slot Slots[0] of file Ino
// (generation Gen) was copied from target TargetID, which the slot must
// still name, to target Candidates[0] (the same target: a repair in
// place) from the file as it was at mtime SetAttr.Mtime. The slot now
// names the new target and is no longer stale; the old object is queued
// for removal, not before Size (unix ns; 0: at once). A file written
// (its mtime changed) or changed since fails with EBUSY, and the rebuild
// tries again later. Times are not touched: this is not a change of the
// file's contents.
func (t *txn) moveSlot(c *Command) error {
	if len(c.Slots) != 1 || len(c.Candidates) != 1 {
		return errnof(syscall.EINVAL, "move-slot of %d slots to %d targets", len(c.Slots), len(c.Candidates))
	}
	n, err := t.fileOfGen(c.Ino, c.Gen)
	if err != nil {
		return err
	}
	slot, to := int(c.Slots[0]), c.Candidates[0]
	if slot >= len(n.Layout.Targets) {
		return errnof(syscall.EINVAL, "inode %d has no slot %d", c.Ino, slot)
	}
	if from := n.Layout.Targets[slot]; from != c.TargetID {
		return errnof(syscall.EBUSY, "inode %d slot %d is on target %d now, not %d", c.Ino, slot, from, c.TargetID)
	}
	if n.Mtime != c.SetAttr.Mtime {
		return errnof(syscall.EBUSY, "inode %d was written during its rebuild (mtime %d, rebuild began at %d)", c.Ino, n.Mtime, c.SetAttr.Mtime)
	}
	if _, ok := t.targetUUID(to); !ok {
		return errnof(syscall.EINVAL, "target %d is not registered", to)
	}
	l := n.Layout.Clone()
	l.Targets[slot] = to
	l = l.WithoutStale(uint32(slot))
	if err := l.ValidateFile(); err != nil {
		return errnof(syscall.EINVAL, "inode %d: %v", c.Ino, err)
	}
	if to != c.TargetID {
		var notBefore []byte
		if c.Size != 0 {
			notBefore = u64(c.Size)
		}
		t.b.Set(store.GCKey(uint32(c.TargetID), uint64(c.Ino), uint32(slot), n.Gen), notBefore)
		t.res.gcQueued++
	}
	n.Layout = l
	t.put(n)
	t.res.attr = n.Attr
	return nil
}
