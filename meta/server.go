package meta

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/weft-fs/weft/capability"
	"github.com/weft-fs/weft/internal/ratelog"
	"github.com/weft-fs/weft/jobstats"
	"github.com/weft-fs/weft/layout"
	"github.com/weft-fs/weft/meta/store"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/transport"
)

// Options configure a Server. Store is required; the rest have defaults.
type Options struct {
	Store store.Store
	// Storage removes the objects of reclaimed files. Nil: the GC queue is
	// kept until a server with storage access drains it.
	Storage proto.StorageService
	// NewStorage, used when Storage is nil, builds the storage client from
	// a resolver of target addresses (the server's registry).
	NewStorage       func(resolve func(ctx context.Context, t proto.TargetID) (string, error)) proto.StorageService
	HeartbeatTimeout time.Duration // default 10s
	// OrphanGrace is how long after startup orphans (unlinked inodes left
	// from before a restart) are reclaimed, giving clients time to reopen
	// their handles. Default 30s.
	OrphanGrace time.Duration
	// SessionLease is how long a client session (and with it its open
	// handles) lives after its last renewal; default DefaultSessionLease.
	// When it expires its handles are dropped as if released, so a killed
	// client's unlinked-but-open files are reclaimed.
	SessionLease time.Duration
	// LeaseTerm is how long the leader keeps the metadata leases of a
	// session that stopped polling, so the longest a change waits for a
	// mount that does not answer (leases.go); default DefaultLeaseTerm.
	LeaseTerm  time.Duration
	GCInterval time.Duration // how often to retry the object-GC queue; default 5s
	// GCDelay is how long the GC waits after objects were queued before it
	// removes them, so that a burst of unlinks is removed in a few batches
	// (each acknowledged by one command) instead of one round per file.
	// Default 200ms.
	GCDelay  time.Duration
	MaxGroup int // most commands per group commit; default 256
	Logger   *slog.Logger
	Now      func() time.Time // the proposer's clock; default time.Now
	Seed     uint64           // placement randomness; 0 = from the clock
	RootUid  uint32
	RootGid  uint32

	// AllowUnauthenticated admits peers that did not authenticate
	// (transport.RoleNone: a transport without security) as clients.
	// Only tests set it; otherwise such requests are refused with EACCES.
	// Requests with no peer at all (in-process calls) are always trusted.
	AllowUnauthenticated bool
	// Access: client allow-list and root squash.
	Access Access
	// Probe checks that a storage server answers at addr; RegisterTarget
	// calls it before it accepts a new target or a new address of a known
	// one, with a ctx bounded by ProbeTimeout. Run dials with the
	// server's own transport (see ProbeAddr). Nil: addresses are not
	// probed (unit tests with made-up addresses).
	Probe        func(ctx context.Context, addr string) error
	ProbeTimeout time.Duration // default DefaultProbeTimeout
	// CapabilityKey signs the capabilities Open, CreateOpen and Capability
	// return (capability.KeySize bytes, shared with the storage servers;
	// from the key bundle's capability.key). Nil: none are issued (they
	// return nil), and storage servers refuse clients' data requests.
	CapabilityKey []byte
	// CapabilityLifetime is how long an issued capability is valid;
	// default DefaultCapabilityLifetime. Clients renew at 2/3 of it.
	CapabilityLifetime time.Duration

	// Replica, if set, makes the server a member of a raft group
	// (replicated.go); nil: a single server.
	Replica *Replica
	// MarkInterval is how often the durable mark (store.Mark) is rewritten
	// while commands are applied; Close writes it once more. Default
	// 100ms. Losses of acknowledged changes older than the last mark are
	// detected at the next start.
	MarkInterval time.Duration
	// LogLevel, if set, is the level of Logger's handler: parameter
	// log.level.meta sets it at run time (params.go), and an empty value
	// sets it back to DefaultLogLevel (the daemon's --log-level).
	LogLevel        *slog.LevelVar
	DefaultLogLevel slog.Level
	// JobStats bounds the per-job statistics kept (jobstats.go): how long
	// an idle job is kept and how many jobs at most.
	JobStats jobstats.Options
	// AcceptRollback starts on a store that has applied fewer changes
	// than its durable mark records (an older backup restored on purpose)
	// instead of refusing it with ErrRollback; the mark is rewritten.
	AcceptRollback bool

	// RebuildAfter is how long a target may be down before the leader
	// marks it out and rebuilds its objects on other targets (default
	// DefaultRebuildAfter; negative: never by itself, only `weft target
	// out`). RebuildRate bounds the rebuild's bytes/s (default
	// DefaultRebuildRate; changed at run time with SetRebuildRate), and
	// RebuildParallel the objects rebuilt at once. RebuildInterval is how
	// often targets' states are checked, RebuildScan how often files are
	// scanned for stale objects when there may be some (stale marks made,
	// a new leader, a pass that left work: rebuild.go).
	RebuildAfter    time.Duration
	RebuildRate     uint64
	RebuildParallel int
	RebuildInterval time.Duration
	RebuildScan     time.Duration
	// NoRebuildRate: RebuildRate 0 means unlimited, not the default.
	NoRebuildRate bool
	// MovedObjectGrace is how long the old object of a slot moved off a
	// target that still serves (a drain) is kept before its removal, for
	// readers that opened the file before the move (default
	// DefaultMovedObjectGrace).
	MovedObjectGrace time.Duration
	// MigrateTicketLife is how long a restripe's ticket lasts without a
	// renewal (default DefaultMigrateTicketLife): its new objects are
	// removed then unless it was committed, and a client whose copy runs
	// longer renews it (MigrateRenew).
	MigrateTicketLife time.Duration

	// applyHook, if set, sees every command just before it is applied, in
	// apply order (tests record the command log with it).
	applyHook func(*Command)
	// leaseClock, if set, is the clock of session leases (default
	// time.Now): tests move it instead of waiting for leases to run out.
	leaseClock func() time.Time
	// noRebuildLoop and noGCLoop: the rebuild and the object GC run only
	// when a test calls them (a test that drives rebuild jobs or writes
	// GC records itself would race the loops' passes).
	noRebuildLoop, noGCLoop bool
}

// Server is the metadata service: it implements proto.MetaService and
// proto.TargetRegistry over a store. Mutations are proposed as commands to
// one applier goroutine (see doc.go); reads go to the store directly.
type Server struct {
	opts Options
	st   store.Store
	sm   *stateMachine
	reg  *registry
	log  *slog.Logger
	// refusals rate-limits the warnings about refused requests and
	// registrations, which a misconfigured or hostile peer can send in a
	// flood.
	refusals ratelog.Limiter

	capKey *capability.Key // nil: no capabilities issued

	nextIno atomic.Uint64 // the proposer's inode allocator

	// commits is the commit path (log.go): the local group commit, or a
	// replicated log.
	commits commitLog
	local   *localLog // commits when it is the local log (tests look inside)
	replica *raftLog  // commits when replicated
	// electionTimeout is the replicated group's (TickInterval ×
	// ElectionTick); 0 for a single server.
	electionTimeout time.Duration

	jobs *jobstats.Table // per-job request statistics (jobstats.go)

	scrub scrubBook // what storage servers report of the scrub (scrub.go)

	paramMu  sync.Mutex
	paramSet map[string]string // parameters set without --persist (params.go)

	started  time.Time     // for Status's uptime
	requests atomic.Uint64 // requests served over the network (Run counts them)

	findKey     [32]byte // signs find cursors (find.go), random per process
	findKeyOnce sync.Once

	mu       sync.Mutex
	closed   bool
	inflight sync.WaitGroup
	// opens counts the open handles of each inode over all sessions
	// (reclaim waits for 0); sessOpens counts them per session, so that a
	// Release only ever drops a handle its own session took.
	opens     map[proto.Ino]int
	sessOpens map[session]map[proto.Ino]sessionOpens
	// writers counts, per inode, the sessions in sessOpens that hold it
	// open for writing (their entry's write flag): what anyWriteOpen and
	// otherWriterLocked ask, without a walk over every session.
	writers  map[proto.Ino]int
	sessions map[session]*sessionState // registered sessions and their leases (session.go)
	leases   *leaseTable               // metadata leases of polling sessions (leases.go)
	// locks are the cluster-wide file locks (locks.go), released with the
	// session that holds them.
	locks *lockTable
	// appendEnd is, per inode open for appending, the end of the last
	// range Append reserved (append.go); forgotten at its last release.
	appendEnd map[proto.Ino]uint64
	// graceUntil ends the grace period after a restart (zero on a freshly
	// formatted store): until then clients re-register the sessions the
	// server forgot, and no orphan is reclaimed.
	// (atomic: a new leader restarts it from the raft node's goroutine).
	graceUntil atomic.Int64 // unix ns; 0: none
	reclaiming map[proto.Ino]bool
	// migrating holds the inodes whose restripe is being committed
	// (migrate.go); the channel closes when it is done.
	migrating map[proto.Ino]chan struct{}
	// copying holds the inodes a WriteDone offering a copy of their bytes
	// is under way for (copies.go); the channel closes when it is done.
	copying map[proto.Ino]chan struct{}
	// copyUnsure holds the inodes a copy's WriteDone failed for: it may
	// still be applied, so their next writer drops (copies.go).
	copyUnsure map[proto.Ino]bool
	// noCopies: the parameter meta.file_copies is off (copies.go).
	noCopies atomic.Bool
	pending  []proto.Ino // orphans to reclaim

	kickReclaim chan struct{}
	kickGC      chan struct{}
	ctx         context.Context
	cancel      context.CancelFunc
	bg          sync.WaitGroup

	// durable is the state machine's applied count once synced: what the
	// durable mark may claim. markMu serializes mark writes; marked is the
	// count the mark holds.
	durable atomic.Uint64
	marker  store.Marker // nil: the store keeps no mark
	markMu  sync.Mutex
	marked  uint64

	// members are a replica's group members' addresses (members.go).
	members memberAddrs

	// rb is the rebuild loop and its progress (rebuild.go).
	rb *rebuilder
}

// ErrRollback is wrapped (with store.ErrCorrupt) by the error of New for a
// store that has applied fewer changes than its durable mark records: it
// lost acknowledged changes (its WAL cut short or damaged, an older copy
// put back) and must not be served.
var ErrRollback = errors.New("meta: store lost acknowledged changes")

// ErrForeignStore is wrapped by the error of New for a store of another
// file system than the one its directory belonged to.
var ErrForeignStore = errors.New("meta: store of another file system")

// New opens the state machine on opts.Store (formatting an empty store),
// and starts the applier and the background loops. Close stops them; the
// caller closes the store after Close.
func New(opts Options) (*Server, error) {
	if opts.Store == nil {
		return nil, errors.New("meta: Options.Store is required")
	}
	if opts.HeartbeatTimeout <= 0 {
		opts.HeartbeatTimeout = 10 * time.Second
	}
	if opts.OrphanGrace < 0 {
		return nil, errors.New("meta: negative OrphanGrace")
	}
	if opts.OrphanGrace == 0 {
		opts.OrphanGrace = DefaultOrphanGrace
	}
	if opts.SessionLease < 0 {
		return nil, errors.New("meta: negative SessionLease")
	}
	if opts.SessionLease == 0 {
		opts.SessionLease = DefaultSessionLease
	}
	if opts.GCInterval <= 0 {
		opts.GCInterval = 5 * time.Second
	}
	if opts.GCDelay <= 0 {
		opts.GCDelay = 200 * time.Millisecond
	}
	if opts.ProbeTimeout <= 0 {
		opts.ProbeTimeout = DefaultProbeTimeout
	}
	if opts.MaxGroup <= 0 {
		opts.MaxGroup = 256
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Seed == 0 {
		opts.Seed = uint64(time.Now().UnixNano())
	}
	if opts.CapabilityLifetime < 0 {
		return nil, errors.New("meta: negative CapabilityLifetime")
	}
	if opts.CapabilityLifetime == 0 {
		opts.CapabilityLifetime = DefaultCapabilityLifetime
	}
	var capKey *capability.Key
	if opts.CapabilityKey != nil {
		k, err := capability.NewKey(0, opts.CapabilityKey)
		if err != nil {
			return nil, fmt.Errorf("meta: %w", err)
		}
		capKey = k
	}
	if opts.MarkInterval <= 0 {
		opts.MarkInterval = 100 * time.Millisecond
	}
	if opts.RebuildAfter == 0 {
		opts.RebuildAfter = DefaultRebuildAfter
	}
	if opts.RebuildRate == 0 && !opts.NoRebuildRate {
		opts.RebuildRate = DefaultRebuildRate
	}
	if opts.RebuildParallel <= 0 {
		opts.RebuildParallel = DefaultRebuildParallel
	}
	if opts.RebuildInterval <= 0 {
		opts.RebuildInterval = DefaultRebuildInterval
	}
	if opts.MigrateTicketLife <= 0 {
		opts.MigrateTicketLife = DefaultMigrateTicketLife
	}
	if opts.MovedObjectGrace <= 0 {
		opts.MovedObjectGrace = DefaultMovedObjectGrace
	}
	if opts.RebuildScan <= 0 {
		opts.RebuildScan = DefaultRebuildScan
	}
	if nw, ok := opts.Store.(interface{ NoWAL() bool }); ok && nw.NoWAL() && opts.Replica == nil {
		// Its commits would be durable only at a flush, and nothing
		// else records them: acknowledged changes would be lost.
		return nil, errors.New("meta: a single server's store needs its write-ahead log (open it without store.PebbleOptions.NoWAL)")
	}
	sm, err := openStateMachine(opts.Store)
	if err != nil {
		return nil, err
	}
	marker, _ := opts.Store.(store.Marker)
	if opts.Replica != nil {
		// A replica's batches are not synced: the raft log is the record
		// of what was acknowledged, and the store is caught up from it.
		marker = nil
	}
	if marker != nil {
		if err := checkMark(marker, sm, opts); err != nil {
			return nil, err
		}
	}
	s := &Server{
		opts: opts, st: opts.Store, sm: sm, log: opts.Logger, capKey: capKey,
		reg:         newRegistry(opts.HeartbeatTimeout, opts.Now, opts.Seed),
		opens:       map[proto.Ino]int{},
		sessOpens:   map[session]map[proto.Ino]sessionOpens{},
		writers:     map[proto.Ino]int{},
		sessions:    map[session]*sessionState{},
		locks:       newLockTable(),
		leases:      newLeaseTable(opts.LeaseTerm, nil),
		appendEnd:   map[proto.Ino]uint64{},
		reclaiming:  map[proto.Ino]bool{},
		migrating:   map[proto.Ino]chan struct{}{},
		copying:     map[proto.Ino]chan struct{}{},
		copyUnsure:  map[proto.Ino]bool{},
		kickReclaim: make(chan struct{}, 1),
		kickGC:      make(chan struct{}, 1),
		marker:      marker,
		started:     time.Now(),
		jobs:        jobstats.New(withService(opts.JobStats, "meta")),
		paramSet:    map[string]string{},
	}
	s.rb = newRebuilder(s)
	s.durable.Store(sm.applied)
	if opts.Replica == nil {
		s.local = newLocalLog(sm, opts.MaxGroup, opts.applyHook, s.log.Error, func(applied uint64) { s.durable.Store(applied) })
		s.commits = s.local
	}
	if err := s.reg.load(opts.Store); err != nil {
		return nil, err
	}
	if s.opts.Storage == nil && s.opts.NewStorage != nil {
		s.opts.Storage = s.opts.NewStorage(s.ResolveTarget)
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if sm.nextIno != 0 {
		// A restart: open handles and sessions were in memory only.
		s.graceUntil.Store(time.Now().Add(opts.OrphanGrace).UnixNano())
	}
	if opts.Replica == nil && (sm.nextIno == 0 || sm.fsid == "") {
		fsid, err := newFSID()
		if err != nil {
			s.Close()
			return nil, err
		}
		c := &Command{Op: OpInit, Now: s.now(), Mode: 0755, Uid: opts.RootUid, Gid: opts.RootGid, Text: fsid}
		if sm.nextIno != 0 {
			c.Flags = initAdoptFSID
		}
		if _, err := s.propose(s.ctx, c); err != nil {
			s.Close()
			return nil, fmt.Errorf("meta: format store: %w", err)
		}
	}
	if opts.Replica == nil {
		if err := s.recountIfNeeded(s.ctx); err != nil {
			s.Close()
			return nil, fmt.Errorf("meta: count quota usage: %w", err)
		}
	}
	s.nextIno.Store(sm.nextIno)
	if marker != nil {
		if err := s.writeMark(true); err != nil {
			s.Close()
			return nil, err
		}
	}
	s.log.Info("meta: store opened", "fsid", sm.fsid, "applied", sm.applied, "inodes", sm.inodes, "next_ino", sm.nextIno)
	if opts.Replica != nil {
		// A replica's store is formatted by the first leader.
		if err := s.startReplica(opts.Replica); err != nil {
			s.Close()
			return nil, err
		}
	}
	s.bg.Add(7)
	go s.every(s.leases.term, s.leases.sweep)
	if opts.noRebuildLoop {
		s.bg.Done()
	} else {
		go s.rb.loop()
	}
	go s.sessionLoop()
	go s.reclaimLoop()
	if opts.noGCLoop {
		s.bg.Done()
	} else {
		go s.gcLoop()
	}
	go s.orphanLoop()
	go s.markLoop()
	s.applyParams("") // a persisted log level and rebuild rate apply from the start
	return s, nil
}

// newFSID makes a file system id: a random (version 4) uuid.
func newFSID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("meta: file system id: %w", err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]), nil
}

// newGen makes a file's generation: random, so that no state (a counter
// that a rollback could set back) is needed for it to differ from the
// generation of any earlier file with the same inode number, and decided
// by the proposer, so every replica stores the same. Never 0, which
// names the objects of files made before generations.
func newGen() uint64 {
	for {
		if g := mrand.Uint64(); g != 0 {
			return g
		}
	}
}

// FSID returns the file system's uuid, made when the store was formatted.
func (s *Server) FSID() string { return s.sm.fsidNow() }

// checkMark refuses a store of another file system than its durable mark
// names, and one that knows less than the mark.
func checkMark(m store.Marker, sm *stateMachine, opts Options) error {
	mk, ok, err := m.ReadMark()
	if err != nil {
		return fmt.Errorf("meta: %w (%s)", err, store.RecoverHint)
	}
	if ok && mk.FSID != "" && sm.fsid != "" && mk.FSID != sm.fsid {
		return fmt.Errorf("%w: the store belongs to file system %s, but this directory was file system %s's: "+
			"another file system's store was put here", ErrForeignStore, sm.fsid, mk.FSID)
	}
	if !ok || mk.Applied <= sm.applied {
		return nil
	}
	if opts.AcceptRollback {
		opts.Logger.Warn("meta: starting on a store older than its durable mark, as asked (AcceptRollback)",
			"applied", sm.applied, "mark", mk.Applied, "missing", mk.Applied-sm.applied)
		return nil
	}
	return fmt.Errorf("%w: the store has applied %d changes but %d were durable before (%d missing: "+
		"its write-ahead log was cut short or damaged, or an older copy was put back): %w (%s; "+
		"to serve an older backup on purpose, start with --accept-rollback)",
		ErrRollback, sm.applied, mk.Applied, mk.Applied-sm.applied, store.ErrCorrupt, store.RecoverHint)
}

// writeMark records the durable applied count in the mark if it grew
// (always if force).
func (s *Server) writeMark(force bool) error {
	if s.marker == nil {
		return nil // a replica, or a store without a mark
	}
	s.markMu.Lock()
	defer s.markMu.Unlock()
	d := s.durable.Load()
	if d == s.marked && !force {
		return nil
	}
	if err := s.marker.WriteMark(store.Mark{FSID: s.sm.fsid, Applied: d}); err != nil {
		return fmt.Errorf("meta: %w", err)
	}
	s.marked = d
	return nil
}

// markLoop rewrites the durable mark every MarkInterval while changes are
// applied. It never blocks a commit: the mark only ever claims what a
// synced batch already made durable, so it may lag but never lead.
func (s *Server) markLoop() {
	if s.marker == nil {
		s.bg.Done() // a replica keeps no mark: its raft log is the record
		return
	}
	s.every(s.opts.MarkInterval, func() {
		if err := s.writeMark(false); err != nil {
			s.log.Error("meta: durable mark not written", "err", err)
		}
	})
}

// every runs f every d until the server closes (a background loop: it
// marks s.bg done when it returns).
func (s *Server) every(d time.Duration, f func()) {
	defer s.bg.Done()
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
			f()
		}
	}
}

func (s *Server) now() int64 { return s.opts.Now().UnixNano() }

// allocIno hands out an inode number never used before: the allocator
// starts at the persisted high-water mark and only grows.
func (s *Server) allocIno() proto.Ino { return proto.Ino(s.nextIno.Add(1) - 1) }

// Close stops accepting commands, waits for the ones in flight, and stops
// the background loops. It does not close the store.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	if s.replica != nil {
		s.replica.stop() // fails the proposals in flight
	}
	s.bg.Wait()
	s.inflight.Wait()
	if s.marker != nil {
		// Every change is durable now: the mark is exact after a clean stop.
		return s.writeMark(false)
	}
	return nil
}

var errClosed = fmt.Errorf("meta: server shutting down: %w", syscall.EIO)

// propose hands c to the commit path (log.go) and waits until it is
// applied and durable, then starts the in-memory follow-ups (reclaim of new
// orphans, object GC).
func (s *Server) propose(ctx context.Context, c *Command) (applyResult, error) {
	return s.proposePrepared(ctx, c, nil)
}

// proposePrepared is propose with prepare, if not nil, called once with
// the inodes c's names refer to now (leaseVictims, read after the break
// generation is taken), before c goes to the commit path: it may still
// fill c in, from what the command's proposer reads anyway.
func (s *Server) proposePrepared(ctx context.Context, c *Command, prepare func(victims []proto.Ino)) (applyResult, error) {
	s.mu.Lock()
	if s.closed && c.Op != OpInit {
		s.mu.Unlock()
		return applyResult{}, errClosed
	}
	s.inflight.Add(1)
	s.mu.Unlock()
	defer s.inflight.Done()
	g0 := s.leases.begin()
	victims := s.leaseVictims(c)
	if prepare != nil {
		prepare(victims)
	}
	res, err := s.commits.propose(ctx, c)
	if err == nil {
		// Before anyone hears of the change, no other mount may answer
		// from what it replaced (leases.go).
		if werr := s.breakLeases(ctx, c, &res, g0, victims); werr != nil {
			return res, fmt.Errorf("meta: %v applied, waiting for caches to drop: %w", c.Op, werr)
		}
	}
	if err == nil && len(res.orphans) > 0 {
		s.enqueueReclaim(res.orphans...)
	}
	if err == nil && res.gcQueued > 0 {
		kick(s.kickGC)
	}
	return res, err
}

// proposeAs is propose of a command made for the request cl: the
// command carries the request's id for the dedupe (dedupe.go).
func (s *Server) proposeAs(ctx context.Context, cl caller, c *Command) (applyResult, error) {
	cl.stamp(c)
	return s.propose(ctx, c)
}

func kick(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// GroupStats returns how many group commits and commands were applied.
func (s *Server) GroupStats() (groups, commands uint64) {
	return s.commits.stats()
}

// --- reads ---

func (s *Server) readInode(ino proto.Ino) (*inode, error) {
	if n := s.sm.cachedInode(ino); n != nil {
		return n, nil
	}
	return loadInode(s.st, ino)
}

// Lookup implements proto.MetaService.
func (s *Server) Lookup(ctx context.Context, parent proto.Ino, name string) (proto.Attr, error) {
	n, _, err := s.lookup(ctx, parent, name)
	if err != nil {
		return proto.Attr{}, err
	}
	return n.Attr, nil
}

// lookup is Lookup returning the inode, and whether the caller's session
// was granted leases on the directory and the inode with nothing of them
// to invalidate (leaseTable.grant's clean).
func (s *Server) lookup(ctx context.Context, parent proto.Ino, name string) (*inode, bool, error) {
	cl, err := s.reader(ctx)
	if err != nil {
		return nil, false, err
	}
	g := s.leases.begin()
	if len(name) > MaxNameLen {
		return nil, false, errnof(syscall.ENAMETOOLONG, "name of %d bytes", len(name))
	}
	n, err := s.lookupEntry(cl, parent, name)
	if err != nil {
		return nil, false, err
	}
	if n == nil {
		s.leases.grant(cl.sess, g, name, parent) // a negative entry
		return nil, false, noEntryError{parent, name}
	}
	clean := s.leases.grant(cl.sess, g, name, parent, n.Ino)
	return n, clean, nil
}

// lookupEntry returns the inode that name names in parent (nil: no such
// entry), once parent is known to be a directory cl may search. The
// parent, the entry and its inode are read in one view (of the state
// machine's caches when they hold all three, else of the store): a rename
// over the name between two reads would delete the inode the entry named.
func (s *Server) lookupEntry(cl caller, parent proto.Ino, name string) (*inode, error) {
	if p, n, ok := s.sm.cachedLookup(parent, name); ok {
		if !cl.isRoot() {
			if err := maySearch(cl.cred, &p.Attr); err != nil {
				return nil, err
			}
		}
		return n, nil
	}
	v, err := s.st.View()
	if err != nil {
		return nil, errnof(syscall.EIO, "lookup: %v", err)
	}
	defer v.Close()
	if !cl.isRoot() {
		// Search permission on the parent; root may search any directory.
		p, err := loadInode(v, parent)
		if err != nil {
			return nil, err
		}
		if !p.IsDir() {
			return nil, errnof(syscall.ENOTDIR, "inode %d is not a directory", parent)
		}
		if err := maySearch(cl.cred, &p.Attr); err != nil {
			return nil, err
		}
	}
	// Only directories have entries: for root, the parent is read (for
	// ENOENT or ENOTDIR) only when the name is not found.
	de, ok, err := loadDirent(v, parent, name)
	if err != nil {
		return nil, err
	}
	if !ok {
		p, err := loadInode(v, parent)
		if err != nil {
			return nil, err
		}
		if !p.IsDir() {
			return nil, errnof(syscall.ENOTDIR, "inode %d is not a directory", parent)
		}
		return nil, nil
	}
	return loadInode(v, de.Ino)
}

// noEntryError is Lookup's ENOENT, the answer to the lookup before every
// create: its message is formatted only when someone prints it.
type noEntryError struct {
	parent proto.Ino
	name   string
}

func (e noEntryError) Error() string {
	return fmt.Sprintf("meta: no entry %q in %d: %v", e.name, e.parent, syscall.ENOENT)
}

func (e noEntryError) Unwrap() error { return syscall.ENOENT }

// GetAttr implements proto.MetaService.
func (s *Server) GetAttr(ctx context.Context, ino proto.Ino) (proto.Attr, error) {
	cl, err := s.reader(ctx)
	if err != nil {
		return proto.Attr{}, err
	}
	g := s.leases.begin()
	n, err := s.readInode(ino)
	if err != nil {
		return proto.Attr{}, err
	}
	s.leases.grant(cl.sess, g, "", ino)
	return n.Attr, nil
}

// Readlink implements proto.MetaService.
func (s *Server) Readlink(ctx context.Context, ino proto.Ino) (string, error) {
	if _, err := s.reader(ctx); err != nil {
		return "", err
	}
	n, err := s.readInode(ino)
	if err != nil {
		return "", err
	}
	if !n.IsSymlink() {
		return "", errnof(syscall.EINVAL, "inode %d is not a symlink", ino)
	}
	return n.Symlink, nil
}

// MaxReadDir bounds the entries one ReadDir returns.
const MaxReadDir = 4096

// ReadDir implements proto.MetaService: a prefix scan that starts just
// after `after`, so each page costs only the entries it returns.
func (s *Server) ReadDir(ctx context.Context, dir proto.Ino, after string, max int) ([]proto.DirEntry, error) {
	cl, err := s.reader(ctx)
	if err != nil {
		return nil, err
	}
	g := s.leases.begin()
	// The entries and their inodes are read in one view: an entry whose
	// inode a later rename or unlink deleted is never left out (nor one
	// shown with its next inode's attributes).
	v, err := s.st.View()
	if err != nil {
		return nil, errnof(syscall.EIO, "readdir %d: %v", dir, err)
	}
	defer v.Close()
	d, err := loadInode(v, dir)
	if err != nil {
		return nil, err
	}
	if !d.IsDir() {
		return nil, errnof(syscall.ENOTDIR, "inode %d is not a directory", dir)
	}
	if err := may(cl.cred, &d.Attr, accessRead, "list"); err != nil {
		return nil, err
	}
	if max <= 0 || max > MaxReadDir {
		max = MaxReadDir
	}
	prefix := store.DirPrefix(uint64(dir))
	lower := prefix
	if after != "" {
		lower = append(store.DirentKey(uint64(dir), after), 0)
	}
	type ent struct {
		name string
		de   dirent
	}
	ents := make([]ent, 0, min(max, 256))
	var bad error
	err = v.Scan(lower, store.PrefixEnd(prefix), func(k, v []byte) bool {
		de, err := decodeDirent(v)
		if err != nil {
			bad = err
			return false
		}
		ents = append(ents, ent{string(k[len(prefix):]), de})
		return len(ents) < max
	})
	if err == nil {
		err = bad
	}
	if err != nil {
		return nil, errnof(syscall.EIO, "readdir %d: %v", dir, err)
	}
	out := make([]proto.DirEntry, 0, len(ents))
	for _, e := range ents {
		n, err := loadInode(v, e.de.Ino)
		if err != nil {
			return nil, err
		}
		out = append(out, proto.DirEntry{Name: e.name, Attr: n.Attr})
	}
	s.leases.grantDir(cl.sess, g, dir, out)
	return out, nil
}

// GetXattr implements proto.MetaService.
func (s *Server) GetXattr(ctx context.Context, ino proto.Ino, name string) ([]byte, error) {
	cl, err := s.reader(ctx)
	if err != nil {
		return nil, err
	}
	n, err := s.readInode(ino)
	if err != nil {
		return nil, err
	}
	if err := mayReadXattr(cl.cred, &n.Attr, name); err != nil {
		return nil, err
	}
	v, err := s.st.Get(store.XattrKey(uint64(ino), name))
	if errors.Is(err, store.ErrNotFound) {
		return nil, errnof(syscall.ENODATA, "no xattr %q", name)
	}
	if err != nil {
		return nil, errnof(syscall.EIO, "getxattr: %v", err)
	}
	if v == nil {
		v = []byte{}
	}
	return v, nil
}

// ListXattr implements proto.MetaService.
func (s *Server) ListXattr(ctx context.Context, ino proto.Ino) ([]string, error) {
	cl, err := s.reader(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := s.readInode(ino); err != nil {
		return nil, err
	}
	p := store.XattrPrefix(uint64(ino))
	var names []string
	if err := s.st.Scan(p, store.PrefixEnd(p), func(k, _ []byte) bool {
		if name := string(k[len(p):]); listableXattr(cl.cred, name) {
			names = append(names, name)
		}
		return true
	}); err != nil {
		return nil, errnof(syscall.EIO, "listxattr: %v", err)
	}
	return names, nil
}

// StatFS implements proto.MetaService.
func (s *Server) StatFS(ctx context.Context) (proto.StatFS, error) {
	if _, err := s.reader(ctx); err != nil {
		return proto.StatFS{}, err
	}
	files, err := getCounter(s.st, store.CounterInodes)
	if err != nil {
		return proto.StatFS{}, errnof(syscall.EIO, "%v", err)
	}
	var out proto.StatFS
	out.Total, out.Used, out.Free = s.reg.statfs()
	out.Files = files
	const nominalInodes = 1 << 32
	if files < nominalInodes {
		out.FilesFree = nominalInodes - files
	}
	return out, nil
}

// Targets implements proto.MetaService.
func (s *Server) Targets(ctx context.Context) ([]proto.TargetInfo, error) {
	if _, err := s.caller(ctx); err != nil {
		return nil, err
	}
	return s.reg.list(), nil
}

// --- mutations ---

func (s *Server) placement(c *Command) {
	cands, domains, errno := s.reg.candidates()
	c.Candidates = cands
	c.Domains = domains
	c.PlaceErr = uint32(errno)
}

func (s *Server) notePlaced(a proto.Attr) {
	if a.IsRegular() && len(a.Layout.Targets) > 0 {
		s.reg.notePlaced(a.Layout.Targets)
	}
}

// SetAttr implements proto.MetaService.
func (s *Server) SetAttr(ctx context.Context, ino proto.Ino, in proto.SetAttrIn) (proto.Attr, error) {
	cl, err := s.caller(ctx)
	if err != nil {
		return proto.Attr{}, err
	}
	c := &Command{Op: OpSetAttr, Now: s.now(), Ino: ino, SetAttr: in, Cred: cl.cred}
	if in.Valid&proto.SetHandle != 0 {
		if err := s.handleSession(cl.sess); err != nil {
			return proto.Attr{}, err
		}
	}
	if in.Valid&proto.SetHandle != 0 && s.holdsWriteOpen(cl.sess, ino) {
		c.Flags |= setAttrViaHandle
	}
	c.SetAttr.Valid &^= proto.SetHandle
	r, err := s.proposeAs(ctx, cl, c)
	if err == nil && in.Valid&proto.SetSize != 0 {
		s.mu.Lock()
		s.forgetAppendsLocked(ino) // appends go on at the new size
		s.mu.Unlock()
	}
	return r.attr, err
}

// Create implements proto.MetaService.
func (s *Server) Create(ctx context.Context, in proto.CreateIn) (proto.Attr, error) {
	a, _, _, err := s.CreateOpen(ctx, in, 0)
	return a, err
}

// CreateOpen is Create that, with want not 0 and when the result is a
// regular file, also opens it for want as Open does (one round trip
// instead of two), returning its capability. It also returns the parent
// directory's attributes after the change. A file it creates may be opened
// whatever its mode bits (as open(2) with O_CREAT); an existing one is
// checked as by Open.
func (s *Server) CreateOpen(ctx context.Context, in proto.CreateIn, want proto.Access) (attr, parent proto.Attr, cap []byte, err error) {
	open := want != 0
	cl, err := s.caller(ctx)
	if err != nil {
		return proto.Attr{}, proto.Attr{}, nil, err
	}
	c := &Command{Op: OpCreate, Now: s.now(), Ino: s.allocIno(), Gen: newGen(), Parent: in.Parent, Name: in.Name,
		Mode: in.Mode, Rdev: in.Rdev, Uid: in.Uid, Gid: in.Gid}
	cl.own(c)
	if in.Exclusive {
		c.Flags = createExclusive
	}
	if in.Layout != nil {
		l := in.Layout.Clone()
		c.Layout = &l
	}
	typ := in.Mode & syscall.S_IFMT
	if typ == 0 || typ == syscall.S_IFREG {
		s.placement(c)
	} else {
		open = false
	}
	seenHere := false // this server saw the request before (and counted its handle)
	if open {
		// The new inode number is never used before this command, so the
		// handle can be counted before it exists: it cannot be reclaimed
		// between the create and the count.
		s.mu.Lock()
		if err := s.checkSessionLocked(cl.sess); err != nil {
			s.mu.Unlock()
			return proto.Attr{}, proto.Attr{}, nil, err
		}
		// An unregistered (in-process) session keeps no request numbers:
		// its retries are taken to have come here.
		seenHere = s.sessions[cl.sess] == nil || s.seenLocked(cl.sess, cl.seq)
		s.countOpenLocked(cl.sess, c.Ino, want.Has(proto.AccessWrite))
		s.mu.Unlock()
	}
	r, err := s.proposeAs(ctx, cl, c)
	if err == nil {
		s.notePlaced(r.attr)
	}
	if !open {
		return r.attr, r.parent, nil, err
	}
	if err != nil || r.attr.Ino != c.Ino {
		s.release(cl.sess, c.Ino)
	}
	if err != nil {
		return proto.Attr{}, proto.Attr{}, nil, err
	}
	if r.dup {
		// A retry of a request that was applied: its first attempt
		// counted the handle, if it reached this server; if it reached
		// another (the leader before a failover), the handle is counted
		// here now.
		if !seenHere && r.attr.Ino != 0 {
			s.mu.Lock()
			s.countOpenLocked(cl.sess, r.attr.Ino, want.Has(proto.AccessWrite))
			s.mu.Unlock()
			// Another mount may have written and closed the new file
			// since the first attempt: a writer counted now drops its
			// copy, as Open does.
			if want.Has(proto.AccessWrite) {
				if err := s.dropWriterCopy(ctx, r.attr.Ino); err != nil {
					s.release(cl.sess, r.attr.Ino)
					return proto.Attr{}, proto.Attr{}, nil, err
				}
			}
		}
		cap, err := s.issue(ctx, &r.attr, want)
		return r.attr, r.parent, cap, err
	}
	if r.attr.Ino != c.Ino {
		// An existing file (not exclusive): open it as Open does. The
		// request's number was recorded above (seenLocked): Open must not
		// take this first attempt for a retry of itself, so it gets none
		// (a retry of this CreateOpen is answered above, as r.dup).
		a, cap, err := s.Open(proto.WithSeq(ctx, 0), r.attr.Ino, want)
		return a, r.parent, cap, err
	}
	if cap, err = s.issue(ctx, &r.attr, want); err != nil {
		s.release(cl.sess, c.Ino)
		return proto.Attr{}, proto.Attr{}, nil, err
	}
	return r.attr, r.parent, cap, nil
}

// Mkdir implements proto.MetaService.
func (s *Server) Mkdir(ctx context.Context, parent proto.Ino, name string, mode, uid, gid uint32) (proto.Attr, error) {
	cl, err := s.caller(ctx)
	if err != nil {
		return proto.Attr{}, err
	}
	c := &Command{Op: OpMkdir, Now: s.now(), Ino: s.allocIno(), Parent: parent, Name: name,
		Mode: mode, Uid: uid, Gid: gid}
	cl.own(c)
	r, err := s.proposeAs(ctx, cl, c)
	return r.attr, err
}

// Symlink implements proto.MetaService.
func (s *Server) Symlink(ctx context.Context, parent proto.Ino, name, target string, uid, gid uint32) (proto.Attr, error) {
	cl, err := s.caller(ctx)
	if err != nil {
		return proto.Attr{}, err
	}
	c := &Command{Op: OpSymlink, Now: s.now(), Ino: s.allocIno(), Parent: parent, Name: name,
		Text: target, Uid: uid, Gid: gid}
	cl.own(c)
	r, err := s.proposeAs(ctx, cl, c)
	return r.attr, err
}

// Link implements proto.MetaService.
func (s *Server) Link(ctx context.Context, ino, newParent proto.Ino, newName string) (proto.Attr, error) {
	cl, err := s.caller(ctx)
	if err != nil {
		return proto.Attr{}, err
	}
	r, err := s.proposeAs(ctx, cl, &Command{Op: OpLink, Now: s.now(), Ino: ino, NewParent: newParent, NewName: newName, Cred: cl.cred})
	return r.attr, err
}

// Unlink implements proto.MetaService.
func (s *Server) Unlink(ctx context.Context, parent proto.Ino, name string) error {
	_, err := s.UnlinkAt(ctx, parent, name)
	return err
}

// UnlinkAt is Unlink that also returns the parent directory's attributes
// after the change. When the entry is the file's last link and nobody has
// it open, the file is reclaimed by the same command (no separate Reclaim
// command, no second sync): from the check until the command is applied,
// Open of the inode fails with ENOENT, as for any orphan being reclaimed.
func (s *Server) UnlinkAt(ctx context.Context, parent proto.Ino, name string) (proto.Attr, error) {
	cl, err := s.caller(ctx)
	if err != nil {
		return proto.Attr{}, err
	}
	c := &Command{Op: OpUnlink, Now: s.now(), Parent: parent, Name: name, Cred: cl.cred}
	cl.stamp(c)
	var reclaim proto.Ino
	r, err := s.proposePrepared(ctx, c, func(victims []proto.Ino) {
		// The name's inode (the lease victim, read once for both): if
		// this is its last link and nobody has it open, the command
		// reclaims it at once. In the grace period after a restart a
		// file may still be open by a client that has not re-registered
		// its handles yet: it is left an orphan, reclaimed at the end of
		// the grace period if nobody has it open. So is a file another
		// session holds a lease on (leaseTable.claimReclaim): it may
		// have opened the file from its cache (PinOpens); it pins those
		// opens before it acknowledges this unlink's break, and propose
		// reclaims the orphan after the breaks if nobody has it open.
		if len(victims) == 0 || s.inGrace() {
			return
		}
		n, err := s.readInode(victims[0])
		if err != nil || n.IsDir() || n.Nlink != 1 || !s.leases.claimReclaim(n.Ino, cl.sess) {
			return
		}
		s.mu.Lock()
		if s.opens[n.Ino] == 0 && !s.reclaiming[n.Ino] {
			s.reclaiming[n.Ino] = true
			c.Inos = []proto.Ino{n.Ino}
			reclaim = n.Ino
		}
		s.mu.Unlock()
		if reclaim == 0 {
			s.leases.unfence(n.Ino)
		}
	})
	if reclaim != 0 {
		s.mu.Lock()
		delete(s.reclaiming, reclaim)
		s.mu.Unlock()
		s.leases.unfence(reclaim)
	}
	return r.parent, err
}

// Rmdir implements proto.MetaService.
func (s *Server) Rmdir(ctx context.Context, parent proto.Ino, name string) error {
	_, err := s.RmdirAt(ctx, parent, name)
	return err
}

// RmdirAt is Rmdir that also returns the parent directory's attributes
// after the change.
func (s *Server) RmdirAt(ctx context.Context, parent proto.Ino, name string) (proto.Attr, error) {
	cl, err := s.caller(ctx)
	if err != nil {
		return proto.Attr{}, err
	}
	r, err := s.proposeAs(ctx, cl, &Command{Op: OpRmdir, Now: s.now(), Parent: parent, Name: name, Cred: cl.cred})
	return r.parent, err
}

// Rename implements proto.MetaService.
func (s *Server) Rename(ctx context.Context, oldParent proto.Ino, oldName string, newParent proto.Ino, newName string, flags uint32) error {
	cl, err := s.caller(ctx)
	if err != nil {
		return err
	}
	_, err = s.proposeAs(ctx, cl, &Command{Op: OpRename, Now: s.now(), Parent: oldParent, Name: oldName,
		NewParent: newParent, NewName: newName, Flags: flags, Cred: cl.cred})
	return err
}

// SetXattr implements proto.MetaService.
func (s *Server) SetXattr(ctx context.Context, ino proto.Ino, name string, value []byte, flags uint32) error {
	cl, err := s.caller(ctx)
	if err != nil {
		return err
	}
	if len(value) > MaxXattrValue {
		return errnof(syscall.E2BIG, "xattr value of %d bytes", len(value))
	}
	_, err = s.proposeAs(ctx, cl, &Command{Op: OpSetXattr, Now: s.now(), Ino: ino, Name: name, Value: value, Flags: flags, Cred: cl.cred})
	return err
}

// RemoveXattr implements proto.MetaService.
func (s *Server) RemoveXattr(ctx context.Context, ino proto.Ino, name string) error {
	cl, err := s.caller(ctx)
	if err != nil {
		return err
	}
	_, err = s.proposeAs(ctx, cl, &Command{Op: OpRemoveXattr, Now: s.now(), Ino: ino, Name: name, Cred: cl.cred})
	return err
}

// WriteDone implements proto.MetaService.
func (s *Server) WriteDone(ctx context.Context, ino proto.Ino, end uint64, mtime int64, blocks uint64) (proto.Attr, error) {
	cl, c, err := s.writeDoneCommand(ctx, ino, end, mtime, blocks)
	if err != nil {
		return proto.Attr{}, err
	}
	r, err := s.proposeAs(ctx, cl, c)
	return r.attr, err
}

// writeDoneCommand authorizes a WriteDone and returns its command.
func (s *Server) writeDoneCommand(ctx context.Context, ino proto.Ino, end uint64, mtime int64, blocks uint64) (caller, *Command, error) {
	cl, err := s.caller(ctx)
	if err != nil {
		return caller{}, nil, err
	}
	if err := s.handleSession(cl.sess); err != nil {
		return caller{}, nil, err
	}
	c := &Command{Op: OpWriteDone, Now: s.now(), Ino: ino, Size: end, Cred: cl.cred}
	if mtime != 0 {
		c.SetAttr = proto.SetAttrIn{Valid: proto.SetMtime, Mtime: mtime}
	}
	if blocks != proto.NoBlocks {
		c.Blocks = &blocks
	}
	if s.holdsWriteOpen(cl.sess, ino) {
		c.Flags |= writeViaHandle
	}
	return cl, c, nil
}

// MarkStale implements proto.StaleMarker: it records that the objects in
// slots of the file (generation gen) missed a write, so that no client
// reads them until they are repaired (ClearStale).
func (s *Server) MarkStale(ctx context.Context, ino proto.Ino, gen uint64, slots []uint32) (proto.Attr, error) {
	return s.staleOp(ctx, ino, gen, slots, 0, 0)
}

// ClearStale implements proto.StaleMarker: the objects in slots were
// repaired from a file whose mtime was mtime. It is refused (EBUSY) while
// any session holds the file open for writing or the rebuild repairs one
// of the slots in place, and by apply if the mtime changed: a write the
// repair may have missed.
func (s *Server) ClearStale(ctx context.Context, ino proto.Ino, gen uint64, slots []uint32, mtime int64) (proto.Attr, error) {
	if s.anyWriteOpen(ino) {
		return proto.Attr{}, errnof(syscall.EBUSY, "inode %d is open for writing: repair it when it is closed", ino)
	}
	return s.rb.clearStaleExclusive(ino, slots, func() (proto.Attr, error) {
		return s.staleOp(ctx, ino, gen, slots, staleClear, mtime)
	})
}

func (s *Server) staleOp(ctx context.Context, ino proto.Ino, gen uint64, slots []uint32, flags uint32, mtime int64) (proto.Attr, error) {
	cl, err := s.caller(ctx)
	if err != nil {
		return proto.Attr{}, err
	}
	if len(slots) == 0 || len(slots) > layout.MaxStripeCount {
		return proto.Attr{}, errnof(syscall.EINVAL, "%d slots", len(slots))
	}
	c := &Command{Op: OpStale, Now: s.now(), Ino: ino, Gen: gen, Flags: flags, Slots: slices.Clone(slots), Cred: cl.cred}
	c.SetAttr.Mtime = mtime // OpStale with staleClear: the mtime the repair started from
	if s.holdsWriteOpen(cl.sess, ino) {
		c.Flags |= writeViaHandle
	}
	if flags&staleClear == 0 {
		s.log.Warn("meta: objects marked stale (missed a write)", "ino", ino, "slots", slots)
	} else {
		s.log.Info("meta: stale objects repaired", "ino", ino, "slots", slots)
	}
	r, err := s.proposeAs(ctx, cl, c)
	return r.attr, err
}

// SetLayout implements proto.MetaService.
func (s *Server) SetLayout(ctx context.Context, ino proto.Ino, l layout.Layout) (proto.Attr, error) {
	cl, err := s.caller(ctx)
	if err != nil {
		return proto.Attr{}, err
	}
	l = l.Clone()
	c := &Command{Op: OpSetLayout, Now: s.now(), Ino: ino, Layout: &l, Cred: cl.cred}
	if len(l.Targets) == 0 || l.Kind != layout.RAID0 {
		// A protected directory default is checked against the
		// failure domains up now.
		s.placement(c)
	}
	r, err := s.proposeAs(ctx, cl, c)
	if err == nil {
		s.notePlaced(r.attr)
	}
	return r.attr, err
}

// RegisterTarget implements proto.TargetRegistry. A heartbeat that changes
// nothing persisted costs no command (and no probe).
//
// Only a storage server may register: a peer with another role gets EACCES
// (an unauthenticated one too, unless AllowUnauthenticated). A uuid belongs
// to the certificate name that first registered it; another name gets
// EPERM. Usage figures no real target reports get EINVAL. A new target, or
// a known one at a new address, is accepted only once the address answered
// a probe (EHOSTUNREACH otherwise). Every refusal is logged at warn with
// the peer's address, rate-limited.
func (s *Server) RegisterTarget(ctx context.Context, uuid string, info proto.TargetInfo) (proto.TargetID, error) {
	if s.replica != nil {
		// Heartbeats keep liveness in the leader's memory; a follower's
		// registry is not used.
		if err := s.leading(); err != nil {
			return 0, err
		}
	}
	who, err := s.registrant(ctx)
	if err == nil {
		err = checkUsage(info)
	}
	if err == nil && info.FSID != "" && s.FSID() != "" && info.FSID != s.FSID() {
		err = errnof(syscall.EPERM, "target %s belongs to file system %s, this is %s", uuid, info.FSID, s.FSID())
	}
	if err != nil {
		return 0, s.refuseRegistration(ctx, uuid, info, err)
	}
	if id, ok := s.reg.heartbeat(uuid, who, info); ok {
		return id, nil
	}
	addr, owner, known := s.reg.known(uuid)
	if known && !who.trusted && owner != "" && owner != who.name {
		// The state machine refuses it too; no need to probe first.
		return 0, s.refuseRegistration(ctx, uuid, info, errnof(syscall.EPERM, "target %s belongs to %q, not %q", uuid, owner, who.name))
	}
	if (!known || addr != info.Addr) && s.opts.Probe != nil {
		pctx, cancel := context.WithTimeout(ctx, s.opts.ProbeTimeout)
		perr := s.opts.Probe(pctx, info.Addr)
		cancel()
		if perr != nil {
			return 0, s.refuseRegistration(ctx, uuid, info, errnof(syscall.EHOSTUNREACH,
				"target %s: address %q did not answer a probe within %v (%v)", uuid, info.Addr, s.opts.ProbeTimeout, perr))
		}
	}
	c := &Command{Op: OpRegisterTarget, Now: s.now(), Text: uuid, Addr: info.Addr, TargetID: info.ID, Name: who.name}
	if who.trusted {
		c.Flags |= registerTrusted
	}
	r, err := s.propose(ctx, c)
	if err != nil {
		if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL) {
			s.refuseRegistration(ctx, uuid, info, err)
		}
		return 0, err
	}
	s.reg.registered(r.target, r.targetRec, info)
	s.log.Info("meta: target registered", "id", r.target, "uuid", uuid, "addr", info.Addr, "owner", r.targetRec.owner)
	return r.target, nil
}

// registrant authorizes the caller of RegisterTarget: a storage server, an
// unauthenticated peer if allowed, or an in-process caller.
func (s *Server) registrant(ctx context.Context) (registrant, error) {
	p, ok := transport.PeerFrom(ctx)
	switch {
	case !ok:
		return registrant{trusted: true}, nil
	case p.Role == transport.RoleStorage:
		return registrant{name: p.Name}, nil
	case p.Role == transport.RoleNone && s.opts.AllowUnauthenticated:
		return registrant{name: p.Name}, nil
	case p.Role == transport.RoleNone:
		return registrant{}, errnof(syscall.EACCES, "register target: the connection is not authenticated")
	}
	return registrant{}, errnof(syscall.EACCES, "register target: peer %q has role %q, not %q", p.Name, p.Role, transport.RoleStorage)
}

// refuse logs a refused registration (rate-limited) and returns err.
func (s *Server) refuseRegistration(ctx context.Context, uuid string, info proto.TargetInfo, err error) error {
	p, _ := transport.PeerFrom(ctx)
	s.refusals.Warn(s.log, "meta: target registration refused", "peer", p.Addr, "role", p.Role, "name", p.Name,
		"uuid", uuid, "addr", info.Addr, "err", err)
	return err
}

// ResolveTarget returns the address of a registered target, for the
// storage client that removes objects.
func (s *Server) ResolveTarget(ctx context.Context, id proto.TargetID) (string, error) {
	addr, ok := s.reg.addr(id)
	if !ok {
		return "", errnof(syscall.ENOENT, "target %d is not registered", id)
	}
	return addr, nil
}
