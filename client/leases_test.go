package client

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/weft-fs/weft/proto"
)

// trustedCache returns a cache that trusts what it holds for an hour.
func trustedCache() *leaseCache {
	l := newLeaseCache(nil, slog.New(slog.DiscardHandler))
	l.epoch, l.trust = 1, time.Now().Add(time.Hour)
	return l
}

func TestLeaseCacheAnswers(t *testing.T) {
	l := trustedCache()
	a := proto.Attr{Ino: 7, Mode: 0o100644, Size: 3}
	l.putLookup(l.begin(), 1, "f", a)
	l.putLookup(l.begin(), 1, "missing", proto.Attr{})
	if got, found, ok := l.lookup(1, "f"); !ok || !found || got.Ino != a.Ino || got.Size != a.Size {
		t.Fatalf("lookup f: %+v %v %v", got, found, ok)
	}
	if _, found, ok := l.lookup(1, "missing"); !ok || found {
		t.Fatalf("negative lookup: found %v ok %v, want a cached absence", found, ok)
	}
	if got, ok := l.getAttr(7); !ok || got.Ino != a.Ino || got.Size != a.Size {
		t.Fatalf("getattr: %+v %v", got, ok)
	}
	// An invalidation of the name drops it and the inode it named.
	l.mu.Lock()
	l.dropLocked(1, "f")
	l.mu.Unlock()
	if _, _, ok := l.lookup(1, "f"); ok {
		t.Fatal("invalidated name still answered")
	}
	if _, ok := l.getAttr(7); ok {
		t.Fatal("attributes of an invalidated name's inode still answered")
	}
}

// A read under way when an invalidation (or a change of this client)
// arrives may have read what was replaced: it is not cached.
func TestLeaseCacheReadRacingInvalidation(t *testing.T) {
	l := trustedCache()
	s0 := l.begin()
	l.own(0, "", 7) // a change of inode 7 while the read was under way
	l.putAttr(s0, proto.Attr{Ino: 7, Size: 1})
	if _, ok := l.getAttr(7); ok {
		t.Fatal("a read that raced a change was cached")
	}
	s0 = l.begin()
	l.mu.Lock()
	l.dropLocked(1, "g") // an invalidation of the directory's entry
	l.mu.Unlock()
	l.putLookup(s0, 1, "g", proto.Attr{})
	if _, _, ok := l.lookup(1, "g"); ok {
		t.Fatal("a lookup that raced an invalidation of its directory was cached")
	}
	// Another inode's change does not matter.
	s0 = l.begin()
	l.own(0, "", 8)
	l.putAttr(s0, proto.Attr{Ino: 9, Size: 1})
	if _, ok := l.getAttr(9); !ok {
		t.Fatal("a read of an unrelated inode was not cached")
	}
}

func TestLeaseCacheTrust(t *testing.T) {
	l := trustedCache()
	l.putAttr(l.begin(), proto.Attr{Ino: 7})
	l.mu.Lock()
	l.trust = time.Now().Add(-time.Second) // no poll answered for too long
	l.mu.Unlock()
	if _, ok := l.getAttr(7); ok {
		t.Fatal("answered after its trust ran out")
	}
}

// fakeLeases answers polls from a script.
type fakeLeases struct {
	mu    sync.Mutex
	polls []proto.LeasePoll
	acks  []uint64
}

func (f *fakeLeases) LeasePoll(ctx context.Context, ack uint64) (proto.LeasePoll, error) {
	f.mu.Lock()
	f.acks = append(f.acks, ack)
	if len(f.polls) == 0 {
		f.mu.Unlock()
		<-ctx.Done()
		return proto.LeasePoll{}, ctx.Err()
	}
	p := f.polls[0]
	f.polls = f.polls[1:]
	f.mu.Unlock()
	return p, nil
}

// runPolls runs l's poll loop against f until f was polled n times (a
// minute at most, against hangs), then stops it.
func runPolls(t *testing.T, l *leaseCache, f *fakeLeases, n int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.run(ctx, time.Minute)
	}()
	defer func() {
		cancel()
		<-done
	}()
	for deadline := time.Now().Add(time.Minute); ; {
		f.mu.Lock()
		polled := len(f.acks)
		f.mu.Unlock()
		if polled >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the poll loop did not poll %d times", n)
		}
		time.Sleep(time.Millisecond)
	}
}

// The poll loop drops what it is told, tells OnLeaseInval before it
// acknowledges, and drops everything when the epoch changes.
func TestLeaseCachePollLoop(t *testing.T) {
	f := &fakeLeases{polls: []proto.LeasePoll{
		{Epoch: 5, Term: time.Hour},
		{Epoch: 5, Term: time.Hour, Invals: []proto.LeaseInval{{Seq: 1, Ino: 7}}},
		{Epoch: 6, Term: time.Hour},
	}}
	l := newLeaseCache(f, slog.New(slog.DiscardHandler))
	var told []proto.LeaseInval
	var seenAttr bool
	l.onInval = func(ivs []proto.LeaseInval) {
		told = append(told, ivs...)
		_, seenAttr = l.getAttr(7)
	}
	// Fill the cache once the first poll made it trusted.
	l.mu.Lock()
	l.epoch, l.trust = 5, time.Now().Add(time.Hour)
	l.mu.Unlock()
	l.putAttr(l.begin(), proto.Attr{Ino: 7})
	l.putAttr(l.begin(), proto.Attr{Ino: 8})
	runPolls(t, l, f, 4)
	if len(told) != 1 || told[0].Ino != 7 || seenAttr {
		t.Fatalf("told %+v (attr still cached when told: %v), want inode 7 dropped first", told, seenAttr)
	}
	if f.acks[2] != 1 {
		t.Fatalf("acks %v: the poll after the invalidation must acknowledge seq 1", f.acks)
	}
	if f.acks[3] != 0 {
		t.Fatalf("acks %v: a new epoch starts acknowledging from 0", f.acks)
	}
	if _, ok := l.getAttr(8); ok {
		t.Fatal("the cache survived a new epoch")
	}
}

// The trust a poll answer gives is bounded by its Valid (a replicated
// leader's lease on its leadership), however long the term.
func TestLeaseCacheTrustBoundedByValid(t *testing.T) {
	for _, tc := range []struct {
		valid   time.Duration
		trusted bool
	}{{0, false}, {time.Hour, true}} {
		f := &fakeLeases{polls: []proto.LeasePoll{{Epoch: 5, Term: 4 * time.Hour, Valid: tc.valid}}}
		l := newLeaseCache(f, slog.New(slog.DiscardHandler))
		runPolls(t, l, f, 2) // the first answer was taken in
		l.putAttr(l.begin(), proto.Attr{Ino: 7})
		l.mu.Lock()
		trust := l.trust
		l.mu.Unlock()
		if _, ok := l.getAttr(7); ok != tc.trusted {
			t.Errorf("valid %v, term 4h: cache answers %v (trust until %v), want %v", tc.valid, ok, trust, tc.trusted)
		}
		if trust.After(time.Now().Add(tc.valid)) {
			t.Errorf("valid %v: trusted until %v, past the poll's valid", tc.valid, trust)
		}
	}
}

// A directory this client made, and has only created in since, answers
// lookups of names it lacks as absent; anything else that touches the
// directory ends that.
func TestLeaseCacheCompleteDirectory(t *testing.T) {
	c := &Client{leases: trustedCache()}
	l := c.leases
	absent := func(dir proto.Ino, name string) bool {
		_, found, ok := l.lookup(dir, name)
		return ok && !found
	}
	const parent, dir = 1, 10
	mkdir := func(dir proto.Ino) {
		s0 := c.creating(parent, "d")
		a := proto.Attr{Ino: dir, Mode: 0o040755}
		c.created(s0, parent, "d", a, nil)
		c.madeDir(s0, a)
	}
	create := func(name string, ino proto.Ino, err error) {
		s0 := c.creating(dir, name)
		c.created(s0, dir, name, proto.Attr{Ino: ino, Mode: 0o100644}, err)
	}

	mkdir(dir)
	if !absent(dir, "f1") {
		t.Fatal("a name in a directory this client just made is not known absent")
	}
	create("f1", 11, nil)
	if a, found, ok := l.lookup(dir, "f1"); !ok || !found || a.Ino != 11 {
		t.Fatalf("created name: %+v found %v ok %v", a, found, ok)
	}
	if !absent(dir, "f2") {
		t.Fatal("a create ended the directory's completeness")
	}
	// A name being created is absent until the create returns.
	s0 := c.creating(dir, "f2")
	if !absent(dir, "f2") {
		t.Fatal("a name under creation is not absent")
	}
	c.created(s0, dir, "f2", proto.Attr{Ino: 12, Mode: 0o100644}, nil)

	// Creates in two complete directories at once, where the new inode
	// of one shares its slot (inode hash) with the other directory: both
	// stay complete.
	other := proto.Ino(dir + 500)
	mkdir(other)
	sA := c.creating(dir, "f4")
	sB := c.creating(other, "g1") // moves other's slot, after sA
	c.created(sA, dir, "f4", proto.Attr{Ino: other + leaseSlots, Mode: 0o100644}, nil)
	c.created(sB, other, "g1", proto.Attr{Ino: dir + 2*leaseSlots, Mode: 0o100644}, nil)
	for _, d := range []proto.Ino{dir, other} {
		if !absent(d, "next") {
			t.Fatalf("directory %d: concurrent creates whose inodes share a slot ended its completeness", d)
		}
	}
	if _, found, ok := l.lookup(dir, "f4"); ok && !found {
		t.Fatal("a name created while its inode's slot moved is answered as absent")
	}

	// A failed create: the name's fate is unknown (EEXIST, EACCES, ...).
	create("f3", 0, syscall.EACCES)
	if _, _, ok := l.lookup(dir, "other"); ok {
		t.Fatal("a failed create left the directory complete")
	}

	// An invalidation of the directory (another mount's change).
	mkdir(dir + 100)
	l.mu.Lock()
	l.dropLocked(dir+100, "x")
	l.mu.Unlock()
	if _, _, ok := l.lookup(dir+100, "y"); ok {
		t.Fatal("an invalidated directory still answers absent names")
	}

	// This client's own change other than a create (an unlink).
	mkdir(dir + 200)
	create("g", 201, nil)
	done := c.changing(dir+200, "g")
	done()
	if _, _, ok := l.lookup(dir+200, "g"); ok {
		t.Fatal("an unlinked name is still answered")
	}
	if _, _, ok := l.lookup(dir+200, "h"); ok {
		t.Fatal("an unlink left the directory complete")
	}

	// A mkdir that raced an invalidation of the new inode.
	s0 = c.creating(parent, "e")
	l.mu.Lock()
	l.dropLocked(dir+300, "")
	l.mu.Unlock()
	a := proto.Attr{Ino: dir + 300, Mode: 0o040755}
	c.created(s0, parent, "e", a, nil)
	c.madeDir(s0, a)
	if _, _, ok := l.lookup(dir+300, "z"); ok {
		t.Fatal("a directory whose lease raced an invalidation was taken as complete")
	}

	// A new epoch forgets it all.
	mkdir(dir + 400)
	l.mu.Lock()
	l.clearLocked()
	l.mu.Unlock()
	if _, _, ok := l.lookup(dir+400, "z"); ok {
		t.Fatal("a cleared cache still answers")
	}
}

// Attributes are openable from the cache (getOpenable) only once a poll
// sent after they were cached was answered: an invalidation the leader
// queued when it granted the lease (an unlink under way) comes with that
// answer at the latest.
func TestLeaseCacheOpenableAfterPoll(t *testing.T) {
	answer := proto.LeasePoll{Epoch: 5, Term: time.Hour, Valid: time.Hour}
	f := &fakeLeases{polls: []proto.LeasePoll{answer}}
	l := newLeaseCache(f, slog.New(slog.DiscardHandler))
	runPolls(t, l, f, 2) // the first answer was taken in: trusted (the second poll waits)
	l.putAttr(l.begin(), proto.Attr{Ino: 7})
	if _, ok := l.getAttr(7); !ok {
		t.Fatal("the attributes are not answered from the cache")
	}
	if _, _, ok := l.getOpenable(7); ok {
		t.Fatal("attributes no answered poll was sent after were openable")
	}
	// A lookup whose lease came with nothing to invalidate is openable at
	// once, with its copy; one that did not say so is not.
	l.putLookupCopy(l.begin(), 1, "f", proto.Attr{Ino: 8, Size: 3}, []byte("abc"), true)
	if _, data, ok := l.getOpenable(8); !ok || string(data) != "abc" {
		t.Fatalf("an openable lookup's entry: copy %q, openable %v", data, ok)
	}
	l.putLookupCopy(l.begin(), 1, "g", proto.Attr{Ino: 9, Size: 3}, []byte("abc"), false)
	if _, _, ok := l.getOpenable(9); ok {
		t.Fatal("a lookup not granted clean was openable before a poll")
	}
	l.putLookupCopy(l.begin(), 1, "h", proto.Attr{Ino: 10, Size: 4}, []byte("abc"), true)
	if _, data, _ := l.getOpenable(10); data != nil {
		t.Fatalf("a copy of another length than the file's was kept: %q", data)
	}
	f.mu.Lock()
	f.polls = append(f.polls, answer)
	f.mu.Unlock()
	runPolls(t, l, f, 4) // the third poll, sent after the put, was answered (the fourth waits)
	if _, _, ok := l.getOpenable(7); !ok {
		t.Fatal("attributes a later poll confirmed are not openable")
	}
}

// TestLeaseCacheCopyBytes: the lease cache counts the copies it keeps
// through every way an entry goes (replaced, invalidated, taken by an
// open, the whole cache dropped), and keeps no copy past its bound.
func TestLeaseCacheCopyBytes(t *testing.T) {
	l := newLeaseCache(&fakeLeases{}, slog.New(slog.DiscardHandler))
	l.epoch = 1
	check := func(what string) {
		t.Helper()
		sum := 0
		for _, e := range l.attrs {
			sum += len(e.data)
		}
		if l.copyBytes != sum {
			t.Fatalf("%s: copyBytes %d, the entries hold %d", what, l.copyBytes, sum)
		}
	}
	page := make([]byte, proto.MaxFileCopy)
	put := func(ino proto.Ino, name string) {
		l.putLookupCopy(l.begin(), 1, name, proto.Attr{Ino: ino, Mode: syscall.S_IFREG | 0o644, Size: proto.MaxFileCopy}, page, true)
	}
	put(10, "a")
	put(11, "b")
	check("two copies")
	put(10, "a")
	check("a copy looked up again")
	l.putAttr(l.begin(), proto.Attr{Ino: 11})
	check("attributes without a copy over one with")
	l.tookCopy(10)
	check("a copy an open took")
	put(12, "c")
	l.mu.Lock()
	l.dropLocked(1, "c") // the directory's entry c: its inode's attributes go too
	l.mu.Unlock()
	check("an invalidation of the name")
	for i := range maxLeaseCopyBytes/proto.MaxFileCopy + 10 {
		put(proto.Ino(100+i), fmt.Sprint(i))
	}
	check("past the bound")
	if l.copyBytes > maxLeaseCopyBytes {
		t.Fatalf("%d bytes of copies kept, at most %d", l.copyBytes, maxLeaseCopyBytes)
	}
	l.mu.Lock()
	l.clearLocked()
	l.mu.Unlock()
	check("the cache dropped")
}

// TestLeaseCachePutAhead: copies brought ahead are kept openable, counted
// in the copies' bytes, and marked as brought ahead (tookCopy says so),
// except a copy of another length than its file's, a file an invalidation
// touched since the read-ahead began, and one whose entry has a copy
// already.
func TestLeaseCachePutAhead(t *testing.T) {
	l := newLeaseCache(&fakeLeases{}, slog.New(slog.DiscardHandler))
	if n := l.putAhead(l.begin(), []proto.FileCopy{{Attr: proto.Attr{Ino: 5, Size: 3}, Data: []byte("abc")}}); n != 0 {
		t.Fatalf("a cache that never polled kept %d copies brought ahead", n)
	}
	l.epoch, l.trust = 1, time.Now().Add(time.Hour)
	l.putLookupCopy(l.begin(), 1, "f", proto.Attr{Ino: 7, Size: 3}, []byte("old"), true)
	s0 := l.begin()
	l.mu.Lock()
	l.dropLocked(8, "") // an invalidation of inode 8 while the read-ahead is under way
	l.mu.Unlock()
	n := l.putAhead(s0, []proto.FileCopy{
		{Attr: proto.Attr{Ino: 6, Size: 3}, Data: []byte("six")},
		{Attr: proto.Attr{Ino: 7, Size: 3}, Data: []byte("new")},
		{Attr: proto.Attr{Ino: 8, Size: 3}, Data: []byte("ate")},
		{Attr: proto.Attr{Ino: 9, Size: 4}, Data: []byte("nin")},
	})
	if n != 1 {
		t.Fatalf("kept %d copies brought ahead, want 1 (inode 6)", n)
	}
	if _, data, ok := l.getOpenable(6); !ok || string(data) != "six" {
		t.Fatalf("inode 6: copy %q, openable %v", data, ok)
	}
	if _, data, _ := l.getOpenable(7); string(data) != "old" {
		t.Fatalf("inode 7's copy from its lookup was replaced by %q", data)
	}
	for _, ino := range []proto.Ino{8, 9} {
		if _, data, _ := l.getOpenable(ino); data != nil {
			t.Fatalf("inode %d: copy %q kept", ino, data)
		}
	}
	if l.copyBytes != 6 {
		t.Fatalf("copyBytes %d, want 6", l.copyBytes)
	}
	if !l.tookCopy(6) || l.tookCopy(7) {
		t.Fatal("tookCopy does not tell a copy brought ahead from a lookup's")
	}

	// A file opened from the leader while a read-ahead is under way: the
	// open's handle serves it, the read-ahead's copy is not kept.
	s0 = l.begin()
	l.openedFromLeader(11)
	if n := l.putAhead(s0, []proto.FileCopy{{Attr: proto.Attr{Ino: 11, Size: 3}, Data: []byte("abc")}, {Attr: proto.Attr{Ino: 12, Size: 3}, Data: []byte("abc")}}); n != 1 {
		t.Fatalf("kept %d copies, want 1 (not the file opened from the leader meanwhile)", n)
	}
	if _, data, _ := l.getOpenable(11); data != nil {
		t.Fatal("kept the copy of a file opened from the leader while it was brought")
	}
}

// TestLeaseCachePutListing: a listing's names are cached as lookups, an
// inode's cached attributes (perhaps with a copy) are kept, an inode an
// invalidation touched since the listing began is left out, and nothing is
// kept if the directory was touched.
func TestLeaseCachePutListing(t *testing.T) {
	l := newLeaseCache(&fakeLeases{}, slog.New(slog.DiscardHandler))
	l.epoch, l.trust = 1, time.Now().Add(time.Hour)
	l.putLookupCopy(l.begin(), 1, "b", proto.Attr{Ino: 11, Size: 3}, []byte("bbb"), true)
	ents := []proto.DirEntry{{Name: "a", Attr: proto.Attr{Ino: 10}}, {Name: "b", Attr: proto.Attr{Ino: 11, Size: 3}}, {Name: "c", Attr: proto.Attr{Ino: 12}}}
	s0 := l.begin()
	l.mu.Lock()
	l.dropLocked(12, "")
	l.mu.Unlock()
	if n := l.putListing(s0, 1, ents); n != 2 {
		t.Fatalf("cached %d entries, want 2 (not c, invalidated meanwhile)", n)
	}
	if a, found, ok := l.lookup(1, "a"); !ok || !found || a.Ino != 10 {
		t.Fatalf("a: %+v found %v ok %v", a, found, ok)
	}
	if _, data, _ := l.getOpenable(11); string(data) != "bbb" {
		t.Fatalf("b's copy from its lookup was dropped by the listing: %q", data)
	}
	if _, _, ok := l.lookup(1, "c"); ok {
		t.Fatal("c cached though invalidated since the listing began")
	}
	s0 = l.begin()
	l.mu.Lock()
	l.dropLocked(2, "x")
	l.mu.Unlock()
	if n := l.putListing(s0, 2, []proto.DirEntry{{Name: "y", Attr: proto.Attr{Ino: 20}}}); n != 0 {
		t.Fatalf("cached %d entries of a directory invalidated since its listing began", n)
	}
}
