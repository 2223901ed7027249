package meta

import (
	"context"
	"fmt"
	"syscall"

	"github.com/weft-fs/weft/layout"
	"github.com/weft-fs/weft/meta/store"
	"github.com/weft-fs/weft/proto"
)

// TargetState is a target's place in its lifecycle, kept in its record
// (replicated state). Placement uses only targets in state in.
type TargetState uint8

const (
	// TargetIn serves and gets new objects (the default).
	TargetIn TargetState = 0
	// TargetOut is lost: its objects are rebuilt on other targets.
	TargetOut TargetState = 1
	// TargetDraining serves reads, gets no new objects, and its objects
	// are moved to other targets while it runs.
	TargetDraining TargetState = 2
	// TargetInactive gets no new objects; its data stays.
	TargetInactive TargetState = 3
	// TargetRemoved is retired: it may not register again (its directory
	// must be formatted anew, which makes it a new target).
	TargetRemoved  TargetState = 4
	targetStateMax TargetState = 5
)

var targetStateNames = [...]string{"in", "out", "draining", "inactive", "removed"}

func (s TargetState) String() string {
	if s < targetStateMax {
		return targetStateNames[s]
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// ParseTargetState parses a state's name.
func ParseTargetState(name string) (TargetState, error) {
	for i, n := range targetStateNames {
		if n == name {
			return TargetState(i), nil
		}
	}
	return 0, fmt.Errorf("meta: unknown target state %q (in, out, draining, inactive, removed): %w", name, syscall.EINVAL)
}

// movesOff reports whether the rebuild moves a target's objects elsewhere.
func (s TargetState) movesOff() bool {
	return s == TargetOut || s == TargetDraining || s == TargetRemoved
}

// targetAuto in OpTargetState's Flags (above the state's byte): the
// rebuild loop sets state out because the target was down too long.
const targetAuto = 1 << 8

// targetState applies OpTargetState: target TargetID gets the state in
// the low byte of Flags. A removed target stays removed, and its queued
// object removals are dropped (it will never answer them).
func (t *txn) targetState(c *Command) error {
	st := TargetState(c.Flags & 0xff)
	if st >= targetStateMax {
		return errnof(syscall.EINVAL, "unknown target state %d", st)
	}
	uuid, ok := t.sm.idToUUID[c.TargetID]
	if !ok {
		return errnof(syscall.ENOENT, "no target %d", c.TargetID)
	}
	v, err := t.sm.st.Get(store.TargetIDKey(uint32(c.TargetID)))
	if err != nil {
		return errnof(syscall.EIO, "target %d: read record: %v", c.TargetID, err)
	}
	rec, err := decodeTargetRecord(v)
	if err != nil {
		return errnof(syscall.EIO, "target %d: %v", c.TargetID, err)
	}
	if rec.uuid != uuid {
		return errnof(syscall.EIO, "target %d: record names uuid %s, the map %s", c.TargetID, rec.uuid, uuid)
	}
	if rec.state == TargetRemoved && st != TargetRemoved {
		return errnof(syscall.EPERM, "target %d was removed: format its directory again to use it (it then registers as a new target)", c.TargetID)
	}
	rec.state = st
	rec.auto = st == TargetOut && c.Flags&targetAuto != 0
	t.b.Set(store.TargetIDKey(uint32(c.TargetID)), encodeTargetRecord(rec))
	if st == TargetRemoved {
		t.b.DeletePrefix(store.GCKey(uint32(c.TargetID), 0, 0, 0)[:5])
	}
	t.res.target = c.TargetID
	t.res.targetRec = rec
	return nil
}

// setState records a target's state in the registry after its command
// was applied (the leader's registry; a new leader reloads it).
func (r *registry) setState(id proto.TargetID, rec targetRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t := r.byID[id]; t != nil {
		t.state, t.auto = rec.state, rec.auto
	}
}

// stateOf returns a target's state and whether it is up; ok is false for
// an unknown target.
func (r *registry) stateOf(id proto.TargetID) (st TargetState, up, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.byID[id]
	if t == nil {
		return 0, false, false
	}
	return t.state, r.up(t, r.now()), true
}

// SetTargetState implements proto.TargetAdmin: only root (or a server)
// may change a target's state. Removing a target is refused (EBUSY) while
// a file has an object on it that no other fresh copy or enough shards
// back: it would be lost.
func (s *Server) SetTargetState(ctx context.Context, id proto.TargetID, name string) error {
	cl, err := s.caller(ctx)
	if err != nil {
		return err
	}
	if !cl.isRoot() {
		return errnof(syscall.EPERM, "target state: only root may change a target's state")
	}
	st, err := ParseTargetState(name)
	if err != nil {
		return err
	}
	if _, _, ok := s.reg.stateOf(id); !ok {
		return errnof(syscall.ENOENT, "no target %d", id)
	}
	if st == TargetRemoved {
		if ino, err := s.onlyCopyOn(id); err != nil {
			return err
		} else if ino != 0 {
			return errnof(syscall.EBUSY, "target %d still holds the only readable copy of objects of inode %d (and maybe others): "+
				"drain it (weft target drain %d) or wait for its rebuild before removing it", id, ino, id)
		}
	}
	return s.setTargetState(ctx, id, st, false)
}

func (s *Server) setTargetState(ctx context.Context, id proto.TargetID, st TargetState, auto bool) error {
	c := &Command{Op: OpTargetState, Now: s.now(), TargetID: id, Flags: uint32(st)}
	if auto {
		c.Flags |= targetAuto
	}
	r, err := s.propose(ctx, c)
	if err != nil {
		return err
	}
	s.reg.setState(id, r.targetRec)
	s.log.Warn("meta: target state changed", "target", id, "state", st.String(), "auto", r.targetRec.auto)
	if s.rb != nil {
		s.rb.wake()
	}
	return nil
}

// onlyCopyOn returns a file (0: none) with an object on target id whose
// stripe has no other readable copy: RAID-0, or fewer than MinFresh fresh
// objects of the stripe on other targets that are not removed.
func (s *Server) onlyCopyOn(id proto.TargetID) (proto.Ino, error) {
	var found proto.Ino
	err := s.scanFiles(func(n *inode) bool {
		l := n.Layout
		w := l.Width()
		for slot, tg := range l.Targets {
			if tg != id {
				continue
			}
			g := slot / w
			fresh := 0
			for j := range w {
				o := l.Slot(g, j)
				if o == slot || l.IsStale(o) {
					continue
				}
				if st, _, ok := s.reg.stateOf(l.Targets[o]); ok && st != TargetRemoved && l.Targets[o] != id {
					fresh++
				}
			}
			if l.Kind == layout.RAID0 || fresh < l.MinFresh() {
				found = n.Ino
				return false
			}
		}
		return true
	})
	return found, err
}

// scanFiles calls fn with every regular file with a layout, in inode
// order, until fn returns false. It reads the store in batches, so it
// holds no iterator across fn's work.
func (s *Server) scanFiles(fn func(n *inode) bool) error {
	const batch = 1024
	lower := store.InodeKey(0)
	upper := []byte{store.PrefixInode + 1}
	for {
		var files []*inode
		var bad error
		var last []byte
		count := 0
		err := s.st.Scan(lower, upper, func(k, v []byte) bool {
			last = append(last[:0], k...)
			count++
			n, err := decodeInode(v)
			if err != nil {
				bad = fmt.Errorf("meta: scan inodes: %w", err)
				return false
			}
			if n.IsRegular() && len(n.Layout.Targets) > 0 {
				files = append(files, n)
			}
			return count < batch
		})
		if err != nil {
			return errnof(syscall.EIO, "scan inodes: %v", err)
		}
		if bad != nil {
			return errnof(syscall.EIO, "%v", bad)
		}
		for _, n := range files {
			if !fn(n) {
				return nil
			}
		}
		if count < batch {
			return nil
		}
		lower = append(last, 0)
	}
}

// TargetList implements proto.TargetAdmin: every target with its state
// and what the rebuild still has to move off it, and the rebuild's
// progress. Root only, like Status.
func (s *Server) TargetList(ctx context.Context) ([]proto.TargetStatus, proto.RebuildStatus, error) {
	cl, err := s.caller(ctx)
	if err != nil {
		return nil, proto.RebuildStatus{}, err
	}
	if !cl.isRoot() {
		return nil, proto.RebuildStatus{}, errnof(syscall.EPERM, "target list: only root may list targets")
	}
	return s.targetStatuses(), s.RebuildProgress(), nil
}

func (s *Server) targetStatuses() []proto.TargetStatus {
	infos := s.reg.list()
	out := make([]proto.TargetStatus, len(infos))
	var pending map[proto.TargetID]uint64
	if s.rb != nil {
		pending = s.rb.pendingByTarget()
	}
	for i, ti := range infos {
		st, _, _ := s.reg.stateOf(ti.ID)
		out[i] = proto.TargetStatus{TargetInfo: ti, State: st.String(), Pending: pending[ti.ID]}
		s.reg.mu.Lock()
		if t := s.reg.byID[ti.ID]; t != nil {
			out[i].Auto = t.auto
		}
		s.reg.mu.Unlock()
	}
	return out
}

// RebuildRate implements proto.TargetAdmin: root may change the rebuild's
// rate limit while it runs (0: unlimited); the new rate applies to the
// next range copied. It is the leader's setting (Options.RebuildRate
// until changed), not persisted.
func (s *Server) RebuildRate(ctx context.Context, rate *uint64) (uint64, error) {
	cl, err := s.caller(ctx)
	if err != nil {
		return 0, err
	}
	if rate != nil {
		if !cl.isRoot() {
			return 0, errnof(syscall.EPERM, "rebuild rate: only root may change it")
		}
		s.SetRebuildRate(*rate)
	}
	return s.rb.pace.Rate(), nil
}

var _ proto.TargetAdmin = (*Server)(nil)
