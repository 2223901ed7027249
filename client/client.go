package client

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/weft-fs/weft/internal/bufpool"
	"github.com/weft-fs/weft/layout"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/transport"
)

// Config configures a Client.
type Config struct {
	// MetaAddr is host:port of the metadata server (used by New only).
	MetaAddr string
	// Timeout bounds every RPC; 0 means DefaultTimeout.
	Timeout time.Duration
	// CacheLimit bounds the bytes held by write-behind and read-ahead buffers
	// across all files; 0 means DefaultCacheLimit.
	CacheLimit uint64
	// Logger receives warnings (failed background writes); nil means discard.
	Logger *slog.Logger
	// LogLevel, if set, is Logger's level: the run-time parameter
	// log.level.client sets it (params.go), "" back to DefaultLogLevel.
	LogLevel        *slog.LevelVar
	DefaultLogLevel slog.Level
	// Transport carries the RPCs made by New; nil means TCP.
	Transport transport.Transport
	// MirrorGrace is how long the other copies of a mirrored file's
	// write, or a read from one copy, are waited for once one copy
	// answered (or before another copy is tried) before they are counted
	// as failed (mirror.go); 0 means DefaultMirrorGrace.
	MirrorGrace time.Duration
	// Leases makes the client cache lookups (found or not) and attributes
	// under metadata leases from the metadata leader, which tells it of
	// every change made elsewhere before acknowledging that change
	// (leases.go; docs/caching.md). Needs a service with sessions and
	// leases (metarpc.Client); ignored otherwise.
	Leases bool
	// NoLocalReads turns off short-circuit local reads (used by New
	// only): by default, objects of storage servers on this host that
	// offer a local socket are read from their files, every block checked
	// (package storage/localread; docs/performance.md).
	NoLocalReads bool
	// BufferedLocalReads reads every local object through this host's
	// page cache, large reads too (by default they bypass it:
	// localread.Options.DirectMin).
	BufferedLocalReads bool
}

const (
	// DefaultTimeout is the RPC timeout when Config.Timeout is 0.
	DefaultTimeout = 30 * time.Second
	// DefaultCacheLimit is the memory budget when Config.CacheLimit is 0.
	DefaultCacheLimit = 1 << 30
	// maxFileInflight bounds the write-behind bytes of one file: enough to
	// keep several targets busy with a sequential stream of 1 MiB writes.
	maxFileInflight = 16 << 20
	// readDirBatch is how many entries one ReadDir RPC asks for.
	readDirBatch = 1000
)

func (c Config) withDefaults() Config {
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.CacheLimit == 0 {
		c.CacheLimit = DefaultCacheLimit
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Client is a weft client: namespace operations go to the metadata service,
// file data goes straight to the storage targets named by each file's layout.
// It is safe for concurrent use.
type Client struct {
	cfg     Config
	log     *slog.Logger
	meta    proto.MetaService
	storage proto.StorageService
	budget  *budget
	perFile atomic.Uint64 // write-behind bytes one file may hold: min(maxFileInflight, the budget)
	bufs    *bufpool.Pool
	params  clientParams // run-time parameters (params.go)

	// base is the parent context of background writes; cancelled by Close
	// after they drained.
	base   context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // background writes
	// noFollow: the metadata service answered a follow with ENOSYS (a
	// server from before it): capabilities are renewed with Capability.
	noFollow atomic.Bool
	// noPins: the metadata service takes no pins of opens made from the
	// lease cache (cached.go), so none are made.
	noPins atomic.Bool
	// pinner pins opens made from the lease cache (cached.go); nil: none
	// are made.
	pinner proto.LeasePinner
	// cachedOpens and pinnedOpens count the opens made from the lease
	// cache and the handles of them pinned (CachedOpens).
	cachedOpens, pinnedOpens atomic.Uint64
	// removing counts this client's removals and replacements of names
	// under way: no open is made from the cache meanwhile (cached.go).
	removing atomic.Int32
	// now is the clock of migrate's ticket renewals (time.Now; tests
	// move it with the metadata server's).
	now func() time.Time

	mu    sync.Mutex
	open  map[proto.Ino]*inodeState // inodes with open handles (or an ongoing truncate)
	close []func() error            // released by Close, in order

	// ext is the metadata service's combined operations, copies its
	// copies of small files (copies.go).
	ext    optional[extended]
	copies optional[proto.FileCopies]
	// lookupCopies: lookups that bring small files' copies, asked for
	// while demand says opens follow lookups (lookupcopy.go).
	lookupCopies optional[proto.LookupCopier]
	demand       copyDemand
	// copiesAhead: the copies of the files after one opened, brought
	// while ahead says they are being opened (ahead.go).
	copiesAhead optional[proto.CopyPrefetcher]
	ahead       aheadDemand
	// statahead lists a directory whose names miss the cache one after
	// another (statahead.go).
	statahead statahead
	changes   [changeShards]atomic.Uint64 // copies.go
	rel       releaser
	// sess keeps the metadata session alive (session.go); nil when the
	// service has no client-chosen sessions (an in-process server).
	sess *session
	// locker is the metadata service's lock manager and atomic append
	// (locks.go), nil if it has none; locks is what this client holds.
	locker proto.LockService
	locks  lockBook

	// suspects maps a target to when a request to it failed last
	// (mirror.go): reads try its copies last for a while.
	suspects sync.Map

	// rows and coders serve erasure-coded files (ec.go).
	rows   rowLocks
	coders sync.Map // [2]uint8{k, m} -> reedsolomon.Encoder

	// leases caches lookups and attributes under metadata leases
	// (leases.go); nil without Config.Leases. leasesDone is closed when
	// its poll loop ended.
	leases     *leaseCache
	leasesDone chan struct{}
}

// extended is what a metadata service may offer beyond proto.MetaService
// to save round trips (metarpc.Extended; meta.Server has it too).
type extended interface {
	CreateOpen(ctx context.Context, in proto.CreateIn, want proto.Access) (attr, parent proto.Attr, cap []byte, err error)
	UnlinkAt(ctx context.Context, parent proto.Ino, name string) (proto.Attr, error)
	RmdirAt(ctx context.Context, parent proto.Ino, name string) (proto.Attr, error)
	ReleaseMany(ctx context.Context, inos []proto.Ino) error
}

// optional is operations a metadata service may offer beyond
// proto.MetaService (an interface T it implements): used until the server
// answers one of them with ENOSYS (an older server behind the same
// client: the client then does without them).
type optional[T any] struct {
	svc   T
	has   bool
	noSys atomic.Bool
}

// offer records the service's operations, if it has them.
func (o *optional[T]) offer(svc any) { o.svc, o.has = svc.(T) }

// get returns the operations if they are usable.
func (o *optional[T]) get() (T, bool) {
	if !o.has || o.noSys.Load() {
		var none T
		return none, false
	}
	return o.svc, true
}

// lacks reports whether err says the server lacks the operations, and
// then stops using them.
func (o *optional[T]) lacks(err error) bool {
	if errors.Is(err, syscall.ENOSYS) {
		o.noSys.Store(true)
		return true
	}
	return false
}

// NewWithServices returns a client over the given services (RPC stubs in
// production, fakes in tests). Close does not close the services.
func NewWithServices(meta proto.MetaService, storage proto.StorageService, cfg Config) *Client {
	cfg = cfg.withDefaults()
	base, cancel := context.WithCancel(context.Background())
	c := &Client{
		bufs:    newBufPool(),
		cfg:     cfg,
		log:     cfg.Logger,
		meta:    meta,
		storage: storage,
		budget:  newBudget(cfg.CacheLimit),
		base:    base,
		cancel:  cancel,
		open:    map[proto.Ino]*inodeState{},
		now:     time.Now,
	}
	c.perFile.Store(min(maxFileInflight, cfg.CacheLimit))
	c.rows.seed = maphash.MakeSeed()
	c.locker, _ = meta.(proto.LockService)
	c.copies.offer(meta)
	c.lookupCopies.offer(meta)
	c.copiesAhead.offer(meta)
	c.locks.init()
	c.ext.offer(meta)
	if _, ok := c.ext.get(); ok {
		// Releases go out in the background, batched (see releaser); the
		// services without ReleaseMany keep synchronous releases.
		c.rel.c, c.rel.base = c, meta
		c.rel.idle.L = &c.rel.mu
		c.meta = releasingMeta{meta, &c.rel}
	}
	if svc, ok := meta.(sessionService); ok {
		// Last: its goroutine reads c.meta (the run-time parameters).
		c.sess = newSession(c, svc)
		if ls, ok := meta.(proto.LeaseService); ok && cfg.Leases {
			c.leases = newLeaseCache(ls, c.log)
			c.pinner, _ = meta.(proto.LeasePinner)
			c.leases.beforeAck = c.pinInvalidated
			c.leasesDone = make(chan struct{})
			go func() {
				defer close(c.leasesDone)
				c.leases.run(c.base, c.cfg.Timeout)
			}()
		}
	}
	return c
}

// Close sends the writes still buffered, waits for background writes to
// finish (each is bounded by the RPC timeout) and releases the connections.
// Open files are not flushed (no WriteDone, no errors reported): the caller
// closes them first.
func (c *Client) Close() error {
	c.mu.Lock()
	for _, st := range c.open {
		st.mu.Lock()
		st.pushAllLocked()
		st.stopTimerLocked()
		st.mu.Unlock()
		st.stopCaps()
	}
	c.mu.Unlock()
	c.wg.Wait()
	c.rel.drain()
	c.cancel()
	if c.leasesDone != nil {
		<-c.leasesDone
	}
	var errs []error
	if c.sess != nil {
		errs = append(errs, c.sess.close())
	}
	for _, f := range c.close {
		errs = append(errs, f())
	}
	return errors.Join(errs...)
}

// Config returns the effective configuration (defaults filled in).
func (c *Client) Config() Config { return c.cfg }

// rpcCtx bounds one RPC by the configured timeout. It is deliberately
// detached from the caller's cancellation: FUSE interrupts (which the Go
// runtime's preemption signals provoke all the time in the calling process)
// must not abort an operation halfway through, but nothing may hang longer
// than the timeout either. Its timer starts only when something waits on
// it (lazyDeadline): a read served from a local file never does.
func (c *Client) rpcCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return withLazyDeadline(context.WithoutCancel(ctx), c.cfg.Timeout)
}

// Errno maps an error from the client to the errno to give the kernel: the
// syscall.Errno it wraps, or EIO (and ok=false, so the caller logs it).
func Errno(err error) (errno syscall.Errno, ok bool) {
	if err == nil {
		return 0, true
	}
	if errors.As(err, &errno) {
		if errno == 0 {
			return syscall.EIO, false
		}
		return errno, true
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return syscall.ETIMEDOUT, true
	}
	return syscall.EIO, false
}

// merge overlays what this mount knows and the server does not yet: the size
// and mtime of writes not yet recorded by WriteDone. It also refreshes the
// open state's view of the server's size.
func (c *Client) merge(a *proto.Attr) {
	if !a.IsRegular() {
		return
	}
	c.mu.Lock()
	st := c.open[a.Ino]
	c.mu.Unlock()
	switch {
	case st == nil:
	case st.gen == a.Gen:
		st.mergeAttr(a)
	case a.Gen != 0:
		st.moved.Store(a.Gen) // its handles ask to follow (follow.go)
	}
}

// Lookup finds name in parent.
func (c *Client) Lookup(ctx context.Context, parent proto.Ino, name string) (proto.Attr, error) {
	var s0 uint64
	if c.leases != nil {
		a, found, ok := c.leases.lookup(parent, name)
		switch {
		case ok && found:
			c.merge(&a)
			return a, nil
		case ok:
			return proto.Attr{}, fmt.Errorf("client: no entry %q in %d (cached): %w", name, parent, syscall.ENOENT)
		}
		s0 = c.leases.begin()
	}
	ctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	a, data, openable, err := c.lookupMeta(ctx, parent, name)
	if c.leases != nil {
		switch {
		case err == nil:
			c.leases.putLookupCopy(s0, parent, name, a, data, openable)
			c.demand.looked(&a)
		case errors.Is(err, syscall.ENOENT):
			c.leases.putLookup(s0, parent, name, proto.Attr{})
		}
		if (err == nil || errors.Is(err, syscall.ENOENT)) && c.leases.trusted() {
			moved := func(s0 uint64) bool { return c.leases.moved(s0, parent) }
			if after, ok := c.statahead.missed(parent, err == nil, moved); ok {
				c.listAhead(ctx, parent, after)
			}
		}
	}
	if err == nil {
		c.merge(&a)
	}
	return a, err
}

// GetAttr returns ino's attributes, including the size of writes this mount
// has acknowledged but not yet reported to the metadata server.
func (c *Client) GetAttr(ctx context.Context, ino proto.Ino) (proto.Attr, error) {
	var s0 uint64
	if c.leases != nil {
		if a, ok := c.leases.getAttr(ino); ok {
			c.merge(&a)
			return a, nil
		}
		s0 = c.leases.begin()
	}
	ctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	a, err := c.meta.GetAttr(ctx, ino)
	if err == nil {
		if c.leases != nil {
			c.leases.putAttr(s0, a)
		}
		c.merge(&a)
	}
	return a, err
}

// SetAttr changes attributes. A size change waits for this mount's
// outstanding writes to the file, truncates (or extends) every object on its
// target, then records the new size on the metadata server.
//
// A time set (utimensat, futimens, utime) first records this mount's
// accepted writes to the file on the metadata server (inodeState.settle),
// so that the times it sets are the ones stat shows afterwards: writes
// buffered before it can no longer move its mtime at close.
func (c *Client) SetAttr(ctx context.Context, ino proto.Ino, in proto.SetAttrIn) (proto.Attr, error) {
	if in.Valid&(proto.SetMtime|proto.SetMtimeNow) != 0 {
		if err := c.settle(ctx, ino); err != nil {
			return proto.Attr{}, err
		}
	}
	if in.Valid&proto.SetSize != 0 {
		return c.truncate(ctx, ino, in)
	}
	ctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	a, err := c.setAttr(ctx, ino, in)
	if err == nil {
		c.merge(&a)
	}
	return a, err
}

// settle records this mount's accepted writes to ino, if it has the file
// open (see inodeState.settle).
func (c *Client) settle(ctx context.Context, ino proto.Ino) error {
	c.mu.Lock()
	st := c.open[ino]
	if st != nil {
		st.refs++
	}
	c.mu.Unlock()
	if st == nil {
		return nil
	}
	defer c.unref(st)
	return st.settle(ctx, c.sessGen())
}

// setAttr is MetaService.SetAttr; through a handle (proto.SetHandle) it
// needs the current session: if the server forgot it, the session is
// recovered, and the call fails with ESTALE if that made a new one (the
// handle is gone).
func (c *Client) setAttr(ctx context.Context, ino proto.Ino, in proto.SetAttrIn) (a proto.Attr, err error) {
	defer c.changing(0, "", ino)()
	if in.Valid&proto.SetHandle == 0 {
		return c.meta.SetAttr(ctx, ino, in)
	}
	err = c.handleCall(ctx, ino, c.sessGen(), func() (err error) {
		a, err = c.meta.SetAttr(ctx, ino, in)
		return err
	})
	return a, err
}

func (c *Client) truncate(ctx context.Context, ino proto.Ino, in proto.SetAttrIn) (proto.Attr, error) {
	a, err := c.truncateOnce(ctx, ino, in, true)
	if errors.Is(err, errMoved) {
		// The file's state here is of a generation a restripe replaced
		// (only readers that have not followed yet hold it): truncate
		// the current objects, as by path (follow.go).
		a, err = c.truncateOnce(ctx, ino, in, false)
	}
	return a, err
}

// truncateOnce is truncate, through the file's open state here if useOpen
// and there is one.
func (c *Client) truncateOnce(ctx context.Context, ino proto.Ino, in proto.SetAttrIn, useOpen bool) (proto.Attr, error) {
	var st *inodeState
	if useOpen {
		c.mu.Lock()
		st = c.open[ino]
		if st != nil {
			st.refs++
		}
		c.mu.Unlock()
	}
	if st != nil && st.caps.write.Load() == nil {
		// Only readers hold the file here: their state may be of a
		// generation a restripe replaced (nobody can restripe a file
		// open for writing). Truncate the file's current objects.
		if a, err := c.GetAttr(ctx, ino); err == nil && a.Gen != st.gen {
			c.unref(st)
			return c.truncateOnce(ctx, ino, in, false)
		}
	}

	var l layout.Layout
	capSt := st // whose capabilities the truncate uses
	if st != nil {
		defer c.unref(st)
		l = st.beginTruncate()
		defer st.endTruncate()
	} else {
		a, err := c.GetAttr(ctx, ino)
		if err != nil {
			return proto.Attr{}, err
		}
		if a.IsDir() {
			return proto.Attr{}, syscall.EISDIR
		}
		l = a.Layout
		if len(l.Targets) > 0 {
			// Truncate by path: no handle, so no capability yet; the
			// metadata server checks write permission and grants one.
			capSt = &inodeState{c: c, ino: ino, gen: a.Gen}
			defer capSt.stopCaps()
			if _, err := capSt.renewCap(ctx, proto.AccessWrite, nil); err != nil {
				return proto.Attr{}, err
			}
		}
	}
	if len(l.Targets) > 0 {
		if err := c.truncateObjects(ctx, capSt, l, in.Size); err != nil {
			return proto.Attr{}, err
		}
	}
	rctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	a, err := c.setAttr(rctx, ino, in)
	if err != nil {
		return proto.Attr{}, err
	}
	if st != nil {
		st.truncated(&a, in.Size)
	}
	return a, nil
}

func (c *Client) truncateObjects(ctx context.Context, st *inodeState, l layout.Layout, size uint64) error {
	defer st.changingAllocation()()
	ctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	if l.Kind == layout.EC {
		return c.ecTruncate(ctx, st, l, size)
	}
	return parallel(int(l.StripeCount), func(s int) error {
		return c.onStripe(ctx, st, l, s, "truncate", func(ctx context.Context, t proto.TargetID, obj proto.ObjectID) error {
			return st.withCap(ctx, proto.AccessWrite, func(ctx context.Context) error {
				return c.storage.Truncate(ctx, t, obj, l.ObjectSize(size, s))
			})
		})
	})
}

// Create makes a regular file, fifo, socket or device node.
func (c *Client) Create(ctx context.Context, in proto.CreateIn) (proto.Attr, error) {
	s0 := c.creating(in.Parent, in.Name)
	ctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	a, err := c.meta.Create(ctx, in)
	c.created(s0, in.Parent, in.Name, a, err)
	if err == nil {
		c.merge(&a)
	}
	return a, err
}

// CreateOpen creates a regular file (or returns the existing one if
// in.Exclusive is not set) and opens it for want (see OpenAccess), in one
// round trip when the server offers it. It also returns the parent
// directory's attributes after the change, or a zero Attr if the server
// did not say.
func (c *Client) CreateOpen(ctx context.Context, in proto.CreateIn, want proto.Access) (*File, proto.Attr, proto.Attr, error) {
	if x, ok := c.ext.get(); ok {
		rctx, cancel := c.rpcCtx(ctx)
		var (
			a, p proto.Attr
			cap  []byte
		)
		s0 := c.creating(in.Parent, in.Name)
		gen, err := c.withSession(rctx, func() (err error) {
			a, p, cap, err = x.CreateOpen(rctx, in, want)
			return err
		})
		c.created(s0, in.Parent, in.Name, a, err)
		cancel()
		if err == nil {
			if a.IsDir() {
				return nil, proto.Attr{}, proto.Attr{}, syscall.EISDIR
			}
			return c.newFile(ctx, &a, cap, nil, 0, want, gen), a, p, nil
		}
		if !c.ext.lacks(err) {
			return nil, proto.Attr{}, proto.Attr{}, err
		}
	}
	a, err := c.Create(ctx, in)
	if err != nil {
		return nil, proto.Attr{}, proto.Attr{}, err
	}
	if a.IsDir() {
		return nil, proto.Attr{}, proto.Attr{}, syscall.EISDIR
	}
	f, oa, err := c.Open(ctx, a.Ino, want)
	if err != nil {
		return nil, proto.Attr{}, proto.Attr{}, err
	}
	return f, oa, proto.Attr{}, nil
}

// Mkdir makes a directory.
func (c *Client) Mkdir(ctx context.Context, parent proto.Ino, name string, mode, uid, gid uint32) (proto.Attr, error) {
	s0 := c.creating(parent, name)
	ctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	a, err := c.meta.Mkdir(ctx, parent, name, mode, uid, gid)
	c.created(s0, parent, name, a, err)
	if err == nil {
		c.madeDir(s0, a)
	}
	return a, err
}

// Symlink makes a symbolic link.
func (c *Client) Symlink(ctx context.Context, parent proto.Ino, name, target string, uid, gid uint32) (proto.Attr, error) {
	s0 := c.creating(parent, name)
	ctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	a, err := c.meta.Symlink(ctx, parent, name, target, uid, gid)
	c.created(s0, parent, name, a, err)
	return a, err
}

// Readlink returns a symlink's target.
func (c *Client) Readlink(ctx context.Context, ino proto.Ino) (string, error) {
	ctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	return c.meta.Readlink(ctx, ino)
}

// Link makes a hard link.
func (c *Client) Link(ctx context.Context, ino, newParent proto.Ino, newName string) (proto.Attr, error) {
	defer c.changing(newParent, newName, ino)()
	ctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	a, err := c.meta.Link(ctx, ino, newParent, newName)
	if err == nil {
		c.merge(&a)
	}
	return a, err
}

// Unlink removes a non-directory entry. Open handles keep the file alive.
func (c *Client) Unlink(ctx context.Context, parent proto.Ino, name string) error {
	_, err := c.UnlinkAt(ctx, parent, name)
	return err
}

// UnlinkAt is Unlink that also returns the parent directory's attributes
// after the change (a zero Attr if the server did not say).
func (c *Client) UnlinkAt(ctx context.Context, parent proto.Ino, name string) (proto.Attr, error) {
	c.rel.flush()
	defer c.removingName(ctx)() // this change is not broken to this client (cached.go)
	defer c.changing(parent, name)()
	ctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	if x, ok := c.ext.get(); ok {
		p, err := x.UnlinkAt(ctx, parent, name)
		if !c.ext.lacks(err) {
			return p, err
		}
	}
	return proto.Attr{}, c.meta.Unlink(ctx, parent, name)
}

// Rmdir removes an empty directory.
func (c *Client) Rmdir(ctx context.Context, parent proto.Ino, name string) error {
	_, err := c.RmdirAt(ctx, parent, name)
	return err
}

// RmdirAt is Rmdir that also returns the parent directory's attributes
// after the change (a zero Attr if the server did not say).
func (c *Client) RmdirAt(ctx context.Context, parent proto.Ino, name string) (proto.Attr, error) {
	defer c.changing(parent, name)()
	ctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	if x, ok := c.ext.get(); ok {
		p, err := x.RmdirAt(ctx, parent, name)
		if !c.ext.lacks(err) {
			return p, err
		}
	}
	return proto.Attr{}, c.meta.Rmdir(ctx, parent, name)
}

// Rename renames an entry; flags as in renameat2(2).
func (c *Client) Rename(ctx context.Context, oldParent proto.Ino, oldName string, newParent proto.Ino, newName string, flags uint32) error {
	c.rel.flush()
	defer c.removingName(ctx)() // it may replace a file's last name (cached.go)
	defer c.changing(oldParent, oldName)()
	defer c.changing(newParent, newName)()
	ctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	return c.meta.Rename(ctx, oldParent, oldName, newParent, newName, flags)
}

// ReadDir returns the next batch (up to max; 0 means a default batch) of
// entries after the name `after`. An empty result is the end.
func (c *Client) ReadDir(ctx context.Context, dir proto.Ino, after string, max int) ([]proto.DirEntry, error) {
	if max <= 0 {
		max = readDirBatch
	}
	ctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	ents, err := c.meta.ReadDir(ctx, dir, after, max)
	for i := range ents {
		c.merge(&ents[i].Attr)
	}
	return ents, err
}

// GetXattr returns an extended attribute.
func (c *Client) GetXattr(ctx context.Context, ino proto.Ino, name string) ([]byte, error) {
	ctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	return c.meta.GetXattr(ctx, ino, name)
}

// SetXattr sets an extended attribute.
func (c *Client) SetXattr(ctx context.Context, ino proto.Ino, name string, value []byte, flags uint32) error {
	defer c.changing(0, "", ino)()
	ctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	return c.meta.SetXattr(ctx, ino, name, value, flags)
}

// ListXattr lists extended attribute names.
func (c *Client) ListXattr(ctx context.Context, ino proto.Ino) ([]string, error) {
	ctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	return c.meta.ListXattr(ctx, ino)
}

// RemoveXattr removes an extended attribute.
func (c *Client) RemoveXattr(ctx context.Context, ino proto.Ino, name string) error {
	defer c.changing(0, "", ino)()
	ctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	return c.meta.RemoveXattr(ctx, ino, name)
}

// SetLayout sets a directory's default layout or an empty file's layout. An
// open handle on this mount picks up the new layout for its first write.
func (c *Client) SetLayout(ctx context.Context, ino proto.Ino, l layout.Layout) (proto.Attr, error) {
	defer c.changing(0, "", ino)()
	rctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	a, err := c.meta.SetLayout(rctx, ino, l)
	if err != nil {
		return a, err
	}
	c.mu.Lock()
	st := c.open[ino]
	c.mu.Unlock()
	if st != nil {
		st.setLayout(a.Layout)
	}
	return a, nil
}

// StatFS returns filesystem-wide usage.
func (c *Client) StatFS(ctx context.Context) (proto.StatFS, error) {
	ctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	return c.meta.StatFS(ctx)
}

// Targets lists the storage targets.
func (c *Client) Targets(ctx context.Context) ([]proto.TargetInfo, error) {
	ctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	return c.meta.Targets(ctx)
}

// parallel runs f(0..n-1), concurrently when n > 1, and returns the first
// error.
func parallel(n int, f func(i int) error) error {
	if n == 1 {
		return f(0)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = f(i) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// releasingMeta is the metadata service with Release made asynchronous:
// the handle is queued and the releaser sends it, batched with others, in
// the background. The server therefore drops an open count a moment after
// the close, never before it, so a file unlinked while open here is still
// kept until its last handle is closed.
type releasingMeta struct {
	proto.MetaService
	rel *releaser
}

func (m releasingMeta) Release(_ context.Context, ino proto.Ino) error {
	m.rel.add(ino)
	return nil
}

// maxReleaseBatch bounds the handles one ReleaseMany carries.
const maxReleaseBatch = 1024

// releaseLinger is how long the first of a few queued releases waits for
// more closes to share its ReleaseMany; releaseNow queued releases go out
// at once. Without the wait, files created and closed one after another
// (mdtest, untar) cost a release round trip each, a third of the round
// trips of a create.
const (
	releaseLinger = 2 * time.Millisecond
	releaseNow    = 64
)

// releaser sends queued releases with ReleaseMany from one goroutine at a
// time: it lets releaseLinger pass for others to join, and while one batch
// is on the wire the next one collects, so a burst of closes costs a few
// round trips. Unlink and Rename send the queue first (flush), so that a
// file closed here a moment before is not left an orphan by them (to be
// reclaimed by a separate command) just because its release was waiting.
type releaser struct {
	c       *Client
	base    proto.MetaService // the service without releasingMeta
	mu      sync.Mutex
	queue   []proto.Ino
	running bool
	sending int       // flushes under way
	idle    sync.Cond // signalled when running goes false or a flush ends
}

// flush sends the queued releases now, on the caller's goroutine.
func (r *releaser) flush() {
	if r.c == nil {
		return
	}
	r.mu.Lock()
	batch := r.queue
	r.queue = nil
	if len(batch) == 0 {
		r.mu.Unlock()
		return
	}
	r.sending++
	r.mu.Unlock()
	for len(batch) > 0 {
		n := min(len(batch), maxReleaseBatch)
		r.send(batch[:n])
		batch = batch[n:]
	}
	r.mu.Lock()
	r.sending--
	r.idle.Broadcast()
	r.mu.Unlock()
}

func (r *releaser) add(ino proto.Ino) {
	r.mu.Lock()
	r.queue = append(r.queue, ino)
	if r.running {
		r.mu.Unlock()
		return
	}
	r.running = true
	r.mu.Unlock()
	go r.run()
}

func (r *releaser) run() {
	r.mu.Lock()
	few := len(r.queue) < releaseNow
	r.mu.Unlock()
	if few {
		time.Sleep(releaseLinger)
	}
	for {
		r.mu.Lock()
		n := min(len(r.queue), maxReleaseBatch)
		if n == 0 {
			r.running = false
			r.idle.Broadcast()
			r.mu.Unlock()
			return
		}
		batch := append([]proto.Ino(nil), r.queue[:n]...)
		r.queue = r.queue[n:]
		r.mu.Unlock()
		r.send(batch)
	}
}

func (r *releaser) send(inos []proto.Ino) {
	c := r.c
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Timeout)
	defer cancel()
	var err error
	if x, ok := c.ext.get(); ok {
		err = x.ReleaseMany(ctx, inos)
		if !c.ext.lacks(err) {
			if errors.Is(err, syscall.ESTALE) && c.sess != nil {
				// The server dropped the session, and these handles
				// with it; the renewal loop recovers the session.
				c.log.Debug("release in a session the server forgot", "handles", len(inos), "err", err)
			} else if err != nil {
				c.log.Warn("release failed", "handles", len(inos), "err", err)
			}
			return
		}
	}
	for _, ino := range inos {
		if err := r.base.Release(ctx, ino); err != nil {
			c.log.Warn("release failed", "ino", ino, "err", err)
		}
	}
}

// dropQueued forgets the queued releases: handles of a session the server
// dropped.
func (r *releaser) dropQueued() {
	if r.c == nil {
		return
	}
	r.mu.Lock()
	r.queue = nil
	r.mu.Unlock()
}

// drain waits until every queued release has been sent.
func (r *releaser) drain() {
	if r.c == nil {
		return
	}
	r.mu.Lock()
	for r.running || len(r.queue) > 0 || r.sending > 0 {
		if !r.running && len(r.queue) > 0 {
			r.running = true
			go r.run()
		}
		r.idle.Wait()
	}
	r.mu.Unlock()
}
