package meta

import (
	"bytes"
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/weft-fs/weft/capability"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/transport"
)

var testCapKey = bytes.Repeat([]byte{3}, capability.KeySize)

func capEnv(t *testing.T) (*env, *capability.Key) {
	e := newEnv(t, func(o *Options) {
		o.CapabilityKey = testCapKey
		o.CapabilityLifetime = time.Minute
	})
	e.addTarget("t1", 1<<30)
	k, err := capability.NewKey(0, testCapKey)
	if err != nil {
		t.Fatal(err)
	}
	return e, k
}

// verify checks that b is a capability for ino granting exactly want,
// issued now for a minute, to holder.
func (e *env) verifyCap(k *capability.Key, b []byte, ino proto.Ino, want proto.Access, holder string) {
	e.t.Helper()
	c, err := k.Verify(b, e.clock.Now())
	if err != nil {
		e.t.Fatal(err)
	}
	if c.Ino != ino || c.Rights != want || !c.Issued.Equal(e.clock.Now()) || c.Lifetime() != time.Minute || c.Holder != holder {
		e.t.Fatalf("capability %+v, want inode %d rights %v holder %q", c, ino, want, holder)
	}
}

func TestOpenChecksAccess(t *testing.T) {
	e, k := capEnv(t)
	a, err := e.srv.Create(ctx, proto.CreateIn{Parent: proto.RootIno, Name: "f", Mode: syscall.S_IFREG | 0o640, Uid: 1000, Gid: 100})
	e.must(err)
	owner := proto.WithCred(ctx, proto.Cred{Uid: 1000, Gid: 100})
	group := proto.WithCred(ctx, proto.Cred{Uid: 1001, Gid: 5, Groups: []uint32{100}})
	other := proto.WithCred(ctx, proto.Cred{Uid: 1002, Gid: 5})
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want proto.Access
		ok   bool
	}{
		{"owner rw", owner, proto.AccessReadWrite, true},
		{"group r", group, proto.AccessRead, true},
		{"group w", group, proto.AccessWrite, false},
		{"group rw", group, proto.AccessReadWrite, false},
		{"other r", other, proto.AccessRead, false},
		{"in-process root", ctx, proto.AccessReadWrite, true},
		{"root", proto.WithCred(ctx, proto.RootCred), proto.AccessReadWrite, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.srv.OpenCount(a.Ino)
			_, cp, err := e.srv.Open(tc.ctx, a.Ino, tc.want)
			if !tc.ok {
				if !errors.Is(err, syscall.EACCES) {
					t.Fatalf("err %v, want EACCES", err)
				}
				if e.srv.OpenCount(a.Ino) != before {
					t.Fatal("a refused open left a handle counted")
				}
				if _, err := e.srv.Capability(tc.ctx, a.Ino, tc.want); !errors.Is(err, syscall.EACCES) {
					t.Fatalf("Capability: %v, want EACCES", err)
				}
				return
			}
			e.must(err)
			e.verifyCap(k, cp, a.Ino, tc.want, "")
			e.must(e.srv.Release(ctx, a.Ino))
			cp, err = e.srv.Capability(tc.ctx, a.Ino, tc.want)
			e.must(err)
			e.verifyCap(k, cp, a.Ino, tc.want, "")
		})
	}
	if _, _, err := e.srv.Open(ctx, a.Ino, 8); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("unknown access bits: %v", err)
	}
}

// execve opens a binary to read it with execute permission alone: an
// execute-only file may be opened for exec, which grants read.
func TestOpenForExec(t *testing.T) {
	e, k := capEnv(t)
	a, err := e.srv.Create(ctx, proto.CreateIn{Parent: proto.RootIno, Name: "bin", Mode: syscall.S_IFREG | 0o711})
	e.must(err)
	user := proto.WithCred(ctx, proto.Cred{Uid: 1000, Gid: 100})
	if _, _, err := e.srv.Open(user, a.Ino, proto.AccessRead); !errors.Is(err, syscall.EACCES) {
		t.Fatalf("read of an execute-only file: %v", err)
	}
	_, cp, err := e.srv.Open(user, a.Ino, proto.AccessExec)
	e.must(err)
	e.verifyCap(k, cp, a.Ino, proto.AccessRead, "")
	cp, err = e.srv.Capability(user, a.Ino, proto.AccessExec) // its renewal
	e.must(err)
	e.verifyCap(k, cp, a.Ino, proto.AccessRead, "")
	d, err := e.srv.Create(ctx, proto.CreateIn{Parent: proto.RootIno, Name: "data", Mode: syscall.S_IFREG | 0o644})
	e.must(err)
	if _, _, err := e.srv.Open(ctx, d.Ino, proto.AccessExec); !errors.Is(err, syscall.EACCES) {
		t.Fatalf("exec of a file nobody may execute, as root: %v", err)
	}
}

func TestCapabilityBoundToClient(t *testing.T) {
	e, k := capEnv(t)
	a, err := e.srv.Create(ctx, proto.CreateIn{Parent: proto.RootIno, Name: "f", Mode: syscall.S_IFREG | 0o644})
	e.must(err)
	c := proto.WithCred(transport.WithPeer(ctx, transport.Peer{Addr: "10.0.0.9:1", Role: transport.RoleClient, Name: "node17"}), proto.Cred{Uid: 1000, Gid: 100})
	cp, err := e.srv.Capability(c, a.Ino, proto.AccessRead)
	e.must(err)
	e.verifyCap(k, cp, a.Ino, proto.AccessRead, "node17")

	d, err := e.srv.Mkdir(ctx, proto.RootIno, "d", 0o755, 0, 0)
	e.must(err)
	if _, err := e.srv.Capability(ctx, d.Ino, proto.AccessRead); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("capability for a directory: %v", err)
	}
	if _, err := e.srv.Capability(ctx, 9999, proto.AccessRead); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("capability for no inode: %v", err)
	}
}

func TestCreateOpenCapability(t *testing.T) {
	e, k := capEnv(t)
	user := proto.WithCred(ctx, proto.Cred{Uid: 1000, Gid: 100})
	home, err := e.srv.Mkdir(ctx, proto.RootIno, "home", 0o755, 1000, 100) // the user's own directory
	e.must(err)
	// open(O_CREAT|O_RDWR, 0444) succeeds for the file it creates...
	a, _, cp, err := e.srv.CreateOpen(user, proto.CreateIn{Parent: home.Ino, Name: "ro", Mode: syscall.S_IFREG | 0o444, Uid: 1000, Gid: 100}, proto.AccessReadWrite)
	e.must(err)
	e.verifyCap(k, cp, a.Ino, proto.AccessReadWrite, "")
	// ...but not once it exists.
	if _, _, _, err := e.srv.CreateOpen(user, proto.CreateIn{Parent: home.Ino, Name: "ro", Mode: syscall.S_IFREG | 0o444}, proto.AccessWrite); !errors.Is(err, syscall.EACCES) {
		t.Fatalf("reopen of a read-only file for writing: %v", err)
	}
	if n := e.srv.OpenCount(a.Ino); n != 1 {
		t.Fatalf("open count %d after a refused reopen, want 1", n)
	}
	_, _, cp, err = e.srv.CreateOpen(user, proto.CreateIn{Parent: home.Ino, Name: "ro", Mode: syscall.S_IFREG | 0o444}, proto.AccessRead)
	e.must(err)
	e.verifyCap(k, cp, a.Ino, proto.AccessRead, "")
	// Create only: no capability.
	_, _, cp, err = e.srv.CreateOpen(user, proto.CreateIn{Parent: home.Ino, Name: "g", Mode: syscall.S_IFREG | 0o644, Uid: 1000, Gid: 100}, 0)
	if err != nil || cp != nil {
		t.Fatalf("create without open: capability %x, %v", cp, err)
	}
}

// A server without a key checks access all the same, and issues none.
func TestNoCapabilityKey(t *testing.T) {
	e := newEnv(t)
	e.addTarget("t1", 1<<30)
	a, err := e.srv.Create(ctx, proto.CreateIn{Parent: proto.RootIno, Name: "f", Mode: syscall.S_IFREG | 0o600})
	e.must(err)
	_, cp, err := e.srv.Open(ctx, a.Ino, proto.AccessReadWrite)
	if err != nil || cp != nil {
		t.Fatalf("open: %x, %v", cp, err)
	}
	if _, _, err := e.srv.Open(proto.WithCred(ctx, proto.Cred{Uid: 5}), a.Ino, proto.AccessRead); !errors.Is(err, syscall.EACCES) {
		t.Fatalf("other user: %v", err)
	}
	if _, err := New(Options{Store: e.st, CapabilityKey: []byte("short")}); err == nil {
		t.Fatal("a short capability key accepted")
	}
}

// A refused open of an orphan leaves its open count as it was: the orphan
// is reclaimed when its real handle closes.
func TestRefusedOpenOfOrphan(t *testing.T) {
	e, _ := capEnv(t)
	a, err := e.srv.Create(ctx, proto.CreateIn{Parent: proto.RootIno, Name: "f", Mode: syscall.S_IFREG | 0o600})
	e.must(err)
	_, _, err = e.srv.Open(ctx, a.Ino, proto.AccessRead)
	e.must(err)
	e.must(e.srv.Unlink(ctx, proto.RootIno, "f"))
	if _, _, err := e.srv.Open(proto.WithCred(ctx, proto.Cred{Uid: 7}), a.Ino, proto.AccessRead); !errors.Is(err, syscall.EACCES) {
		t.Fatalf("open by another user: %v", err)
	}
	e.must(e.srv.Release(ctx, a.Ino))
	deadline := time.Now().Add(2 * time.Minute) // a hang guard
	for {
		if _, err := e.srv.GetAttr(ctx, a.Ino); errors.Is(err, syscall.ENOENT) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("orphan not reclaimed")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
