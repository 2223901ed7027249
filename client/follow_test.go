package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/weft-fs/weft/layout"
	"github.com/weft-fs/weft/meta"
	"github.com/weft-fs/weft/meta/store"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/storage"
	"github.com/weft-fs/weft/storage/vfs"
)

// stepClock is the metadata server's clock in the restripe tests: it
// moves only when a test moves it.
type stepClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// migrateEnv is a real metadata server (in-memory store, clock moved by
// the test, object GC running) and three real targets behind a
// flakyStorage.
type migrateEnv struct {
	clock   *stepClock
	meta    *meta.Server
	storage *flakyStorage
}

func newMigrateEnv(t *testing.T, ticketLife time.Duration) *migrateEnv {
	t.Helper()
	fs := vfs.NewMem(1 << 30)
	ssrv := storage.NewServer()
	e := &migrateEnv{clock: &stepClock{now: time.Unix(1_800_000_000, 0)},
		storage: &flakyStorage{StorageService: ssrv, state: map[proto.TargetID]string{}}}
	st := store.NewMem()
	msrv, err := meta.New(meta.Options{Store: st, Storage: ssrv, Seed: 1, OrphanGrace: time.Hour, Now: e.clock.Now,
		CapabilityKey: bytes.Repeat([]byte{5}, 32), MovedObjectGrace: time.Hour, MigrateTicketLife: ticketLife,
		GCInterval: 10 * time.Millisecond, HeartbeatTimeout: 10000 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	e.meta = msrv
	var targets []*storage.Target
	t.Cleanup(func() {
		msrv.Close()
		st.Close()
		for _, tg := range targets {
			tg.Close()
		}
	})
	for i := range 3 {
		tg, err := storage.OpenTarget(fmt.Sprintf("/t%d", i), storage.TargetOptions{FS: fs})
		if err != nil {
			t.Fatal(err)
		}
		targets = append(targets, tg)
		id, err := msrv.RegisterTarget(context.Background(), tg.UUID(), proto.TargetInfo{Addr: fmt.Sprintf("server%d:1", i), Total: 1 << 30, Free: 1 << 30})
		if err != nil {
			t.Fatal(err)
		}
		if err := tg.SetID(id); err != nil {
			t.Fatal(err)
		}
		if err := ssrv.Add(tg); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// sessionMeta is the in-process metadata server as one client's session:
// each client's handles are counted apart, as the mounts' are (a handle
// opened for writing by one does not make another's read handle count
// as a writer).
type sessionMeta struct {
	*meta.Server
	id proto.SessionID
}

func (m sessionMeta) Open(ctx context.Context, ino proto.Ino, want proto.Access) (proto.Attr, []byte, error) {
	return m.Server.Open(proto.WithSession(ctx, m.id), ino, want)
}

func (m sessionMeta) CreateOpen(ctx context.Context, in proto.CreateIn, want proto.Access) (proto.Attr, proto.Attr, []byte, error) {
	return m.Server.CreateOpen(proto.WithSession(ctx, m.id), in, want)
}

func (m sessionMeta) Release(ctx context.Context, ino proto.Ino) error {
	return m.Server.Release(proto.WithSession(ctx, m.id), ino)
}

func (m sessionMeta) ReleaseMany(ctx context.Context, inos []proto.Ino) error {
	return m.Server.ReleaseMany(proto.WithSession(ctx, m.id), inos)
}

func (e *migrateEnv) client(t *testing.T) *Client {
	t.Helper()
	c := NewWithServices(sessionMeta{e.meta, proto.NewSessionID()}, e.storage, Config{})
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return c
}

// writeFile creates name with data through c and closes it.
func writeFile(t *testing.T, c *Client, name string, data []byte) proto.Attr {
	t.Helper()
	ctx := context.Background()
	a, err := c.Create(ctx, proto.CreateIn{Parent: proto.RootIno, Name: name, Mode: syscall.S_IFREG | 0o644, Exclusive: true})
	if err != nil {
		t.Fatal(err)
	}
	f, _, err := c.Open(ctx, a.Ino, proto.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, f, data, 0)
	if err := f.Release(ctx); err != nil {
		t.Fatal(err)
	}
	return a
}

// waitGCGone waits until no object of generation gen of ino is queued for
// removal: the GC removed them all.
func (e *migrateEnv) waitGCGone(t *testing.T, ino proto.Ino, gen uint64) {
	t.Helper()
	waitUntil(t, "the old objects' removal", func() bool {
		q, err := e.meta.GCQueue()
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range q {
			if o.Obj.Ino == ino && o.Obj.Gen == gen {
				return false
			}
		}
		return true
	})
}

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(r.Uint32() | 1) // no zero byte: a hole read shows
	}
	return p
}

// TestOpenHandleFollowsMigrate: a handle opened before restripes reads
// the right bytes at every step: through its old objects while they
// last; after a stat here names the new generation; after another
// client wrote through the new layout (once a stat here showed the
// change, the handle reads the new bytes, not its old objects); and after
// the grace removed its objects (the read finds them gone, follows and
// reads again). Each follow moves the handle to the new generation.
func TestOpenHandleFollowsMigrate(t *testing.T) {
	e := newMigrateEnv(t, time.Hour)
	ctx := context.Background()
	reader, other := e.client(t), e.client(t)
	data := randomBytes(3<<20+777, 1)
	a := writeFile(t, other, "f", data)
	f, _, err := reader.Open(ctx, a.Ino, proto.AccessRead)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Release(ctx)
	check := func(what string, want []byte) {
		t.Helper()
		// Several sizes and offsets, sequential ones too (read-ahead).
		for _, r := range [][2]int{{0, 4096}, {4096, 1 << 20}, {1<<20 + 4096, 1 << 20}, {2<<20 + 4096, len(want) - (2<<20 + 4096)}, {100, 3 << 20}} {
			if got := mustRead(t, f, uint64(r[0]), r[1]); !bytes.Equal(got, want[r[0]:r[0]+r[1]]) {
				t.Fatalf("%s: [%d,+%d) read wrong bytes", what, r[0], r[1])
			}
		}
	}
	check("before", data)
	gen0 := f.state().gen

	// 1. Restriped; the old objects are still there: the handle reads
	// them until it hears of the new generation (a stat), then follows.
	na, err := other.Migrate(ctx, a.Ino, layout.Layout{Kind: layout.RAID0, StripeSize: 64 << 10, StripeCount: 3})
	if err != nil {
		t.Fatal(err)
	}
	check("after the commit", data)
	if _, err := reader.GetAttr(ctx, a.Ino); err != nil {
		t.Fatal(err)
	}
	check("after a stat named the new generation", data)
	if g := f.state().gen; g != na.Gen {
		t.Fatalf("after a stat the handle reads generation %#x, want the new %#x (was %#x)", g, na.Gen, gen0)
	}

	// 2. Restriped again, then another client writes through the new
	// layout: once a stat here shows it, the handle reads the new bytes.
	gen1 := na.Gen
	na, err = other.Migrate(ctx, a.Ino, layout.Layout{Kind: layout.Mirror, Mirror: 2, StripeSize: 1 << 20, StripeCount: 1})
	if err != nil {
		t.Fatal(err)
	}
	w, _, err := other.Open(ctx, a.Ino, proto.AccessWrite)
	if err != nil {
		t.Fatal(err)
	}
	patch := bytes.Repeat([]byte{0xee}, 200<<10)
	mustWrite(t, w, patch, 1<<20)
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	data2 := bytes.Clone(data)
	copy(data2[1<<20:], patch)
	if _, err := reader.GetAttr(ctx, a.Ino); err != nil {
		t.Fatal(err)
	}
	check("after another client wrote through the new layout", data2)
	if g := f.state().gen; g != na.Gen {
		t.Fatalf("the handle reads generation %#x, want %#x", g, na.Gen)
	}

	// 3. Restriped once more and the grace passes: the handle heard
	// nothing, finds its objects gone, follows and reads again.
	na, err = other.Migrate(ctx, a.Ino, layout.Layout{Kind: layout.EC, ECData: 2, ECParity: 1, StripeSize: 64 << 10, StripeCount: 1})
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(2 * time.Hour)
	for _, g := range []uint64{gen0, gen1, f.state().gen} {
		e.waitGCGone(t, a.Ino, g)
	}
	check("after the grace removed the objects it opened", data2)
	if g := f.state().gen; g != na.Gen {
		t.Fatalf("the handle reads generation %#x, want %#x", g, na.Gen)
	}
	// The handle's state is the one this client's new opens share.
	g, _, err := reader.Open(ctx, a.Ino, proto.AccessRead)
	if err != nil {
		t.Fatal(err)
	}
	if g.state() != f.state() {
		t.Fatal("a new open here has another inode state than the handle that followed")
	}
	g.Release(ctx)
}

// TestFollowOnlyARestripe: the metadata service lets a handle follow
// only from a generation the file had; another generation (another file
// with the number) is ESTALE.
func TestFollowOnlyARestripe(t *testing.T) {
	e := newMigrateEnv(t, time.Hour)
	ctx := context.Background()
	c := e.client(t)
	a := writeFile(t, c, "f", randomBytes(100<<10, 2))
	na, err := c.Migrate(ctx, a.Ino, layout.Layout{Kind: layout.RAID0, StripeSize: 64 << 10, StripeCount: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, gen := range []uint64{a.Gen, na.Gen} {
		got, cap, err := e.meta.Follow(ctx, a.Ino, gen, proto.AccessRead)
		if err != nil || got.Gen != na.Gen || len(cap) == 0 {
			t.Fatalf("follow from generation %#x: %+v, %d-byte capability, %v", gen, got, len(cap), err)
		}
	}
	if _, _, err := e.meta.Follow(ctx, a.Ino, a.Gen^na.Gen^1, proto.AccessRead); !errors.Is(err, syscall.ESTALE) {
		t.Fatalf("follow from a generation the file never had: %v, want ESTALE", err)
	}
}

// TestMigrateTicketRenewed: a copy that outlasts the ticket's life
// renews it and commits; one whose renewals are held back finds the
// ticket ended, fails with a clear error and leaves no new object behind.
// The metadata server's clock (and this client's) move with every object
// write of the copy, not with the wall clock.
func TestMigrateTicketRenewed(t *testing.T) {
	e := newMigrateEnv(t, time.Hour)
	ctx := context.Background()
	c := e.client(t)
	var clientLag sync.Mutex // held: the client's clock stands still
	offset := time.Duration(0)
	c.now = func() time.Time {
		clientLag.Lock()
		defer clientLag.Unlock()
		return time.Now().Add(offset)
	}
	data := randomBytes(40<<20, 3)
	a := writeFile(t, c, "f", data)
	var step time.Duration
	hook := func(o proto.ObjectID) {
		if o.Gen == a.Gen || step == 0 {
			return
		}
		e.clock.Advance(step)
		clientLag.Lock()
		offset += step
		clientLag.Unlock()
	}
	e.storage.writeHook.Store(&hook)
	// 40 writes of 1 MiB, 2 minutes each: 80 minutes of copy for a ticket
	// of an hour.
	step = 2 * time.Minute
	na, err := c.Migrate(ctx, a.Ino, layout.Layout{Kind: layout.RAID0, StripeSize: 1 << 20, StripeCount: 2})
	if err != nil {
		t.Fatalf("a copy longer than the ticket's life: %v", err)
	}
	if na.Gen == a.Gen {
		t.Fatal("not migrated")
	}
	f, _, err := c.Open(ctx, a.Ino, proto.AccessRead)
	if err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, f, 0, len(data)); !bytes.Equal(got, data) {
		t.Fatal("the migrated file reads wrong bytes")
	}
	f.Release(ctx)

	// The client's clock stands still: it never renews, and the ticket
	// ends during the copy.
	hook2 := func(o proto.ObjectID) {
		if o.Gen != na.Gen {
			e.clock.Advance(step)
		}
	}
	e.storage.writeHook.Store(&hook2)
	_, err = c.Migrate(ctx, a.Ino, layout.Layout{Kind: layout.RAID0, StripeSize: 1 << 20, StripeCount: 3})
	if !errors.Is(err, syscall.ETIMEDOUT) {
		t.Fatalf("a copy that outlived its ticket: %v, want ETIMEDOUT", err)
	}
	t.Logf("expired ticket: %v", err)
	after, err := c.GetAttr(ctx, a.Ino)
	if err != nil || after.Gen != na.Gen {
		t.Fatalf("the failed migrate changed the file: %+v %v", after, err)
	}
	// Nothing left behind: no object of another generation is queued, and
	// once the GC ran only the file's own objects remain.
	waitUntil(t, "the expired ticket's objects' removal", func() bool {
		q, err := e.meta.GCQueue()
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range q {
			if o.Obj.Ino == a.Ino && o.Obj.Gen != a.Gen {
				return false
			}
		}
		return true
	})
	f, _, err = c.Open(ctx, a.Ino, proto.AccessRead)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Release(ctx)
	if got := mustRead(t, f, 0, len(data)); !bytes.Equal(got, data) {
		t.Fatal("after the failed migrate the file reads wrong bytes")
	}
}

// oldMeta is a metadata service from before Follow and MigrateRenew: it
// answers both with ENOSYS.
type oldMeta struct{ sessionMeta }

func (oldMeta) Follow(context.Context, proto.Ino, uint64, proto.Access) (proto.Attr, []byte, error) {
	return proto.Attr{}, nil, syscall.ENOSYS
}

func (oldMeta) MigrateRenew(context.Context, proto.MigrateTicket) (proto.MigrateTicket, error) {
	return proto.MigrateTicket{}, syscall.ENOSYS
}

// TestFollowFallsBackOnOldServer: against a server without Follow,
// capabilities are renewed with Capability, and a migrate copy goes on
// with its ticket when it cannot be renewed.
func TestFollowFallsBackOnOldServer(t *testing.T) {
	e := newMigrateEnv(t, time.Hour)
	ctx := context.Background()
	c := NewWithServices(oldMeta{sessionMeta{e.meta, proto.NewSessionID()}}, e.storage, Config{})
	defer c.Close()
	var calls atomic.Int64
	c.now = func() time.Time { // an hour passes between two looks: every renewal is due
		return time.Now().Add(time.Duration(calls.Add(1)) * time.Hour)
	}
	data := randomBytes(200<<10, 4)
	a := writeFile(t, c, "f", data)
	f, _, err := c.Open(ctx, a.Ino, proto.AccessRead)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Release(ctx)
	h, err := f.state().renewCap(ctx, proto.AccessRead, f.state().caps.get(proto.AccessRead))
	if err != nil || len(h.b) == 0 {
		t.Fatalf("renewal against a server without Follow: %v", err)
	}
	if !c.noFollow.Load() {
		t.Fatal("the client did not note that the server cannot follow")
	}
	f.Release(ctx)
	if _, err := c.Migrate(ctx, a.Ino, layout.Layout{Kind: layout.RAID0, StripeSize: 64 << 10, StripeCount: 2}); err != nil {
		t.Fatalf("migrate against a server without renewals: %v", err)
	}
	if calls.Load() < 2 {
		t.Fatal("the migrate never looked whether its ticket was due for renewal")
	}
}

// TestTruncateByPathAfterMigrate: a truncate by path on a client whose
// only handles on the file are readers of a generation a restripe
// replaced cuts the file's current objects: extended again, the file
// reads zeros past the cut, never the old bytes.
func TestTruncateByPathAfterMigrate(t *testing.T) {
	e := newMigrateEnv(t, time.Hour)
	ctx := context.Background()
	c, other := e.client(t), e.client(t)
	data := randomBytes(1<<20, 5)
	a := writeFile(t, other, "f", data)
	f, _, err := c.Open(ctx, a.Ino, proto.AccessRead)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Release(ctx)
	if _, err := other.Migrate(ctx, a.Ino, layout.Layout{Kind: layout.RAID0, StripeSize: 64 << 10, StripeCount: 3}); err != nil {
		t.Fatal(err)
	}
	for _, size := range []uint64{1000, 1 << 20} {
		if _, err := c.SetAttr(ctx, a.Ino, proto.SetAttrIn{Valid: proto.SetSize, Size: size}); err != nil {
			t.Fatalf("truncate to %d: %v", size, err)
		}
	}
	want := make([]byte, 1<<20)
	copy(want, data[:1000])
	g, _, err := other.Open(ctx, a.Ino, proto.AccessRead)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Release(ctx)
	if got := mustRead(t, g, 0, 1<<20); !bytes.Equal(got, want) {
		t.Fatal("after truncating and extending, a new open reads other bytes than the cut file's")
	}
	if got := mustRead(t, f, 0, 1<<20); !bytes.Equal(got, want) {
		t.Fatal("after truncating and extending, the old handle reads other bytes than the cut file's")
	}
}
