package meta

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/transport"
)

// remote returns ctx as a request of client name in session id would
// carry it over the network.
func remote(name string, id byte) context.Context {
	c := transport.WithPeer(proto.WithCred(ctx, proto.Cred{}), transport.Peer{Addr: "10.0.0.1:1", Role: transport.RoleClient, Name: name})
	return proto.WithSession(c, proto.SessionID{id})
}

// TestSessionExpiry: a session that is not renewed expires; its handles
// are dropped, so its unlinked-but-open file is reclaimed and its objects
// removed, while a live session's open unlinked file stays. The expired
// session's handles answer ESTALE; a new session works.
func TestSessionExpiry(t *testing.T) {
	// The leases run on a clock the test moves, so a slow machine cannot
	// let the live session's lease run out between two renewals.
	var clock atomic.Int64
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	e := newEnv(t, func(o *Options) { o.SessionLease = 100 * time.Millisecond; o.leaseClock = now })
	e.addTarget("t1", 1<<30)
	dead, live := remote("dead", 1), remote("live", 2)
	for _, c := range []context.Context{dead, live} {
		lease, err := e.srv.OpenSession(c, nil)
		e.must(err)
		if lease != 100*time.Millisecond {
			t.Fatalf("lease %v", lease)
		}
	}

	var inos []proto.Ino
	for i, c := range []context.Context{dead, live} {
		name := []string{"dead-f", "live-f"}[i]
		a, _, _, err := e.srv.CreateOpen(c, proto.CreateIn{Parent: proto.RootIno, Name: name, Mode: 0644}, proto.AccessReadWrite)
		e.must(err)
		e.must(e.srv.Unlink(c, proto.RootIno, name))
		inos = append(inos, a.Ino)
	}
	// 60 ms on, the live session renews (its lease now ends at 160 ms);
	// at 120 ms the dead one's lease (100 ms) is over, the live one's not.
	clock.Add(int64(60 * time.Millisecond))
	_, err := e.srv.RenewSession(live)
	e.must(err)
	clock.Add(int64(60 * time.Millisecond))
	waitFor(t, "the dead session's orphan to be reclaimed", func() bool {
		_, err := e.srv.GetAttr(ctx, inos[0])
		return errors.Is(err, syscall.ENOENT)
	})
	waitFor(t, "its objects to be removed", func() bool { return len(e.storage.Removed()) == 1 })
	if got := e.storage.Removed()[0].Obj.Ino; got != inos[0] {
		t.Fatalf("removed objects of inode %d, want %d", got, inos[0])
	}
	if _, err := e.srv.GetAttr(ctx, inos[1]); err != nil {
		t.Fatalf("the live session's open unlinked file: %v", err)
	}
	if o, _ := e.srv.Orphans(); !slices.Equal(o, inos[1:]) {
		t.Fatalf("orphans %v, want %v", o, inos[1:])
	}
	if n := e.srv.Sessions(); n != 1 {
		t.Fatalf("%d sessions, want 1", n)
	}

	// The dead session comes back: everything that needs its handles is
	// stale, reclaiming them is refused (no restart), a new session works.
	_, err = e.srv.RenewSession(dead)
	wantErrno(t, "renew of an expired session", err, syscall.ESTALE)
	wantErrno(t, "release", e.srv.Release(dead, inos[0]), syscall.ESTALE)
	wantErrno(t, "release many", e.srv.ReleaseMany(dead, inos[:1]), syscall.ESTALE)
	_, err = e.srv.WriteDone(dead, inos[0], 10, 0, proto.NoBlocks)
	wantErrno(t, "writedone", err, syscall.ESTALE)
	_, err = e.srv.SetAttr(dead, inos[0], proto.SetAttrIn{Valid: proto.SetSize | proto.SetHandle})
	wantErrno(t, "truncate through a handle", err, syscall.ESTALE)
	_, _, err = e.srv.Open(dead, proto.RootIno, proto.AccessRead)
	wantErrno(t, "open", err, syscall.ESTALE)
	_, err = e.srv.OpenSession(dead, []proto.OpenHandle{{Ino: inos[0], Count: 1, Write: true}})
	wantErrno(t, "reclaim outside a grace period", err, syscall.ESTALE)
	again := remote("dead", 3)
	_, err = e.srv.OpenSession(again, nil)
	e.must(err)
	_, _, err = e.srv.Open(again, proto.RootIno, proto.AccessRead)
	e.must(err)
	e.must(e.srv.CloseSession(again))
	if n := e.srv.OpenCount(proto.RootIno); n != 0 {
		t.Fatalf("open count %d after the session closed", n)
	}
}

// TestSessionReclaimAfterRestart: after a restart the server knows no
// sessions; within the grace period a client re-registers its session with
// the handles it holds and they count again, a file unlinked meanwhile
// stays an orphan, and a reclaim naming an inode that is gone is refused
// as a whole.
func TestSessionReclaimAfterRestart(t *testing.T) {
	e := newEnv(t)
	e.addTarget("t1", 1<<30)
	a := remote("a", 1)
	_, err := e.srv.OpenSession(a, nil)
	e.must(err)
	f, _, _, err := e.srv.CreateOpen(a, proto.CreateIn{Parent: proto.RootIno, Name: "f", Mode: 0644}, proto.AccessReadWrite)
	e.must(err)
	e.must(e.srv.Unlink(a, proto.RootIno, "f"))
	g, _, _, err := e.srv.CreateOpen(a, proto.CreateIn{Parent: proto.RootIno, Name: "g", Mode: 0644}, proto.AccessRead)
	e.must(err)
	e.restart()
	if !e.srv.inGrace() {
		t.Fatal("no grace period after a restart")
	}
	_, err = e.srv.RenewSession(a)
	wantErrno(t, "renew of a session from before the restart", err, syscall.ESTALE)
	// Unlinked before the client is back: kept as an orphan.
	e.must(e.srv.Unlink(remote("b", 2), proto.RootIno, "g"))
	if _, err := e.srv.GetAttr(ctx, g.Ino); err != nil {
		t.Fatalf("file unlinked in the grace period: %v", err)
	}
	_, err = e.srv.OpenSession(a, []proto.OpenHandle{{Ino: f.Ino, Count: 1, Write: true}, {Ino: 999, Count: 1}})
	wantErrno(t, "reclaim of an inode that does not exist", err, syscall.ESTALE)
	if n := e.srv.OpenCount(f.Ino); n != 0 {
		t.Fatalf("a refused reclaim counted %d handles", n)
	}
	_, err = e.srv.OpenSession(a, []proto.OpenHandle{{Ino: f.Ino, Count: 2, Write: true}, {Ino: g.Ino, Count: 1}})
	e.must(err)
	if n, m := e.srv.OpenCount(f.Ino), e.srv.OpenCount(g.Ino); n != 2 || m != 1 {
		t.Fatalf("open counts %d, %d after the reclaim, want 2, 1", n, m)
	}
	if !e.srv.holdsWriteOpen(session{remote: true, name: "a", id: proto.SessionID{1}}, f.Ino) {
		t.Fatal("a reclaimed write handle does not count as one")
	}
	e.must(e.srv.ReleaseMany(a, []proto.Ino{f.Ino, f.Ino, g.Ino}))
	if o, _ := e.srv.Orphans(); len(o) != 2 {
		t.Fatalf("orphans %v reclaimed within the grace period", o)
	}
}

// TestSessionOpenErrors: bad session requests.
func TestSessionOpenErrors(t *testing.T) {
	e := newEnv(t)
	_, err := e.srv.OpenSession(transport.WithPeer(proto.WithCred(ctx, proto.Cred{}), transport.Peer{Role: transport.RoleClient}), nil)
	wantErrno(t, "session id 0", err, syscall.EINVAL)
	e.restart()
	_, err = e.srv.OpenSession(remote("a", 1), []proto.OpenHandle{{Ino: proto.RootIno, Count: 0}})
	wantErrno(t, "reclaim of 0 handles", err, syscall.EINVAL)
	// A sessionless remote client may write through no handle: WriteDone
	// is checked against its permissions instead, and it drops nothing.
	nosess := transport.WithPeer(proto.WithCred(ctx, proto.Cred{}), transport.Peer{Role: transport.RoleClient, Name: "tool"})
	e.must(e.srv.Release(nosess, proto.RootIno))
	if _, err := New(Options{Store: e.st, SessionLease: -time.Second}); err == nil {
		t.Fatal("negative lease accepted")
	}
}

// TestOpenReleaseRetry: an Open or Release sent again with the same
// sequence number (its reply was lost) counts or drops its handle once.
func TestOpenReleaseRetry(t *testing.T) {
	e := newEnv(t)
	a := remote("a", 1)
	_, err := e.srv.OpenSession(a, nil)
	e.must(err)
	seq := func(n uint64) context.Context { return proto.WithSeq(a, n) }
	for range 2 {
		_, _, err := e.srv.Open(seq(1), proto.RootIno, proto.AccessRead)
		e.must(err)
	}
	_, _, err = e.srv.Open(seq(2), proto.RootIno, proto.AccessRead)
	e.must(err)
	if n := e.srv.OpenCount(proto.RootIno); n != 2 {
		t.Fatalf("%d handles after an open, its retry and another open, want 2", n)
	}
	for range 2 {
		e.must(e.srv.ReleaseMany(seq(3), []proto.Ino{proto.RootIno}))
	}
	if n := e.srv.OpenCount(proto.RootIno); n != 1 {
		t.Fatalf("%d handles after a release and its retry, want 1", n)
	}
	// A failed open keeps no handle, and neither does its retry.
	for range 2 {
		_, _, err := e.srv.Open(seq(4), 12345, proto.AccessRead)
		wantErrno(t, "open of nothing", err, syscall.ENOENT)
	}
	if n := e.srv.OpenCount(12345); n != 0 {
		t.Fatalf("%d handles on a missing inode", n)
	}
}
