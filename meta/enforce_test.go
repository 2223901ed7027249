package meta

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"syscall"
	"testing"

	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/transport"
)

var (
	credU  = proto.Cred{Uid: 1000, Gid: 1000, Groups: []uint32{1000, 50}}
	credV  = proto.Cred{Uid: 2000, Gid: 2000}
	credW  = proto.Cred{Uid: 3000, Gid: 3000, Groups: []uint32{1000}} // in u's group
	asRoot = proto.WithCred(ctx, proto.Cred{})
	asU    = proto.WithCred(ctx, credU)
	asV    = proto.WithCred(ctx, credV)
	asW    = proto.WithCred(ctx, credW)
)

// permEnv builds, as the trusted in-process caller:
//
//	/pub      0777 root     /tmp 01777 root     /home 0755 root
//	/priv     0700 u        /home/u 0755 u      /home/u/f 0644 u:1000
func permEnv(t *testing.T) *env {
	e := newEnv(t)
	e.addTarget("t1", 1<<30)
	mk := func(parent proto.Ino, name string, mode, uid, gid uint32) proto.Attr {
		a, err := e.srv.Mkdir(ctx, parent, name, mode, uid, gid)
		e.must(err)
		return a
	}
	mk(proto.RootIno, "pub", 0777, 0, 0)
	mk(proto.RootIno, "tmp", 01777, 0, 0)
	mk(proto.RootIno, "priv", 0700, 1000, 1000)
	home := mk(proto.RootIno, "home", 0755, 0, 0)
	hu := mk(home.Ino, "u", 0755, 1000, 1000)
	_, err := e.srv.Create(ctx, proto.CreateIn{Parent: hu.Ino, Name: "f", Mode: 0644, Uid: 1000, Gid: 1000})
	e.must(err)
	return e
}

func (e *env) inoOf(p string) proto.Ino {
	e.t.Helper()
	a, err := e.resolve(p)
	e.must(err)
	return a.Ino
}

func (e *env) attr(p string) proto.Attr {
	e.t.Helper()
	a, err := e.resolve(p)
	e.must(err)
	return a
}

func wantErrno(t *testing.T, what string, err error, want syscall.Errno) {
	t.Helper()
	if want == 0 && err != nil {
		t.Errorf("%s: %v, want success", what, err)
	}
	if want != 0 && !errors.Is(err, want) {
		t.Errorf("%s: %v, want %v", what, err, want)
	}
}

// TestPermNamespace: search, read, write and sticky rules of lookup,
// readdir, create, unlink, rename, as Linux.
func TestPermNamespace(t *testing.T) {
	e := permEnv(t)
	s := e.srv
	pub, tmp, priv, home, hu := e.inoOf("/pub"), e.inoOf("/tmp"), e.inoOf("/priv"), e.inoOf("/home"), e.inoOf("/home/u")
	for _, tc := range []struct {
		name string
		op   func() error
		want syscall.Errno
	}{
		{"lookup in 0700 dir of another", func() error { _, err := s.Lookup(asV, priv, "x"); return err }, syscall.EACCES},
		{"lookup in own 0700 dir", func() error { _, err := s.Lookup(asU, priv, "x"); return err }, syscall.ENOENT},
		{"lookup by root", func() error { _, err := s.Lookup(asRoot, priv, "x"); return err }, syscall.ENOENT},
		{"readdir of 0700 dir of another", func() error { _, err := s.ReadDir(asV, priv, "", 0); return err }, syscall.EACCES},
		{"readdir of own dir", func() error { _, err := s.ReadDir(asU, priv, "", 0); return err }, 0},
		{"mkdir in 0755 root dir", func() error { _, err := s.Mkdir(asU, home, "x", 0755, 0, 0); return err }, syscall.EACCES},
		{"mkdir in 0777 dir", func() error { _, err := s.Mkdir(asU, pub, "ud", 0755, 0, 0); return err }, 0},
		{"mkdir existing name without write: EEXIST", func() error { _, err := s.Mkdir(asV, hu, "f", 0755, 0, 0); return err }, syscall.EEXIST},
		{"create in another's 0755 dir", func() error {
			_, err := s.Create(asV, proto.CreateIn{Parent: hu, Name: "g", Mode: 0644})
			return err
		}, syscall.EACCES},
		{"open-create of an existing file needs no write on the dir", func() error {
			_, err := s.Create(asV, proto.CreateIn{Parent: hu, Name: "f", Mode: 0644})
			return err
		}, 0},
		{"symlink in another's dir", func() error { _, err := s.Symlink(asV, hu, "l", "f", 0, 0); return err }, syscall.EACCES},
		{"link into another's dir", func() error { _, err := s.Link(asV, e.inoOf("/home/u/f"), hu, "h"); return err }, syscall.EACCES},
		{"unlink in another's dir", func() error { return s.Unlink(asV, hu, "f") }, syscall.EACCES},
		{"rename out of another's dir", func() error { return s.Rename(asV, hu, "f", pub, "f", 0) }, syscall.EACCES},
		{"rmdir in 0755 root dir", func() error { return s.Rmdir(asU, proto.RootIno, "pub") }, syscall.EACCES},
	} {
		wantErrno(t, tc.name, tc.op(), tc.want)
	}
	if a := e.attr("/pub/ud"); a.Uid != 1000 || a.Gid != 1000 {
		t.Errorf("mkdir by u owned by %d:%d", a.Uid, a.Gid)
	}

	// Sticky /tmp: only the file's owner, the dir's owner or root.
	uf, err := s.Create(asU, proto.CreateIn{Parent: tmp, Name: "uf", Mode: 0666, Uid: 0, Gid: 0})
	e.must(err)
	if uf.Uid != 1000 || uf.Gid != 1000 {
		t.Errorf("create by u owned by %d:%d: the request's uid/gid were used", uf.Uid, uf.Gid)
	}
	wantErrno(t, "unlink another's file in sticky dir", s.Unlink(asV, tmp, "uf"), syscall.EPERM)
	wantErrno(t, "rename another's file in sticky dir", s.Rename(asV, tmp, "uf", tmp, "vf", 0), syscall.EPERM)
	_, err = s.Create(asV, proto.CreateIn{Parent: tmp, Name: "vf", Mode: 0666})
	e.must(err)
	wantErrno(t, "replace another's file in sticky dir", s.Rename(asU, tmp, "uf", tmp, "vf", 0), syscall.EPERM)
	wantErrno(t, "owner renames in sticky dir", s.Rename(asU, tmp, "uf", tmp, "uf2", 0), 0)
	wantErrno(t, "root unlinks in sticky dir", s.Unlink(asRoot, tmp, "uf2"), 0)

	// A directory moved to another parent needs write on itself.
	_, err = s.Mkdir(asU, pub, "ro", 0555, 0, 0)
	e.must(err)
	_, err = s.Mkdir(asU, pub, "to", 0777, 0, 0)
	e.must(err)
	wantErrno(t, "move 0555 dir to another parent", s.Rename(asU, pub, "ro", e.inoOf("/pub/to"), "ro", 0), syscall.EACCES)
	wantErrno(t, "rename 0555 dir in place", s.Rename(asU, pub, "ro", pub, "ro2", 0), 0)
}

// TestPermSetAttr: chmod, chown, utimes and truncate rules.
func TestPermSetAttr(t *testing.T) {
	e := permEnv(t)
	s := e.srv
	f := e.inoOf("/home/u/f")
	set := func(c context.Context, in proto.SetAttrIn) (proto.Attr, error) { return s.SetAttr(c, f, in) }
	mode := func() uint32 { return e.attr("/home/u/f").Mode & 07777 }
	for _, tc := range []struct {
		name string
		c    context.Context
		in   proto.SetAttrIn
		want syscall.Errno
	}{
		{"chmod by non-owner", asV, proto.SetAttrIn{Valid: proto.SetMode, Mode: 0777}, syscall.EPERM},
		{"chmod by owner", asU, proto.SetAttrIn{Valid: proto.SetMode, Mode: 0646}, 0},
		{"chown uid by owner", asU, proto.SetAttrIn{Valid: proto.SetUid, Uid: 2000}, syscall.EPERM},
		{"chown to own uid by owner", asU, proto.SetAttrIn{Valid: proto.SetUid, Uid: 1000}, 0},
		{"chgrp by owner to a group not theirs", asU, proto.SetAttrIn{Valid: proto.SetGid, Gid: 2000}, syscall.EPERM},
		{"chgrp by owner to a supplementary group", asU, proto.SetAttrIn{Valid: proto.SetGid, Gid: 50}, 0},
		{"chgrp by non-owner in the group", asW, proto.SetAttrIn{Valid: proto.SetGid, Gid: 1000}, syscall.EPERM},
		{"explicit mtime by non-owner with write", asV, proto.SetAttrIn{Valid: proto.SetMtime, Mtime: 5}, syscall.EPERM},
		{"UTIME_NOW both by non-owner with write", asV, proto.SetAttrIn{Valid: proto.SetAtimeNow | proto.SetMtimeNow}, 0},
		{"UTIME_NOW atime only by non-owner", asV, proto.SetAttrIn{Valid: proto.SetAtimeNow}, syscall.EPERM},
		{"explicit times by owner", asU, proto.SetAttrIn{Valid: proto.SetAtime | proto.SetMtime, Atime: 1, Mtime: 2}, 0},
		{"truncate by non-owner with write (0646)", asV, proto.SetAttrIn{Valid: proto.SetSize | proto.SetMtimeNow, Size: 0}, 0},
		{"chmod to 0644 by owner", asU, proto.SetAttrIn{Valid: proto.SetMode, Mode: 0644}, 0},
		{"UTIME_NOW both by non-owner without write", asV, proto.SetAttrIn{Valid: proto.SetAtimeNow | proto.SetMtimeNow}, syscall.EACCES},
		{"truncate by non-owner without write", asV, proto.SetAttrIn{Valid: proto.SetSize, Size: 1}, syscall.EACCES},
		{"truncate claiming a handle it does not hold", asV, proto.SetAttrIn{Valid: proto.SetSize | proto.SetHandle, Size: 1}, syscall.EACCES},
		{"root does anything", asRoot, proto.SetAttrIn{Valid: proto.SetUid | proto.SetGid | proto.SetMode, Uid: 1000, Gid: 3000, Mode: 0644}, 0},
	} {
		_, err := set(tc.c, tc.in)
		wantErrno(t, tc.name, err, tc.want)
	}
	// The file is now u:3000, and u is not in group 3000: setgid is dropped.
	_, err := set(asU, proto.SetAttrIn{Valid: proto.SetMode, Mode: 02755})
	e.must(err)
	if m := mode(); m != 0755 {
		t.Errorf("chmod g+s by owner outside the group: mode %#o, want 0755", m)
	}
	_, err = set(asRoot, proto.SetAttrIn{Valid: proto.SetGid, Gid: 1000})
	e.must(err)
	_, err = set(asU, proto.SetAttrIn{Valid: proto.SetMode, Mode: 02755})
	e.must(err)
	if m := mode(); m != 02755 {
		t.Errorf("chmod g+s by owner in the group: mode %#o", m)
	}
	// chown clears setuid and a real setgid.
	_, err = set(asRoot, proto.SetAttrIn{Valid: proto.SetMode, Mode: 06755})
	e.must(err)
	_, err = set(asU, proto.SetAttrIn{Valid: proto.SetGid, Gid: 50})
	e.must(err)
	if m := mode(); m != 0755 {
		t.Errorf("chgrp of a setuid/setgid file: mode %#o, want 0755", m)
	}
	// ftruncate through a handle of the caller's own session opened for
	// writing: allowed even without write permission now (the open was
	// checked). A handle opened only for reading does not allow it.
	_, err = set(asRoot, proto.SetAttrIn{Valid: proto.SetMode, Mode: 0606})
	e.must(err)
	sessV := proto.WithSession(asV, proto.SessionID{2})
	_, _, err = s.Open(sessV, f, proto.AccessReadWrite)
	e.must(err)
	sessR := proto.WithSession(asV, proto.SessionID{4})
	_, _, err = s.Open(sessR, f, proto.AccessRead)
	e.must(err)
	_, err = set(asRoot, proto.SetAttrIn{Valid: proto.SetMode, Mode: 0604})
	e.must(err)
	_, err = set(sessV, proto.SetAttrIn{Valid: proto.SetSize | proto.SetHandle, Size: 3})
	wantErrno(t, "ftruncate through an open handle", err, 0)
	_, err = set(sessR, proto.SetAttrIn{Valid: proto.SetSize | proto.SetHandle, Size: 3})
	wantErrno(t, "ftruncate through a read-only handle", err, syscall.EACCES)
	_, err = set(proto.WithSession(asV, proto.SessionID{3}), proto.SetAttrIn{Valid: proto.SetSize | proto.SetHandle, Size: 3})
	wantErrno(t, "ftruncate claiming another session's handle", err, syscall.EACCES)
}

// TestPermKillSuid: a write or truncate by a non-root caller clears
// setuid, and setgid when group-exec is set; root's do not.
func TestPermKillSuid(t *testing.T) {
	e := permEnv(t)
	s := e.srv
	f := e.inoOf("/home/u/f")
	for _, tc := range []struct {
		mode, want uint32
		c          context.Context
		truncate   bool
	}{
		{06777, 0777, asV, false},
		{06767, 02767, asV, false}, // setgid without group-exec stays
		{06777, 06777, asRoot, false},
		{06777, 0777, asV, true},
		{06777, 06777, asRoot, true},
	} {
		_, err := s.SetAttr(ctx, f, proto.SetAttrIn{Valid: proto.SetMode, Mode: tc.mode})
		e.must(err)
		if tc.truncate {
			_, err = s.SetAttr(tc.c, f, proto.SetAttrIn{Valid: proto.SetSize, Size: 10})
		} else {
			_, err = s.WriteDone(tc.c, f, 100, 0, proto.NoBlocks)
		}
		e.must(err)
		if m := e.attr("/home/u/f").Mode & 07777; m != tc.want {
			t.Errorf("mode %#o after %s (truncate %v): %#o, want %#o", tc.mode, credName(tc.c), tc.truncate, m, tc.want)
		}
	}
	// WriteDone without write permission and without a handle opened for
	// writing is refused.
	_, err := s.SetAttr(ctx, f, proto.SetAttrIn{Valid: proto.SetMode, Mode: 0666})
	e.must(err)
	sess := proto.WithSession(asV, proto.SessionID{9})
	_, _, err = s.Open(sess, f, proto.AccessWrite)
	e.must(err)
	sessR := proto.WithSession(asV, proto.SessionID{10})
	_, _, err = s.Open(sessR, f, proto.AccessRead)
	e.must(err)
	_, err = s.SetAttr(ctx, f, proto.SetAttrIn{Valid: proto.SetMode, Mode: 0644})
	e.must(err)
	_, err = s.WriteDone(asV, f, 200, 0, proto.NoBlocks)
	wantErrno(t, "writedone without permission or handle", err, syscall.EACCES)
	_, err = s.WriteDone(sessR, f, 200, 0, proto.NoBlocks)
	wantErrno(t, "writedone through a read-only handle", err, syscall.EACCES)
	_, err = s.WriteDone(sess, f, 200, 0, proto.NoBlocks)
	wantErrno(t, "writedone through the session's handle", err, 0)
}

func credName(c context.Context) string {
	cr, _ := proto.CredFrom(c)
	if cr.Uid == 0 {
		return "root"
	}
	return "non-root"
}

// TestPermXattr: namespaces and permission rules of extended attributes.
func TestPermXattr(t *testing.T) {
	e := permEnv(t)
	s := e.srv
	f := e.inoOf("/home/u/f")
	fifo, err := s.Create(asU, proto.CreateIn{Parent: e.inoOf("/home/u"), Name: "p", Mode: syscall.S_IFIFO | 0666})
	e.must(err)
	e.must(s.SetXattr(asRoot, f, "trusted.t", []byte("1"), 0))
	e.must(s.SetXattr(asRoot, f, "security.s", []byte("1"), 0))
	e.must(s.SetXattr(asU, f, "user.u", []byte("1"), 0))
	for _, tc := range []struct {
		name string
		op   func() error
		want syscall.Errno
	}{
		{"set trusted by non-root", func() error { return s.SetXattr(asU, f, "trusted.x", nil, 0) }, syscall.EPERM},
		{"set security by non-root", func() error { return s.SetXattr(asU, f, "security.x", nil, 0) }, syscall.EPERM},
		{"remove trusted by non-root", func() error { return s.RemoveXattr(asU, f, "trusted.t") }, syscall.EPERM},
		{"get trusted by non-root", func() error { _, err := s.GetXattr(asU, f, "trusted.t"); return err }, syscall.ENODATA},
		{"get security by anyone", func() error { _, err := s.GetXattr(asV, f, "security.s"); return err }, 0},
		{"get user with read", func() error { _, err := s.GetXattr(asV, f, "user.u"); return err }, 0},
		{"set user without write", func() error { return s.SetXattr(asV, f, "user.v", nil, 0) }, syscall.EACCES},
		{"remove user without write", func() error { return s.RemoveXattr(asV, f, "user.u") }, syscall.EACCES},
		{"set user on a fifo", func() error { return s.SetXattr(asU, fifo.Ino, "user.x", nil, 0) }, syscall.EPERM},
		{"get user on a fifo", func() error { _, err := s.GetXattr(asU, fifo.Ino, "user.x"); return err }, syscall.ENODATA},
		{"set user on sticky dir by non-owner", func() error { return s.SetXattr(asU, e.inoOf("/tmp"), "user.x", nil, 0) }, syscall.EPERM},
	} {
		wantErrno(t, tc.name, tc.op(), tc.want)
	}
	names, err := s.ListXattr(asV, f)
	e.must(err)
	if slices.Contains(names, "trusted.t") || !slices.Contains(names, "user.u") || !slices.Contains(names, "security.s") {
		t.Errorf("non-root lists %v", names)
	}
	names, err = s.ListXattr(asRoot, f)
	e.must(err)
	if !slices.Contains(names, "trusted.t") {
		t.Errorf("root lists %v", names)
	}
	_, err = s.SetAttr(asU, f, proto.SetAttrIn{Valid: proto.SetMode, Mode: 0600})
	e.must(err)
	_, err = s.GetXattr(asV, f, "user.u")
	wantErrno(t, "get user without read", err, syscall.EACCES)
}

// TestSessionHandles: a session releases only its own handles; releasing
// a handle it does not hold changes nothing and succeeds.
func TestSessionHandles(t *testing.T) {
	e := permEnv(t)
	s := e.srv
	a := proto.WithSession(asU, proto.SessionID{0xa})
	b := proto.WithSession(asU, proto.SessionID{0xb})
	f := e.inoOf("/home/u/f")
	_, _, err := s.Open(a, f, proto.AccessRead)
	e.must(err)
	wantErrno(t, "release by a session without the handle", s.Release(b, f), 0)
	wantErrno(t, "release many by it", s.ReleaseMany(b, []proto.Ino{f, f}), 0)
	if n := s.OpenCount(f); n != 1 {
		t.Fatalf("open count %d after another session's releases, want 1", n)
	}
	e.must(s.Unlink(asU, e.inoOf("/home/u"), "f"))
	if _, err := s.GetAttr(ctx, f); err != nil {
		t.Fatalf("unlinked file open by A is gone: %v", err)
	}
	e.must(s.Release(a, f))
	waitFor(t, "reclaim after A's release", func() bool {
		_, err := s.GetAttr(ctx, f)
		return errors.Is(err, syscall.ENOENT)
	})
	// Remote peers: the same session id under different certificate names
	// is two sessions.
	e2 := permEnv(t)
	g := e2.inoOf("/home/u/f")
	id := proto.SessionID{7}
	p1 := proto.WithSession(transport.WithPeer(asU, transport.Peer{Addr: "10.0.0.1:1", Role: transport.RoleClient, Name: "n1"}), id)
	p2 := proto.WithSession(transport.WithPeer(asU, transport.Peer{Addr: "10.0.0.2:1", Role: transport.RoleClient, Name: "n2"}), id)
	// A remote session must be registered before it may hold handles.
	_, _, err = e2.srv.Open(p1, g, proto.AccessRead)
	wantErrno(t, "open in an unregistered session", err, syscall.ESTALE)
	_, _, err = e2.srv.Open(transport.WithPeer(asU, transport.Peer{Addr: "10.0.0.1:1", Role: transport.RoleClient, Name: "n1"}), g, proto.AccessRead)
	wantErrno(t, "open without a session id", err, syscall.EINVAL)
	for _, p := range []context.Context{p1, p2} {
		_, err := e2.srv.OpenSession(p, nil)
		e2.must(err)
	}
	_, _, err = e2.srv.Open(p1, g, proto.AccessRead)
	e2.must(err)
	e2.must(e2.srv.Release(p2, g))
	if n := e2.srv.OpenCount(g); n != 1 {
		t.Fatalf("open count %d after a release by another peer with the same session id", n)
	}
}

// TestAccessPeers: unauthenticated peers, the client allow-list and root
// squash, through a peer in ctx.
func TestAccessPeers(t *testing.T) {
	nets, err := ParsePrefixes([]string{"10.1.0.0/16", "fd00::1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParsePrefixes([]string{"10.0.0.0/40"}); err == nil {
		t.Fatal("bad prefix parsed")
	}
	e := newEnv(t, func(o *Options) {
		o.Access = Access{RootSquash: true, RootSquashExempt: nets[:1], ClientNetworks: []netipPrefix{mustPrefix("10.0.0.0/8"), nets[1]}}
	})
	_, err = e.srv.Mkdir(ctx, proto.RootIno, "root-only", 0700, 0, 0)
	e.must(err)
	peer := func(addr string, role transport.Role, cr proto.Cred) context.Context {
		return transport.WithPeer(proto.WithCred(ctx, cr), transport.Peer{Addr: addr, Role: role, Name: "x"})
	}
	ri := proto.RootIno
	for _, tc := range []struct {
		name string
		c    context.Context
		want syscall.Errno
	}{
		{"root client squashed", peer("10.2.0.1:99", transport.RoleClient, proto.Cred{}), syscall.EACCES},
		{"root client from an exempt network", peer("10.1.0.1:99", transport.RoleClient, proto.Cred{}), 0},
		{"client outside client networks", peer("192.168.0.1:99", transport.RoleClient, proto.Cred{}), syscall.EACCES},
		{"client at an allowed IPv6 address", peer("[fd00::1]:99", transport.RoleClient, proto.Cred{Uid: 5}), syscall.EACCES},
		{"server root never squashed", peer("192.168.0.1:99", transport.RoleMeta, proto.Cred{}), 0},
		{"unauthenticated peer", peer("10.1.0.1:99", transport.RoleNone, proto.Cred{}), syscall.EACCES},
	} {
		_, err := e.srv.Lookup(tc.c, ri, "root-only")
		if err == nil {
			_, err = e.srv.ReadDir(tc.c, e.inoOf("/root-only"), "", 0)
		}
		wantErrno(t, tc.name, err, tc.want)
	}
	// A squashed root creates as nobody.
	_, err = e.srv.SetAttr(ctx, ri, proto.SetAttrIn{Valid: proto.SetMode, Mode: 0777})
	e.must(err)
	a, err := e.srv.Mkdir(peer("10.2.0.1:99", transport.RoleClient, proto.Cred{}), ri, "sq", 0755, 0, 0)
	e.must(err)
	if a.Uid != DefaultSquashID || a.Gid != DefaultSquashID {
		t.Errorf("squashed root's mkdir owned by %d:%d", a.Uid, a.Gid)
	}
	// AllowUnauthenticated admits RoleNone peers as clients.
	e2 := newEnv(t, func(o *Options) { o.AllowUnauthenticated = true })
	_, err = e2.srv.GetAttr(peer("1.2.3.4:5", transport.RoleNone, proto.Cred{}), ri)
	wantErrno(t, "unauthenticated peer allowed", err, 0)
	_, err = e2.srv.GetAttr(transport.WithPeer(ctx, transport.Peer{Addr: "1.2.3.4:5", Role: transport.RoleClient}), ri)
	wantErrno(t, "client request without credentials", err, syscall.EACCES)
}

type netipPrefix = netip.Prefix

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }
