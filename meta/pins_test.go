package meta

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/transport"
)

// TestPinOpens: a session pins opens it made from its lease cache
// (client.OpenCached) only on inodes it was granted a lease on; an unlink
// of a file another session holds a lease on leaves it an orphan until
// that session acknowledged the break (having pinned its opens, or not),
// and reclaims it at once when no other session holds one.
func TestPinOpens(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.SessionLease = time.Hour })
	e.addTarget("t1", 1<<30)
	client := func(id byte) context.Context {
		return proto.WithSession(proto.WithCred(transport.WithPeer(ctx, transport.Peer{Addr: "10.0.0.9:1", Role: transport.RoleClient, Name: "c"}),
			proto.Cred{Uid: 1000, Gid: 1000}), proto.SessionID{id})
	}
	a, b, c := client(1), client(2), client(3)
	_, err := e.srv.SetAttr(ctx, proto.RootIno, proto.SetAttrIn{Valid: proto.SetMode, Mode: 0o777})
	e.must(err)
	// Each session polls as a mount does, acknowledging every
	// invalidation at once; hooks[i], if set, runs on what session i is
	// told before it acknowledges.
	var hooks [3]atomic.Pointer[func([]proto.LeaseInval)]
	stop, cancel := context.WithCancel(context.Background())
	var polling sync.WaitGroup
	defer func() { cancel(); polling.Wait() }()
	for i, who := range []context.Context{a, b, c} {
		_, err := e.srv.OpenSession(who, nil)
		e.must(err)
		ended, end := context.WithCancel(who)
		end()
		_, err = e.srv.LeasePoll(ended, 0) // a holder from now on
		e.must(err)
		polling.Add(1)
		go func() {
			defer polling.Done()
			var ack uint64
			for stop.Err() == nil {
				pctx, done := context.WithTimeout(who, 50*time.Millisecond)
				p, err := e.srv.LeasePoll(pctx, ack)
				done()
				if err != nil {
					continue
				}
				if h := hooks[i].Load(); h != nil && len(p.Invals) > 0 {
					(*h)(p.Invals)
				}
				for _, iv := range p.Invals {
					ack = max(ack, iv.Seq)
				}
			}
		}()
	}
	mk := func(name string) proto.Ino {
		t.Helper()
		f, err := e.srv.Create(a, proto.CreateIn{Parent: proto.RootIno, Name: name, Mode: syscall.S_IFREG | 0o644, Uid: 1000, Gid: 1000})
		e.must(err)
		_, err = e.srv.Lookup(b, proto.RootIno, name) // b holds a lease on it
		e.must(err)
		return f.Ino
	}
	pin := func(who context.Context, ino proto.Ino) bool {
		t.Helper()
		done, err := e.srv.PinOpens(who, []proto.OpenHandle{{Ino: ino, Count: 1}})
		e.must(err)
		return done[0]
	}
	orphan := func(ino proto.Ino) bool {
		t.Helper()
		inos, err := e.srv.Orphans()
		e.must(err)
		return slices.Contains(inos, ino)
	}
	reclaimed := func(ino proto.Ino) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); orphan(ino); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("inode %d still an orphan", ino)
			}
		}
		if _, err := e.srv.GetAttr(ctx, ino); !isErrno(err, syscall.ENOENT) {
			t.Fatalf("inode %d after its reclaim: %v, want ENOENT", ino, err)
		}
	}
	// unlink removes name as a; before, if set, runs when b is told of
	// ino, before b acknowledges.
	unlink := func(name string, ino proto.Ino, before func()) {
		t.Helper()
		if before != nil {
			var once sync.Once
			h := func(ivs []proto.LeaseInval) {
				for _, iv := range ivs {
					if iv.Ino == ino {
						once.Do(before)
					}
				}
			}
			hooks[1].Store(&h)
			defer hooks[1].Store(nil)
		}
		e.must(e.srv.Unlink(a, proto.RootIno, name))
	}

	t.Run("bad pins", func(t *testing.T) {
		f := mk("bad")
		for _, p := range []proto.OpenHandle{{Ino: f, Count: 1, Write: true}, {Ino: f}, {Ino: f, Count: maxReclaimCount + 1}} {
			if _, err := e.srv.PinOpens(b, []proto.OpenHandle{p}); !isErrno(err, syscall.EINVAL) {
				t.Errorf("pin %+v: %v, want EINVAL", p, err)
			}
		}
		if n := e.srv.OpenCount(f); n != 0 {
			t.Errorf("refused pins counted %d opens", n)
		}
	})

	t.Run("not readable by every class", func(t *testing.T) {
		// A pin is an open for reading without the permission check:
		// only of files any identity may read.
		f := mk("private")
		_, err := e.srv.SetAttr(a, f, proto.SetAttrIn{Valid: proto.SetMode, Mode: 0o640})
		e.must(err)
		if pin(c, f) {
			t.Errorf("a pin of a 0640 file was counted")
		}
		if n := e.srv.OpenCount(f); n != 0 {
			t.Errorf("%d opens counted", n)
		}
	})

	t.Run("a retry is given the first answer", func(t *testing.T) {
		f := mk("retried")
		_, _, err := e.srv.Open(c, f, proto.AccessRead) // a real open of the same session
		e.must(err)
		_, err = e.srv.SetAttr(a, f, proto.SetAttrIn{Valid: proto.SetMode, Mode: 0o600})
		e.must(err)
		req := proto.WithSeq(c, 1<<40)
		for try := range 2 {
			done, err := e.srv.PinOpens(req, []proto.OpenHandle{{Ino: f, Count: 1}})
			e.must(err)
			if done[0] {
				t.Fatalf("try %d: a refused pin reported counted (its release would drop the real open's count)", try)
			}
		}
		if n := e.srv.OpenCount(f); n != 1 {
			t.Errorf("%d opens counted, want the real one", n)
		}
	})

	t.Run("pinned before the unlink's break is acknowledged", func(t *testing.T) {
		f := mk("pinned")
		unlink("pinned", f, func() {
			if !pin(b, f) {
				t.Errorf("the lease holder's pin of inode %d was refused during the unlink's break", f)
			}
		})
		if n := e.srv.OpenCount(f); n != 1 {
			t.Fatalf("%d opens of the unlinked file, want the pinned one", n)
		}
		if !orphan(f) {
			t.Fatalf("inode %d is not kept as an orphan while pinned", f)
		}
		e.must(e.srv.ReleaseMany(b, []proto.Ino{f}))
		reclaimed(f)
	})

	t.Run("acknowledged without a pin", func(t *testing.T) {
		f := mk("unpinned")
		unlink("unpinned", f, nil)
		reclaimed(f)
	})

	t.Run("lease given back before the unlink", func(t *testing.T) {
		// b's lease was broken (a's chmod) and b acknowledged: b's
		// client could open nothing from its cache since, so the unlink
		// reclaims the file itself.
		f := mk("given")
		_, err := e.srv.SetAttr(a, f, proto.SetAttrIn{Valid: proto.SetMode, Mode: 0o600})
		e.must(err) // returns once b acknowledged
		unlink("given", f, nil)
		if orphan(f) {
			t.Errorf("inode %d left an orphan though no other session held a lease on it any more", f)
		}
	})

	t.Run("nobody else holds a lease", func(t *testing.T) {
		f, err := e.srv.Create(a, proto.CreateIn{Parent: proto.RootIno, Name: "mine", Mode: syscall.S_IFREG | 0o644, Uid: 1000, Gid: 1000})
		e.must(err)
		unlink("mine", f.Ino, nil)
		if orphan(f.Ino) {
			t.Errorf("inode %d left an orphan though only its remover held a lease on it", f.Ino)
		}
		if _, err := e.srv.GetAttr(ctx, f.Ino); !isErrno(err, syscall.ENOENT) {
			t.Errorf("inode %d right after its unlink: %v, want ENOENT (reclaimed by the unlink itself)", f.Ino, err)
		}
	})
}
