package meta

import (
	"context"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/transport"
)

// fakeLeaseClock is a clock tests move by hand.
type fakeLeaseClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeLeaseClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeLeaseClock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func leaseSess(name string) session {
	return session{remote: true, name: name, id: proto.SessionID{name[0]}}
}

// done is a context already ended: a poll then answers at once.
func doneCtx() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

func TestLeaseBreakWaitsForAck(t *testing.T) {
	lt := newLeaseTable(time.Hour, nil)
	a, b := leaseSess("a"), leaseSess("b")
	if p := lt.poll(doneCtx(), a, 0); p.Epoch == 0 || len(p.Invals) != 0 {
		t.Fatalf("first poll: %+v", p)
	}
	lt.grant(a, lt.begin(), "x", 1, 5)
	if !lt.holds(a, 1) || !lt.holds(a, 5) {
		t.Fatal("grant recorded nothing")
	}
	waits := lt.breakLeases(b, lt.begin(), []proto.LeaseInval{{Ino: 1, Name: "x"}}, nil, "", 0, false)
	if len(waits) != 1 {
		t.Fatalf("%d waits, want 1 (holder a)", len(waits))
	}
	done := make(chan error, 1)
	go func() { done <- lt.wait(context.Background(), waits) }()
	p := lt.poll(doneCtx(), a, 0)
	if len(p.Invals) != 1 || p.Invals[0].Ino != 1 || p.Invals[0].Name != "x" || p.Invals[0].Seq != 1 {
		t.Fatalf("poll answered %+v, want the invalidation of (1, x)", p.Invals)
	}
	select {
	case err := <-done:
		t.Fatalf("the change stopped waiting (%v) before the holder acknowledged", err)
	default:
	}
	if lt.holds(a, 1) || !lt.holds(a, 5) {
		t.Fatal("after the break a must hold 5 but not 1")
	}
	lt.poll(doneCtx(), a, 1) // acknowledges
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if p := lt.poll(doneCtx(), a, 1); len(p.Invals) != 0 {
		t.Fatalf("acknowledged invalidations sent again: %+v", p.Invals)
	}
}

func TestLeaseSilentHolderIsDropped(t *testing.T) {
	clk := &fakeLeaseClock{now: time.Unix(1000, 0)}
	lt := newLeaseTable(time.Minute, clk.Now)
	a, b := leaseSess("a"), leaseSess("b")
	p0 := lt.poll(doneCtx(), a, 0)
	lt.grant(a, lt.begin(), "", 7)
	waits := lt.breakLeases(b, lt.begin(), []proto.LeaseInval{{Ino: 7}}, nil, "", 0, false)
	if len(waits) != 1 {
		t.Fatalf("%d waits, want 1", len(waits))
	}
	clk.add(time.Minute + time.Second) // a never polls again
	if err := lt.wait(context.Background(), waits); err != nil {
		t.Fatal(err)
	}
	if lt.holds(a, 7) {
		t.Fatal("a silent holder kept its lease")
	}
	// Coming back, it learns it was dropped: a new epoch.
	if p := lt.poll(doneCtx(), a, 1); p.Epoch == p0.Epoch || p.Epoch == 0 {
		t.Fatalf("epoch %x after the drop, was %x: the client would keep its cache", p.Epoch, p0.Epoch)
	}
	lt.grant(a, lt.begin(), "", 8)
	clk.add(2 * time.Minute)
	if w := lt.breakLeases(b, lt.begin(), []proto.LeaseInval{{Ino: 8}}, nil, "", 0, false); len(w) != 0 {
		t.Fatalf("a change waits for a holder silent for longer than the term: %d waits", len(w))
	}
}

// A read that began before a change and took its lease after the change
// was broken may have read the old state: it is invalidated at once.
func TestLeaseGrantAfterBreakInvalidates(t *testing.T) {
	lt := newLeaseTable(time.Hour, nil)
	a, b := leaseSess("a"), leaseSess("b")
	lt.poll(doneCtx(), a, 0)
	g := lt.begin()
	lt.breakLeases(b, lt.begin(), []proto.LeaseInval{{Ino: 9, Name: "n"}}, nil, "", 0, false)
	lt.grant(a, g, "n", 9)
	p := lt.poll(doneCtx(), a, 0)
	if len(p.Invals) != 1 || p.Invals[0].Ino != 9 || p.Invals[0].Name != "n" {
		t.Fatalf("poll answered %+v, want the invalidation of (9, n)", p.Invals)
	}
	// A read that began after the change keeps its lease.
	lt.grant(a, lt.begin(), "", 10)
	if p := lt.poll(doneCtx(), a, 1); len(p.Invals) != 0 {
		t.Fatalf("a fresh read was invalidated: %+v", p.Invals)
	}
}

// A create is not invalidated to its own session, which takes leases on
// the directory and the new inode; others are told and waited for.
func TestLeaseOwnCreate(t *testing.T) {
	lt := newLeaseTable(time.Hour, nil)
	a, b := leaseSess("a"), leaseSess("b")
	lt.poll(doneCtx(), a, 0)
	lt.poll(doneCtx(), b, 0)
	lt.grant(a, lt.begin(), "f", 1)
	lt.grant(b, lt.begin(), "f", 1)
	waits := lt.breakLeases(a, lt.begin(), []proto.LeaseInval{{Ino: 1, Name: "f"}, {Ino: 20}}, []proto.Ino{1, 20}, "f", 0, false)
	if len(waits) != 1 || waits[0].h.sess != b {
		t.Fatalf("waits %+v, want b only", waits)
	}
	if p := lt.poll(doneCtx(), a, 0); len(p.Invals) != 0 {
		t.Fatalf("the creator was told of its own create: %+v", p.Invals)
	}
	if !lt.holds(a, 1) || !lt.holds(a, 20) || lt.holds(b, 1) {
		t.Fatal("leases after the create: a must hold 1 and 20, b nothing")
	}
}

// A create whose directory's slot was broken since it began (by a change
// of another inode sharing the slot, or of the directory itself): a
// session that held its lease on the directory all along is not told
// (any break of the directory would have taken the lease, and told it);
// one that did not hold it is, as the directory may have changed unseen.
func TestLeaseOwnCreateRacing(t *testing.T) {
	lt := newLeaseTable(time.Hour, nil)
	a, b := leaseSess("a"), leaseSess("b")
	lt.poll(doneCtx(), a, 0)
	lt.poll(doneCtx(), b, 0)
	const dir, other = 1, 2
	lt.grant(a, lt.begin(), "", dir)
	g0 := lt.begin()
	// b creates in another directory; its new inode shares dir's slot.
	lt.breakLeases(b, lt.begin(), []proto.LeaseInval{{Ino: other, Name: "x"}, {Ino: dir + brokenSlots}}, []proto.Ino{other, dir + brokenSlots}, "x", 0, false)
	lt.breakLeases(a, g0, []proto.LeaseInval{{Ino: dir, Name: "f"}, {Ino: 30}}, []proto.Ino{dir, 30}, "f", 0, false)
	if p := lt.poll(doneCtx(), a, 0); len(p.Invals) != 0 {
		t.Fatalf("a create in a directory whose lease its session held was invalidated to it: %+v", p.Invals)
	}

	// The same in a directory a does not hold a lease on: told.
	const dir2 = 3
	g0 = lt.begin()
	lt.breakLeases(b, lt.begin(), []proto.LeaseInval{{Ino: other, Name: "y"}, {Ino: dir2 + brokenSlots}}, []proto.Ino{other, dir2 + brokenSlots}, "y", 0, false)
	lt.breakLeases(a, g0, []proto.LeaseInval{{Ino: dir2, Name: "g"}, {Ino: 31}}, []proto.Ino{dir2, 31}, "g", 0, false)
	p := lt.poll(doneCtx(), a, 0)
	if len(p.Invals) != 1 || p.Invals[0].Ino != dir2 || p.Invals[0].Name != "g" {
		t.Fatalf("a create that may have raced a change of a directory not held: told %+v, want (%d, g)", p.Invals, dir2)
	}
}

// An unlink is not told to its own session for the directory (its reply
// carries the directory's new attributes, and the session keeps its
// lease), but is for the inode that lost the name, unless the unlink
// reclaimed it (selfGone: nothing reaches the inode any more); either
// way the session loses its lease on the inode. Others are told of both
// and waited for.
func TestLeaseOwnUnlink(t *testing.T) {
	for _, gone := range []bool{false, true} {
		lt := newLeaseTable(time.Hour, nil)
		a, b := leaseSess("a"), leaseSess("b")
		lt.poll(doneCtx(), a, 0)
		lt.poll(doneCtx(), b, 0)
		lt.grant(a, lt.begin(), "f", 1, 7)
		lt.grant(b, lt.begin(), "f", 1, 7)
		waits := lt.breakLeases(a, lt.begin(), []proto.LeaseInval{{Ino: 1, Name: "f"}, {Ino: 7}}, nil, "f", 1, gone)
		if len(waits) != 2 || waits[0].h.sess != b || waits[1].h.sess != b {
			t.Fatalf("gone %v: waits %+v, want b's two invalidations only", gone, waits)
		}
		p := lt.poll(doneCtx(), a, 0)
		if gone && len(p.Invals) != 0 {
			t.Fatalf("the remover of a reclaimed inode was told %+v, want nothing", p.Invals)
		}
		if !gone && (len(p.Invals) != 1 || p.Invals[0].Ino != 7 || p.Invals[0].Name != "") {
			t.Fatalf("the remover was told %+v, want only the inode that lost its name", p.Invals)
		}
		if p := lt.poll(doneCtx(), b, 0); len(p.Invals) != 2 {
			t.Fatalf("gone %v: another holder was told %+v, want the directory's entry and the inode", gone, p.Invals)
		}
		if !lt.holds(a, 1) || lt.holds(a, 7) || lt.holds(b, 1) || lt.holds(b, 7) {
			t.Fatalf("gone %v: leases after the unlink: a must hold the directory only, b nothing", gone)
		}
	}
}

// A listing takes leases on the directory and every inode listed; one that
// raced a change of the directory invalidates every name it listed.
func TestLeaseGrantDir(t *testing.T) {
	lt := newLeaseTable(time.Hour, nil)
	a, b := leaseSess("a"), leaseSess("b")
	lt.poll(doneCtx(), a, 0)
	ents := []proto.DirEntry{{Name: "x", Attr: proto.Attr{Ino: 11}}, {Name: "y", Attr: proto.Attr{Ino: 12}}}
	lt.grantDir(a, lt.begin(), 1, ents)
	if !lt.holds(a, 1) || !lt.holds(a, 11) || !lt.holds(a, 12) {
		t.Fatal("listing granted too little")
	}
	if p := lt.poll(doneCtx(), a, 0); len(p.Invals) != 0 {
		t.Fatalf("a fresh listing was invalidated: %+v", p.Invals)
	}
	g := lt.begin()
	lt.breakLeases(b, lt.begin(), []proto.LeaseInval{{Ino: 1, Name: "x"}}, nil, "", 0, false)
	lt.poll(doneCtx(), a, 1)
	lt.grantDir(a, g, 1, ents)
	p := lt.poll(doneCtx(), a, 1)
	if len(p.Invals) != 2 || p.Invals[0].Name != "x" || p.Invals[1].Name != "y" {
		t.Fatalf("a listing that raced a change: %+v, want both names invalidated", p.Invals)
	}
}

// A session that ended (a clean unmount) is waited for by no change.
func TestLeaseDropSession(t *testing.T) {
	lt := newLeaseTable(time.Hour, nil)
	a, b := leaseSess("a"), leaseSess("b")
	lt.poll(doneCtx(), a, 0)
	lt.grant(a, lt.begin(), "", 4)
	lt.drop(a)
	if w := lt.breakLeases(b, lt.begin(), []proto.LeaseInval{{Ino: 4}}, nil, "", 0, false); len(w) != 0 || lt.holds(a, 4) {
		t.Fatalf("a dropped session is still waited for (%d waits) or holds its lease", len(w))
	}
}

// A new leader forgets every lease; its epoch differs.
func TestLeaseReset(t *testing.T) {
	lt := newLeaseTable(time.Hour, nil)
	a := leaseSess("a")
	p0 := lt.poll(doneCtx(), a, 0)
	lt.grant(a, lt.begin(), "", 3)
	lt.reset()
	if lt.holds(a, 3) || !lt.empty() {
		t.Fatal("reset kept a lease")
	}
	if p := lt.poll(doneCtx(), a, 0); p.Epoch == p0.Epoch {
		t.Fatal("same epoch after reset")
	}
}

// empty reports whether nobody holds anything.
func (t *leaseTable) empty() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byIno) == 0
}

// holds reports whether sess holds a lease on ino .
func (t *leaseTable) holds(sess session, ino proto.Ino) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	h := t.holders[sess]
	if h == nil {
		return false
	}
	_, ok := h.inos[ino]
	return ok
}

// A mount that unlinks a file's last name, nobody having it open, is not
// told of the inode (the unlink reclaimed it): one poll less per file
// removed. Removing one name of a file with two, it is told: its link
// count changed, and the mount may cache it under the other name.
func TestLeaseUnlinkTellsRemoverOnlyOfLiveInodes(t *testing.T) {
	e := newEnv(t)
	e.addTarget("t1", 1<<30)
	a := proto.WithSession(proto.WithCred(transport.WithPeer(ctx, transport.Peer{Addr: "10.0.0.9:1", Role: transport.RoleClient, Name: "a"}), proto.Cred{}), proto.SessionID{7})
	var ack uint64
	poll := func() []proto.LeaseInval {
		t.Helper()
		done, cancel := context.WithCancel(a)
		cancel()
		p, err := e.srv.LeasePoll(done, ack)
		if err != nil {
			t.Fatal(err)
		}
		for _, iv := range p.Invals {
			ack = max(ack, iv.Seq)
		}
		return p.Invals
	}
	f, err := e.srv.Create(a, proto.CreateIn{Parent: proto.RootIno, Name: "f", Mode: syscall.S_IFREG | 0o644})
	e.must(err)
	g, err := e.srv.Create(a, proto.CreateIn{Parent: proto.RootIno, Name: "g", Mode: syscall.S_IFREG | 0o644})
	e.must(err)
	_, err = e.srv.Link(a, g.Ino, proto.RootIno, "g2")
	e.must(err)
	poll()
	for _, n := range []string{"f", "g", "g2"} {
		_, err := e.srv.Lookup(a, proto.RootIno, n)
		e.must(err)
	}
	poll()
	e.must(e.srv.Unlink(a, proto.RootIno, "f"))
	if ivs := poll(); len(ivs) != 0 {
		t.Fatalf("removing f (reclaimed, inode %d) told the remover %+v", f.Ino, ivs)
	}
	e.must(e.srv.Unlink(a, proto.RootIno, "g"))
	ivs := poll()
	if len(ivs) != 1 || ivs[0].Ino != g.Ino || ivs[0].Name != "" {
		t.Fatalf("removing one of g's two names told the remover %+v, want inode %d", ivs, g.Ino)
	}
}

// TestLeaseClaimReclaim: an unlink may reclaim a file by itself only if no
// other live holder holds a lease on it or has an invalidation of it not
// yet acknowledged (its client may have opened the file from its cache);
// while such an unlink is under way, a lease granted on the file comes
// with an invalidation at once.
func TestLeaseClaimReclaim(t *testing.T) {
	lt := newLeaseTable(time.Hour, nil)
	a, b := leaseSess("a"), leaseSess("b")
	lt.poll(doneCtx(), a, 0)
	lt.poll(doneCtx(), b, 0)
	lt.grant(b, lt.begin(), "", 7)
	if lt.claimReclaim(7, a) {
		t.Fatal("a reclaim was claimed while another session holds a lease")
	}
	waits := lt.breakLeases(a, lt.begin(), []proto.LeaseInval{{Ino: 7}}, nil, "", 0, false)
	if len(waits) != 1 || lt.claimReclaim(7, a) {
		t.Fatal("a reclaim was claimed while another session has not acknowledged an invalidation")
	}
	lt.poll(doneCtx(), b, waits[0].seq) // acknowledges
	if !lt.claimReclaim(7, a) {
		t.Fatal("no reclaim claimed once the holder gave its lease back")
	}
	g := lt.begin()
	lt.grant(b, g, "", 7) // a lookup that read the file before the unlink applied
	if p := lt.poll(doneCtx(), b, waits[0].seq); len(p.Invals) != 1 || p.Invals[0].Ino != 7 {
		t.Fatalf("a lease granted during a claimed reclaim came without an invalidation: %+v", p.Invals)
	}
	lt.unfence(7)
	lt.poll(doneCtx(), b, waits[0].seq+1)
	lt.grant(b, lt.begin(), "", 8)
	if p := lt.poll(doneCtx(), b, waits[0].seq+1); len(p.Invals) != 0 {
		t.Fatalf("a grant with no reclaim under way came with %+v", p.Invals)
	}
	if !lt.claimReclaim(9, a) || !lt.claimReclaim(9, b) {
		t.Fatal("a reclaim of a file nobody else holds was not claimed")
	}
}
