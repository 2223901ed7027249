package meta

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/weft-fs/weft/layout"
	"github.com/weft-fs/weft/meta/store"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/transport"
)

// scrubStartTimeout bounds the request that starts one target's pass.
const scrubStartTimeout = 10 * time.Second

// scrubObject names an object reported corrupt: the target it is on and
// its id (the slot is its Stripe).
type scrubObject struct {
	target proto.TargetID
	obj    proto.ObjectID
}

// scrubBook is what the metadata server keeps in memory of the scrub:
// each target's state as its server last reported it, with the counts of
// objects reported and repaired, and the corrupt objects reported and not
// yet repaired. It lives in the memory of the server that received the
// reports (the leader): a new leader starts empty and fills as the
// storage servers report again (every scrubReportEvery at the latest, and
// with every object they find). The lost objects are replicated state
// instead (OpLost, store.LostKey): an object nothing can repair stays
// listed, and its target unhealthy in `weft status`, across restarts and
// failovers, until its file is removed or migrated.
type scrubBook struct {
	mu      sync.Mutex
	targets map[proto.TargetID]*proto.ScrubTargetStatus
	repairs map[scrubObject]bool // reported (or being recorded lost): a report of it again changes nothing
}

// lostFormat is the format version of a lost object's value: the
// version byte, then the time it was recorded (ns since the epoch).
const lostFormat = 1

func (b *scrubBook) target(id proto.TargetID) *proto.ScrubTargetStatus {
	if b.targets == nil {
		b.targets = map[proto.TargetID]*proto.ScrubTargetStatus{}
		b.repairs = map[scrubObject]bool{}
	}
	t := b.targets[id]
	if t == nil {
		t = &proto.ScrubTargetStatus{ScrubTarget: proto.ScrubTarget{Target: id}}
		b.targets[id] = t
	}
	return t
}

// ReportScrub implements proto.ScrubReceiver: a storage server reports
// the scrub state of one of its targets and the objects it found corrupt.
// The object of a protected file's slot is marked stale (OpCorrupt), so
// that the rebuild rewrites it in place from the file's other copies or
// shards; one of an unprotected (RAID-0) file, or whose stripe has no
// other fresh copy or enough shards, is counted lost: its bad blocks keep
// failing reads with EIO, never reading as other bytes. Objects of no
// live file (removed, or moved off the target meanwhile) are ignored:
// the object GC removes them. Only storage servers may report, on targets
// they registered (EACCES otherwise).
func (s *Server) ReportScrub(ctx context.Context, r proto.ScrubReport) error {
	if _, err := s.caller(ctx); err != nil {
		return err
	}
	if err := s.reporter(ctx, r.Target); err != nil {
		return err
	}
	if len(r.Found) > proto.MaxScrubFound {
		return errnof(syscall.EINVAL, "scrub report of %d objects (at most %d)", len(r.Found), proto.MaxScrubFound)
	}
	s.scrub.mu.Lock()
	t := s.scrub.target(r.Target)
	t.ScrubTarget = r.ScrubTarget
	t.Heard = time.Now().UnixNano()
	s.scrub.mu.Unlock()
	var errs []error
	for _, obj := range r.Found {
		if err := s.scrubFound(ctx, r.Target, obj); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// reporter authorizes a scrub report on target id: an in-process caller,
// an unauthenticated peer where those are allowed, or the storage server
// that registered the target.
func (s *Server) reporter(ctx context.Context, id proto.TargetID) error {
	p, ok := transport.PeerFrom(ctx)
	if !ok || (p.Role == transport.RoleNone && s.opts.AllowUnauthenticated) {
		return nil
	}
	if p.Role != transport.RoleStorage {
		s.refuse(p, "scrub report from a peer that is not a storage server")
		return errnof(syscall.EACCES, "scrub report: peer %q has role %q, not %q", p.Name, p.Role, transport.RoleStorage)
	}
	s.reg.mu.Lock()
	t := s.reg.byID[id]
	owner := ""
	if t != nil {
		owner = t.owner
	}
	s.reg.mu.Unlock()
	if t == nil || owner != p.Name {
		s.refuse(p, "scrub report on a target of another server")
		return errnof(syscall.EACCES, "scrub report: target %d is not registered by %q", id, p.Name)
	}
	return nil
}

// scrubFound acts on one object reported corrupt on target.
func (s *Server) scrubFound(ctx context.Context, target proto.TargetID, obj proto.ObjectID) error {
	key := scrubObject{target, obj}
	if _, err := s.st.Get(store.LostKey(uint64(obj.Ino), obj.Gen, obj.Stripe, uint32(target))); err == nil {
		return nil // recorded lost already
	}
	s.scrub.mu.Lock()
	s.scrub.target(target)
	known := s.scrub.repairs[key]
	if !known {
		s.scrub.repairs[key] = true // claimed: a concurrent report of it waits for this one's outcome
	}
	s.scrub.mu.Unlock()
	if known {
		return nil // reported again (by another read, or a resent report)
	}
	marked := false
	defer func() {
		if !marked {
			s.scrub.mu.Lock()
			delete(s.scrub.repairs, key)
			s.scrub.mu.Unlock()
		}
	}()
	n, err := loadInode(s.st, obj.Ino)
	if errors.Is(err, syscall.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	l := n.Layout
	slot := int(obj.Stripe)
	if !n.IsRegular() || n.Gen != obj.Gen || slot >= len(l.Targets) || l.Targets[slot] != target {
		s.log.Info("meta: a corrupt object of no live file (the object GC removes it)", "target", target, "ino", obj.Ino, "slot", slot)
		return nil
	}
	if l.Kind == layout.RAID0 {
		return s.scrubLost(ctx, key, "the file is not protected (RAID-0)")
	}
	if !l.IsStale(slot) {
		c := &Command{Op: OpCorrupt, Now: s.now(), Ino: obj.Ino, Gen: obj.Gen, Slots: []uint32{obj.Stripe}, TargetID: target}
		_, err := s.propose(ctx, c)
		switch {
		case errors.Is(err, syscall.EIO):
			return s.scrubLost(ctx, key, "no other fresh copy or enough shards of its stripe")
		case errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.ESTALE), errors.Is(err, syscall.EBUSY):
			return nil // removed, replaced or moved meanwhile
		case err != nil:
			return fmt.Errorf("meta: scrub: mark inode %d slot %d stale: %w", obj.Ino, slot, err)
		}
	}
	marked = true
	s.log.Warn("meta: corrupt object marked stale; the rebuild rewrites it from its file's redundancy",
		"target", target, "ino", obj.Ino, "slot", slot)
	s.scrub.mu.Lock()
	s.scrub.target(target).Reported++
	s.scrub.mu.Unlock()
	if s.rb != nil {
		s.rb.urgent.Store(true)
		s.rb.wake()
	}
	return nil
}

// scrubLost records a corrupt object that nothing can repair (OpLost),
// so that every member lists it until its file goes.
func (s *Server) scrubLost(ctx context.Context, key scrubObject, why string) error {
	c := &Command{Op: OpLost, Now: s.now(), Ino: key.obj.Ino, Gen: key.obj.Gen, Slots: []uint32{key.obj.Stripe}, TargetID: key.target}
	_, err := s.propose(ctx, c)
	switch {
	case errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.ESTALE), errors.Is(err, syscall.EBUSY):
		return nil // removed, replaced or moved meanwhile
	case err != nil:
		return fmt.Errorf("meta: scrub: record inode %d slot %d lost: %w", key.obj.Ino, key.obj.Stripe, err)
	}
	s.log.Error("meta: corrupt object with no redundancy to repair it from: reads of its bad blocks fail with EIO",
		"target", key.target, "ino", key.obj.Ino, "slot", key.obj.Stripe, "why", why)
	s.scrub.mu.Lock()
	s.scrub.target(key.target).Reported++
	s.scrub.mu.Unlock()
	return nil
}

// lostObject applies OpLost: the object of slot Slots[0] of file Ino
// (generation Gen), on target TargetID, is corrupt and nothing can repair
// it. It is recorded (store.LostKey) until the file is removed
// (reclaimInode) or migrated to new objects (migrateCommit). It is the
// server's own command. A slot no longer on that target is EBUSY, a file
// of another generation ESTALE: nothing is recorded.
func (t *txn) lostObject(c *Command) error {
	n, err := t.reportedSlot(c)
	if err != nil {
		return err
	}
	v := append([]byte{lostFormat}, u64(uint64(c.Now))...)
	t.b.Set(store.LostKey(uint64(c.Ino), c.Gen, c.Slots[0], uint32(c.TargetID)), v)
	if n.Keyed&inodeHasLost == 0 {
		n.Keyed |= inodeHasLost
		t.put(n)
	}
	return nil
}

// lostObjects reads the recorded lost objects: how many per target, and
// the most recent proto.MaxScrubLost, oldest first.
func (s *Server) lostObjects() (map[proto.TargetID]uint64, []proto.LostObject, error) {
	type rec struct {
		at  uint64
		obj proto.LostObject
	}
	per := map[proto.TargetID]uint64{}
	var all []rec
	p := []byte{store.PrefixLost}
	err := s.st.Scan(p, store.PrefixEnd(p), func(k, v []byte) bool {
		ino, gen, stripe, target, ok := store.ParseLostKey(k)
		if !ok {
			return true
		}
		var at uint64
		if len(v) == 9 && v[0] == lostFormat {
			at = binary.BigEndian.Uint64(v[1:])
		}
		per[proto.TargetID(target)]++
		all = append(all, rec{at, proto.LostObject{Target: proto.TargetID(target), Obj: proto.ObjectID{Ino: proto.Ino(ino), Gen: gen, Stripe: stripe}}})
		return true
	})
	if err != nil {
		return nil, nil, errnof(syscall.EIO, "scan lost objects: %v", err)
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].at < all[j].at })
	if over := len(all) - proto.MaxScrubLost; over > 0 {
		all = all[over:]
	}
	out := make([]proto.LostObject, len(all))
	for i, r := range all {
		out[i] = r.obj
	}
	return per, out, nil
}

// scrubRepaired notes that the rebuild rewrote the object of slot of a
// file (generation gen) that was on target from.
func (s *Server) scrubRepaired(ino proto.Ino, gen uint64, slot int, from proto.TargetID) {
	key := scrubObject{from, proto.ObjectID{Ino: ino, Gen: gen, Stripe: uint32(slot)}}
	s.scrub.mu.Lock()
	defer s.scrub.mu.Unlock()
	if !s.scrub.repairs[key] {
		return
	}
	delete(s.scrub.repairs, key)
	s.scrub.target(from).Repaired++
}

// StartScrub implements proto.ScrubAdmin: root asks the server of every
// target that is up to begin a pass of it now. It returns the targets
// asked; if none could be, the first error.
func (s *Server) StartScrub(ctx context.Context) ([]proto.TargetID, error) {
	cl, err := s.caller(ctx)
	if err != nil {
		return nil, err
	}
	if !cl.isRoot() {
		return nil, errnof(syscall.EPERM, "scrub: only root may start a scrub")
	}
	starter, ok := s.opts.Storage.(proto.ScrubStarter)
	if !ok {
		return nil, errnof(syscall.ENOSYS, "scrub: the storage client cannot start a scrub")
	}
	var started []proto.TargetID
	var first error
	for _, ti := range s.reg.list() {
		st, up, _ := s.reg.stateOf(ti.ID)
		if !up || st == TargetRemoved {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, scrubStartTimeout)
		err := starter.StartScrub(cctx, ti.ID)
		cancel()
		if err != nil {
			s.log.Warn("meta: scrub not started", "target", ti.ID, "err", err)
			if first == nil {
				first = fmt.Errorf("meta: scrub: target %d: %w", ti.ID, err)
			}
			continue
		}
		started = append(started, ti.ID)
	}
	s.log.Info("meta: scrub started", "targets", started)
	if len(started) == 0 && first != nil {
		return nil, first
	}
	return started, nil
}

// ScrubStatus implements proto.ScrubAdmin: every registered target's
// scrub state (zero for one whose server has not reported to this
// server) and the lost objects. Anyone may read it.
func (s *Server) ScrubStatus(ctx context.Context) (proto.ScrubStatus, error) {
	if _, err := s.caller(ctx); err != nil {
		return proto.ScrubStatus{}, err
	}
	var out proto.ScrubStatus
	lostPer, lost, err := s.lostObjects()
	if err != nil {
		return out, err
	}
	infos := s.reg.list()
	s.scrub.mu.Lock()
	defer s.scrub.mu.Unlock()
	for _, ti := range infos {
		if st, _, _ := s.reg.stateOf(ti.ID); st == TargetRemoved {
			continue
		}
		ts := proto.ScrubTargetStatus{ScrubTarget: proto.ScrubTarget{Target: ti.ID}}
		if t := s.scrub.targets[ti.ID]; t != nil {
			ts = *t
		}
		ts.Lost = lostPer[ti.ID]
		out.Targets = append(out.Targets, ts)
	}
	sort.Slice(out.Targets, func(i, j int) bool { return out.Targets[i].Target < out.Targets[j].Target })
	out.Lost = lost
	return out, nil
}

// corruptSlot applies OpCorrupt: the object of slot Slots[0] of file Ino
// (generation Gen), on target TargetID, was found corrupt by its storage
// server: the slot is marked stale, so that no client reads it and the
// rebuild rewrites it in place. It is the server's own command (no
// credentials are checked). A slot no longer on that target is EBUSY, a
// file of another generation ESTALE, an unprotected file EINVAL, and a
// stripe left with no fresh copy (or too few shards) EIO: nothing changes.
func (t *txn) corruptSlot(c *Command) error {
	n, err := t.reportedSlot(c)
	if err != nil {
		return err
	}
	if n.Layout.Kind == layout.RAID0 {
		return errnof(syscall.EINVAL, "inode %d is not protected: its corrupt object cannot be repaired", c.Ino)
	}
	l := n.Layout.WithStale(c.Slots[0])
	if err := l.ValidateFile(); err != nil {
		return errnof(syscall.EIO, "inode %d: slot %d is corrupt and its stripe has no other readable copy: %v", c.Ino, c.Slots[0], err)
	}
	t.sm.staleMarks.Add(1)
	n.Layout = l
	t.put(n)
	t.res.attr = n.Attr
	return nil
}

// reportedSlot checks the object a scrub command (OpCorrupt, OpLost)
// names: one slot, Slots[0], of file Ino of generation Gen (else ESTALE),
// still on target TargetID (else EBUSY). It returns the file.
func (t *txn) reportedSlot(c *Command) (*inode, error) {
	if len(c.Slots) != 1 {
		return nil, errnof(syscall.EINVAL, "%v: %d slots", c.Op, len(c.Slots))
	}
	n, err := t.fileOfGen(c.Ino, c.Gen)
	if err != nil {
		return nil, err
	}
	slot := int(c.Slots[0])
	if slot >= len(n.Layout.Targets) {
		return nil, errnof(syscall.EINVAL, "inode %d has no slot %d", c.Ino, slot)
	}
	if on := n.Layout.Targets[slot]; on != c.TargetID {
		return nil, errnof(syscall.EBUSY, "inode %d slot %d is on target %d now, not %d", c.Ino, slot, on, c.TargetID)
	}
	return n, nil
}
