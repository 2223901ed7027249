package meta

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/weft-fs/weft/meta/store"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/transport"
	"github.com/weft-fs/weft/wire"
)

// minFree is the free space under which a target counts as full for
// placement.
const minFree = 64 << 10

// MaxTargetBytes is the largest Total a target may report (4 PiB): larger
// than any one storage target (a big ZFS pool), small enough that a target
// advertising absurd space (to draw every new file) is refused.
const MaxTargetBytes = 4 << 50

// usageSlack is how far Used+Free may exceed Total: the target's used count
// is an accounting figure that a crash can leave off by an update, and Free
// comes from statfs at another instant.
func usageSlack(total uint64) uint64 { return total/16 + 1<<30 }

// checkUsage refuses usage figures no real target reports, so that the
// registry never ranks a target by them: Total and Used at most
// MaxTargetBytes, Free at most Total, and Used+Free at most Total (plus
// usageSlack) unless the target is full.
func checkUsage(info proto.TargetInfo) error {
	switch {
	case info.Total > MaxTargetBytes:
		return errnof(syscall.EINVAL, "target reports %d bytes, over the %d-byte limit per target", info.Total, uint64(MaxTargetBytes))
	case info.Free > info.Total:
		return errnof(syscall.EINVAL, "target reports %d bytes free of %d total", info.Free, info.Total)
	case info.Used > MaxTargetBytes:
		return errnof(syscall.EINVAL, "target reports %d bytes used, over the %d-byte limit per target", info.Used, uint64(MaxTargetBytes))
	case info.Free > 0 && info.Used+info.Free > info.Total+usageSlack(info.Total):
		// A full target (Free 0) may count more used bytes than its
		// total: its capacity was lowered below what it holds.
		return errnof(syscall.EINVAL, "target reports %d bytes used and %d free of %d total", info.Used, info.Free, info.Total)
	}
	return nil
}

// Target records (the value under store.TargetIDKey). Version 1 held uuid
// and address; version 2 adds the certificate name of the storage server
// that registered the target ("" when it registered without one, and for
// every version 1 record), to which the uuid then belongs. Version 3 adds
// the target's lifecycle state and whether the rebuild loop set it
// (targetstate.go); older records read as state in. A record in state in
// that was never set otherwise is still written as version 2, so stores
// that never used target states keep their bytes.
const targetRecordVersion = 3

// targetRecord is the persisted part of a target.
type targetRecord struct {
	uuid, addr string
	owner      string // Peer.Name of the registering server; "" = none yet
	state      TargetState
	auto       bool // state out was set by the rebuild loop (down too long), not an admin
}

func encodeTargetRecord(r targetRecord) []byte {
	e := wire.NewEncoder(16 + len(r.uuid) + len(r.addr) + len(r.owner))
	v := uint8(targetRecordVersion)
	if r.state == TargetIn && !r.auto {
		v = 2
	}
	e.U8(v)
	e.String(r.uuid)
	e.String(r.addr)
	e.String(r.owner)
	if v >= 3 {
		e.U8(uint8(r.state))
		e.Bool(r.auto)
	}
	return e.B
}

func decodeTargetRecord(b []byte) (targetRecord, error) {
	d := wire.NewDecoder(b)
	v := d.U8()
	if d.Err() == nil && (v < 1 || v > targetRecordVersion) {
		return targetRecord{}, fmt.Errorf("meta: target record version %d not supported", v)
	}
	var r targetRecord
	r.uuid, r.addr = d.String(), d.String()
	if v >= 2 {
		r.owner = d.String()
	}
	if v >= 3 {
		r.state = TargetState(d.U8())
		r.auto = d.Bool()
		if d.Err() == nil && r.state >= targetStateMax {
			return targetRecord{}, fmt.Errorf("meta: target record: unknown state %d", r.state)
		}
	}
	if err := d.Done(); err != nil {
		return targetRecord{}, fmt.Errorf("meta: decode target record: %w", err)
	}
	return r, nil
}

// registrant is who asks to register a target: the certificate name of the
// storage server's connection, or trusted for an in-process caller (no peer
// in its ctx), which may register any uuid and never changes its owner.
type registrant struct {
	name    string
	trusted bool
}

// targetState is what the server knows about a target: the persisted id,
// uuid and address, plus the volatile usage and liveness from heartbeats.
type targetState struct {
	info     proto.TargetInfo
	uuid     string
	owner    string    // certificate name of the server the uuid belongs to
	lastSeen time.Time // last heartbeat, or when the registry was loaded
	heard    bool      // a heartbeat reported usage since the registry was loaded
	placed   uint64    // stripes placed on it since its last heartbeat
	state    TargetState
	auto     bool // state out was set by the rebuild loop
}

// registry is the in-memory view of the storage targets, used for
// placement, Targets and StatFS. The persisted part is rebuilt from the
// store at startup; usage and liveness come from heartbeats.
//
// A target loaded at startup counts as up for one timeout (a grace period)
// before any heartbeat, as it was registered and most likely still runs: a
// restarted server can place new files at once instead of failing creates
// until the next heartbeats. Its usage is unknown until then; placement
// treats it as not full. If no heartbeat comes within the grace period it is
// down like any silent target.
type registry struct {
	mu      sync.Mutex
	timeout time.Duration
	now     func() time.Time
	rnd     *rand.Rand
	byID    map[proto.TargetID]*targetState
	byUUID  map[string]proto.TargetID
	// appliedAt: when a replicated member applied each target's latest
	// registration (monotonic clock). A new leader's reload counts a
	// target registered moments ago down until it is heard from: its
	// server may not have received the reply yet (the registration was
	// committed as leadership changed) and would refuse data for an id it
	// does not know.
	appliedAt map[proto.TargetID]time.Time
}

func newRegistry(timeout time.Duration, now func() time.Time, seed uint64) *registry {
	return &registry{
		timeout: timeout, now: now,
		rnd:    rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		byID:   map[proto.TargetID]*targetState{},
		byUUID: map[string]proto.TargetID{},
	}
}

// reload forgets what the registry knows and loads it again from st (a
// new leader: its registry was not kept up to date as a follower). A
// target whose registration was applied within the last recent counts
// down until its server is heard from (see appliedAt); the others count
// up for one timeout, as after a restart.
//
// A new leader applies the entries its predecessor committed but could
// not tell the followers about just before it takes over (less than an
// election timeout before); an entry applied earlier reached the
// followers with the old leader's heartbeats, while it still led and
// answered its registrant. recent is therefore half an election timeout:
// the registrations whose replies may have been lost, and not the ones of
// servers that registered a little earlier, which would otherwise count
// down (no placement on them) until their next heartbeat.
func (r *registry) reload(st store.Reader, recent time.Duration) error {
	r.mu.Lock()
	clear(r.byID)
	clear(r.byUUID)
	r.mu.Unlock()
	if err := r.load(st); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, at := range r.appliedAt {
		if time.Since(at) >= recent {
			delete(r.appliedAt, id)
			continue
		}
		if t := r.byID[id]; t != nil && !t.heard {
			t.lastSeen = time.Time{}
		}
	}
	return nil
}

// noteApplied records that a replicated member applied a registration of
// target id just now.
func (r *registry) noteApplied(id proto.TargetID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.appliedAt == nil {
		r.appliedAt = map[proto.TargetID]time.Time{}
	}
	r.appliedAt[id] = time.Now()
}

func (r *registry) load(st store.Reader) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	var bad error
	err := st.Scan([]byte{store.PrefixTargetID}, []byte{store.PrefixTargetID + 1}, func(k, v []byte) bool {
		if len(k) != 5 {
			bad = fmt.Errorf("meta: bad target key %q", k)
			return false
		}
		rec, err := decodeTargetRecord(v)
		if err != nil {
			bad = err
			return false
		}
		id := proto.TargetID(binary.BigEndian.Uint32(k[1:]))
		r.byID[id] = &targetState{info: proto.TargetInfo{ID: id, Addr: rec.addr}, uuid: rec.uuid, owner: rec.owner, lastSeen: now,
			state: rec.state, auto: rec.auto}
		r.byUUID[rec.uuid] = id
		return true
	})
	if err != nil {
		return err
	}
	return bad
}

// heartbeat returns the target's id if the registration changes nothing
// persisted (known uuid, same address, same owner, no conflicting id), and
// then records usage and liveness. Otherwise the caller proposes a command.
func (r *registry) heartbeat(uuid string, who registrant, info proto.TargetInfo) (proto.TargetID, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	id, ok := r.byUUID[uuid]
	if !ok || (info.ID != 0 && info.ID != id) {
		return 0, false
	}
	t := r.byID[id]
	if t.info.Addr != info.Addr || (!who.trusted && t.owner != who.name) || t.state == TargetRemoved {
		return 0, false // a removed target: the command refuses it
	}
	r.refresh(t, info)
	return id, true
}

func (r *registry) refresh(t *targetState, info proto.TargetInfo) {
	t.info.Total, t.info.Used, t.info.Free = info.Total, info.Used, info.Free
	t.info.Objects, t.info.FilesFree, t.info.Device, t.info.IO = info.Objects, info.FilesFree, info.Device, info.IO
	t.info.Domain = info.Domain
	t.lastSeen = r.now()
	t.heard = true
	t.placed = 0
}

// known returns the address and owner of a registered uuid.
func (r *registry) known(uuid string) (addr, owner string, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	id, ok := r.byUUID[uuid]
	if !ok {
		return "", "", false
	}
	t := r.byID[id]
	return t.info.Addr, t.owner, true
}

// registered records the outcome of a register-target command.
func (r *registry) registered(id proto.TargetID, rec targetRecord, info proto.TargetInfo) {
	r.mu.Lock()
	defer r.mu.Unlock()
	uuid := rec.uuid
	t := r.byID[id]
	if t == nil {
		t = &targetState{uuid: uuid}
		r.byID[id] = t
	}
	t.info.ID = id
	t.info.Addr = info.Addr
	t.owner = rec.owner
	t.state, t.auto = rec.state, rec.auto
	r.byUUID[uuid] = id
	r.refresh(t, info)
}

func (r *registry) up(t *targetState, now time.Time) bool {
	return !t.lastSeen.IsZero() && now.Sub(t.lastSeen) < r.timeout
}

// list returns every registered target in id order.
func (r *registry) list() []proto.TargetInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	out := make([]proto.TargetInfo, 0, len(r.byID))
	for _, t := range r.byID {
		i := t.info
		i.Up = r.up(t, now)
		out = append(out, i)
	}
	slices.SortFunc(out, func(a, b proto.TargetInfo) int { return int(a.ID) - int(b.ID) })
	return out
}

func (r *registry) addr(id proto.TargetID) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.byID[id]
	if !ok {
		return "", false
	}
	return t.info.Addr, true
}

// candidates ranks the up, non-full targets for a new file: a weighted
// random order where the weight is the free space divided by how many
// stripes were placed there since its last heartbeat, so that both free
// space and recent load are balanced. It returns the errno a placement
// fails with when the list is empty: EIO (no target up) or ENOSPC (all up
// targets full). domains numbers each candidate's failure domain
// (proto.TargetInfo.FailureDomain; equal numbers, same domain).
func (r *registry) candidates() (_ []proto.TargetID, domains []uint32, _ syscall.Errno) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	type cand struct {
		id proto.TargetID
		w  float64
	}
	var cs []cand
	anyUp := false
	// A target not heard from since startup weighs as much as the target
	// with the most free space (1 GiB if none reported any).
	unheardFree := uint64(1 << 30)
	if maxFree := r.maxHeardFree(now); maxFree > 0 {
		unheardFree = maxFree
	}
	for _, t := range r.byID {
		if !r.up(t, now) {
			continue
		}
		anyUp = true
		if t.state != TargetIn {
			continue // out, draining, inactive, removed: no new objects
		}
		free := t.info.Free
		if checkUsage(t.info) != nil {
			continue // never stored (RegisterTarget refuses it); defensive
		}
		if !t.heard {
			free = unheardFree
		}
		if free < minFree {
			continue
		}
		cs = append(cs, cand{t.info.ID, float64(free) / float64(1+t.placed)})
	}
	if !anyUp {
		return nil, nil, syscall.EIO
	}
	if len(cs) == 0 {
		return nil, nil, syscall.ENOSPC
	}
	// Map iteration order is random; sort first so a seeded rand gives a
	// reproducible order in tests.
	slices.SortFunc(cs, func(a, b cand) int { return int(a.id) - int(b.id) })
	out := make([]proto.TargetID, 0, len(cs))
	for len(cs) > 0 {
		var sum float64
		for _, c := range cs {
			sum += c.w
		}
		x := r.rnd.Float64() * sum
		i := 0
		for ; i < len(cs)-1; i++ {
			x -= cs[i].w
			if x < 0 {
				break
			}
		}
		out = append(out, cs[i].id)
		cs = append(cs[:i], cs[i+1:]...)
	}
	domains = make([]uint32, len(out))
	seen := map[string]uint32{}
	for i, id := range out {
		name := r.byID[id].info.FailureDomain()
		n, ok := seen[name]
		if !ok {
			n = uint32(len(seen))
			seen[name] = n
		}
		domains[i] = n
	}
	return out, domains, 0
}

// maxHeardFree is the most free space an up target reported.
func (r *registry) maxHeardFree(now time.Time) uint64 {
	var m uint64
	for _, t := range r.byID {
		if t.heard && r.up(t, now) {
			m = max(m, t.info.Free)
		}
	}
	return m
}

// notePlaced counts stripes placed on targets, so the next placements
// prefer other targets until the next heartbeat reports real usage.
func (r *registry) notePlaced(ids []proto.TargetID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range ids {
		if t, ok := r.byID[id]; ok {
			t.placed++
		}
	}
}

// statfs sums the targets' space, counting a file system that several
// targets share (the same Device) once: its size and free space once,
// and the bytes each target holds. The shared file system's figures are
// those its lowest-numbered target reported, as in `weft df`
// (health.Sum): each target reports at its own heartbeat, so while the
// disk fills the reports differ, and taking whichever the map yielded
// first made free space jump between calls.
func (r *registry) statfs() (total, used, free uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := make([]proto.TargetID, 0, len(r.byID))
	for id := range r.byID {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	seen := map[string]bool{}
	for _, id := range ids {
		t := r.byID[id]
		used += t.info.Used
		if d := t.info.Device; d != "" {
			if seen[d] {
				continue
			}
			seen[d] = true
		}
		total += t.info.Total
		free += t.info.Free
	}
	return
}

// DefaultProbeTimeout bounds the probe of a registering target's address.
const DefaultProbeTimeout = 3 * time.Second

// ProbeAddr dials addr with tr and waits for an answer to transport.OpProbe
// (which the transport's server answers itself), then closes the
// connection. It is the Probe of a server started by Run: a connection of
// its own rather than the pool's, so that a refused address leaves no
// pooled connection and no background prober behind. With an
// authenticating transport the dial also checks the server's certificate.
func ProbeAddr(tr transport.Transport) func(ctx context.Context, addr string) error {
	return func(ctx context.Context, addr string) error {
		c, err := tr.Dial(ctx, addr)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Call(ctx, transport.OpProbe)
		return err
	}
}
