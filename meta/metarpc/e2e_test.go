package metarpc_test

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weft-fs/weft/layout"
	"github.com/weft-fs/weft/meta"
	"github.com/weft-fs/weft/meta/metarpc"
	"github.com/weft-fs/weft/meta/store"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/transport"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// directConn calls a handler in-process, turning its error into the errno
// a real transport would deliver.
type directConn struct{ h transport.Handler }

func (c directConn) Call(ctx context.Context, op uint16, parts ...[]byte) ([]byte, error) {
	resp, err := c.h(ctx, op, bytes.Join(parts, nil))
	if err != nil {
		var errno syscall.Errno
		if !errors.As(err, &errno) {
			errno = syscall.EIO
		}
		// As a transport delivers a handler's error: a RemoteError,
		// which a client never mistakes for a broken connection.
		return nil, &transport.RemoteError{Addr: "direct", Op: op, Errno: errno, Msg: err.Error()}
	}
	return resp, nil
}
func (directConn) Close() error { return nil }

func newServer(t *testing.T) *meta.Server {
	st := store.NewMem()
	srv, err := meta.New(meta.Options{Store: st, Seed: 1, OrphanGrace: time.Hour, AllowUnauthenticated: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(); st.Close() })
	return srv
}

type client interface {
	proto.MetaService
	proto.TargetRegistry
}

// exercise runs every method through c and checks results against the
// server called directly.
func exercise(t *testing.T, srv *meta.Server, c client) {
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	if sc, ok := c.(metarpc.SessionService); ok {
		// Over a real transport, handles need a registered session.
		_, err := sc.OpenSession(ctx, nil)
		must(err)
	}
	id, err := c.RegisterTarget(ctx, "uuid-1", proto.TargetInfo{Addr: "h:1", Total: 100 << 20, Free: 100 << 20})
	must(err)
	if id != 1 {
		t.Fatalf("target id %d", id)
	}
	// The owner of a new inode is the caller's cred, not the uid and gid
	// arguments.
	d, err := c.Mkdir(proto.WithCred(ctx, proto.Cred{Uid: 0, Gid: 2}), proto.RootIno, "d", 02755, 7, 7)
	must(err)
	if d.Uid != 0 || d.Gid != 2 {
		t.Fatalf("mkdir owned by %d:%d, want the cred's 0:2", d.Uid, d.Gid)
	}
	l := layout.Layout{StripeSize: 64 << 10, StripeCount: 1}
	f, err := c.Create(ctx, proto.CreateIn{Parent: d.Ino, Name: "f", Mode: 0644, Uid: 1, Gid: 1, Exclusive: true, Layout: &l})
	must(err)
	if f.Gid != 2 || len(f.Layout.Targets) != 1 || f.Layout.StripeSize != 64<<10 {
		t.Fatalf("created %+v", f)
	}
	if _, err := c.Create(ctx, proto.CreateIn{Parent: d.Ino, Name: "f", Exclusive: true}); !errors.Is(err, syscall.EEXIST) {
		t.Fatalf("exclusive create: %v", err)
	}
	got, err := c.Lookup(ctx, d.Ino, "f")
	must(err)
	want, _ := srv.GetAttr(ctx, f.Ino)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("lookup %+v, want %+v", got, want)
	}
	if _, err := c.Lookup(ctx, d.Ino, "nope"); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("lookup missing: %v", err)
	}
	_, err = c.SetAttr(ctx, f.Ino, proto.SetAttrIn{Valid: proto.SetMode, Mode: 0600})
	must(err)
	s, err := c.Symlink(ctx, d.Ino, "s", "f", 0, 0)
	must(err)
	if tgt, err := c.Readlink(ctx, s.Ino); err != nil || tgt != "f" {
		t.Fatalf("readlink %q %v", tgt, err)
	}
	_, err = c.Link(ctx, f.Ino, proto.RootIno, "hard")
	must(err)
	must(c.Rename(ctx, proto.RootIno, "hard", d.Ino, "hard2", proto.RenameNoReplace))
	ents, err := c.ReadDir(ctx, d.Ino, "", 0)
	must(err)
	direct, _ := srv.ReadDir(ctx, d.Ino, "", 0)
	if !reflect.DeepEqual(ents, direct) || len(ents) != 3 {
		t.Fatalf("readdir %+v", ents)
	}
	if ents, _ := c.ReadDir(ctx, d.Ino, "hard2", 1); len(ents) != 1 || ents[0].Name != "s" {
		t.Fatalf("readdir after: %+v", ents)
	}
	must(c.SetXattr(ctx, f.Ino, "user.a", []byte("1"), proto.XattrCreate))
	if v, err := c.GetXattr(ctx, f.Ino, "user.a"); err != nil || string(v) != "1" {
		t.Fatalf("getxattr %q %v", v, err)
	}
	if v, err := c.GetXattr(ctx, f.Ino, "user.b"); !errors.Is(err, syscall.ENODATA) {
		t.Fatalf("getxattr missing %q %v", v, err)
	}
	if n, err := c.ListXattr(ctx, f.Ino); err != nil || len(n) != 1 {
		t.Fatalf("listxattr %v %v", n, err)
	}
	must(c.RemoveXattr(ctx, f.Ino, "user.a"))
	_, _, err = c.Open(ctx, f.Ino, proto.AccessRead)
	must(err)
	if a, err := c.WriteDone(ctx, f.Ino, 1234, 0, proto.NoBlocks); err != nil || a.Size != 1234 {
		t.Fatalf("writedone %+v %v", a, err)
	}
	must(c.Release(ctx, f.Ino))
	if _, err := c.SetLayout(ctx, d.Ino, layout.Layout{StripeSize: 128 << 10, StripeCount: -1}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetLayout(ctx, f.Ino, l); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("setlayout on written file: %v", err)
	}
	must(c.Unlink(ctx, d.Ino, "hard2"))
	must(c.Unlink(ctx, d.Ino, "s"))
	must(c.Unlink(ctx, d.Ino, "f"))
	if err := c.Rmdir(ctx, proto.RootIno, "d"); err != nil {
		t.Fatal(err)
	}
	sfs, err := c.StatFS(ctx)
	must(err)
	if sfs.Total != 100<<20 {
		t.Fatalf("statfs %+v", sfs)
	}
	ts, err := c.Targets(ctx)
	must(err)
	if len(ts) != 1 || !ts[0].Up || ts[0].Addr != "h:1" {
		t.Fatalf("targets %+v", ts)
	}
	if _, err := c.GetAttr(ctx, 12345); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("getattr missing: %v", err)
	}
}

func TestClientHandlerInProcess(t *testing.T) {
	srv := newServer(t)
	c := metarpc.NewConnClient(directConn{metarpc.NewHandler(srv, srv, nil)}, metarpc.WithSession(proto.NewSessionID()))
	exercise(t, srv, c)
}

func TestClientOverTCP(t *testing.T) {
	srv := newServer(t)
	tr := transport.NewTCP()
	ln, err := tr.Listen("127.0.0.1:0", metarpc.NewHandler(srv, srv, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	pool := transport.NewPool(tr, transport.PoolOptions{})
	defer pool.Close()
	exercise(t, srv, metarpc.NewClient(pool, ln.Addr(), metarpc.WithSession(proto.NewSessionID())))
}

// TestRunServes starts meta.Run on a real directory and port, uses it
// through the client, and checks that cancelling ctx shuts it down.
func TestRunServes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan string, 1)
	done := make(chan error, 1)
	dir := t.TempDir()
	go func() {
		done <- meta.Run(ctx, meta.Config{DataDir: dir, ListenAddr: "127.0.0.1:0", AllowUnauthenticated: true, Ready: func(a string) { ready <- a }})
	}()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatal(err)
	}
	pool := transport.NewPool(transport.NewTCP(), transport.PoolOptions{})
	defer pool.Close()
	c := metarpc.NewClient(pool, addr)
	if _, err := c.Mkdir(ctx, proto.RootIno, "x", 0755, 0, 0); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	// The data survives: a second run finds the directory.
	ctx2, cancel2 := context.WithCancel(context.Background())
	go func() {
		done <- meta.Run(ctx2, meta.Config{DataDir: dir, ListenAddr: "127.0.0.1:0", AllowUnauthenticated: true, Ready: func(a string) { ready <- a }})
	}()
	addr = <-ready
	c = metarpc.NewClient(pool, addr)
	if _, err := c.Lookup(context.Background(), proto.RootIno, "x"); err != nil {
		t.Fatal(err)
	}
	cancel2()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestConfigValidate(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		cfg  meta.Config
		want string
	}{
		{meta.Config{ListenAddr: ":0"}, "DataDir is required"},
		{meta.Config{DataDir: dir + "/missing", ListenAddr: ":0"}, "data directory"},
		{meta.Config{DataDir: dir}, "ListenAddr is required"},
		{meta.Config{DataDir: dir, ListenAddr: ":0", HeartbeatTimeout: -1}, "negative"},
		{meta.Config{DataDir: dir, ListenAddr: ":0"}, ""},
	}
	for _, c := range cases {
		err := c.cfg.Validate()
		if c.want == "" {
			if err != nil {
				t.Errorf("%+v: %v", c.cfg, err)
			}
			continue
		}
		if err == nil || !bytes.Contains([]byte(err.Error()), []byte(c.want)) {
			t.Errorf("%+v: got %v, want %q", c.cfg, err, c.want)
		}
	}
}

// TestExtended runs the combined operations through the handler, and checks
// that a service without them answers ENOSYS.
func TestExtended(t *testing.T) {
	ctx := context.Background()
	srv := newServer(t)
	c := metarpc.NewConnClient(directConn{metarpc.NewHandler(srv, srv, nil)}, metarpc.WithSession(proto.NewSessionID()))
	if _, err := c.RegisterTarget(ctx, "u", proto.TargetInfo{Addr: "h:1", Total: 1 << 30, Free: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	d, err := c.Mkdir(ctx, proto.RootIno, "d", 0755, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	a, p, _, err := c.CreateOpen(ctx, proto.CreateIn{Parent: d.Ino, Name: "f", Mode: 0100644, Exclusive: true}, proto.AccessReadWrite)
	if err != nil || !a.IsRegular() || p.Ino != d.Ino {
		t.Fatalf("createopen %+v %+v %v", a, p, err)
	}
	if n := srv.OpenCount(a.Ino); n != 1 {
		t.Fatalf("open count %d", n)
	}
	if want, _ := srv.GetAttr(ctx, d.Ino); !reflect.DeepEqual(p, want) {
		t.Fatalf("parent %+v, want %+v", p, want)
	}
	if _, _, _, err := c.CreateOpen(ctx, proto.CreateIn{Parent: d.Ino, Name: "f", Exclusive: true}, proto.AccessReadWrite); !errors.Is(err, syscall.EEXIST) {
		t.Fatalf("exclusive createopen: %v", err)
	}
	if err := c.ReleaseMany(ctx, []proto.Ino{a.Ino}); err != nil || srv.OpenCount(a.Ino) != 0 {
		t.Fatalf("releasemany: %v, count %d", err, srv.OpenCount(a.Ino))
	}
	p, err = c.UnlinkAt(ctx, d.Ino, "f")
	if want, _ := srv.GetAttr(ctx, d.Ino); err != nil || !reflect.DeepEqual(p, want) {
		t.Fatalf("unlinkat %+v %v, want %+v", p, err, want)
	}
	if _, err := c.UnlinkAt(ctx, d.Ino, "f"); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("unlinkat missing: %v", err)
	}
	p, err = c.RmdirAt(ctx, proto.RootIno, "d")
	if err != nil || p.Ino != proto.RootIno {
		t.Fatalf("rmdirat %+v %v", p, err)
	}

	plain := metarpc.NewConnClient(directConn{metarpc.NewHandler(struct{ proto.MetaService }{srv}, srv, nil)})
	if _, _, _, err := plain.CreateOpen(ctx, proto.CreateIn{Parent: proto.RootIno, Name: "g"}, proto.AccessReadWrite); !errors.Is(err, syscall.ENOSYS) {
		t.Fatalf("createopen on a plain service: %v", err)
	}
	if err := plain.ReleaseMany(ctx, []proto.Ino{1}); !errors.Is(err, syscall.ENOSYS) {
		t.Fatalf("releasemany on a plain service: %v", err)
	}
}

// peerConn calls a handler in-process as a request from peer p.
type peerConn struct {
	h transport.Handler
	p transport.Peer
}

func (c peerConn) Call(ctx context.Context, op uint16, parts ...[]byte) ([]byte, error) {
	return directConn{c.h}.Call(transport.WithPeer(ctx, c.p), op, parts...)
}
func (peerConn) Close() error { return nil }

// TestForgedCredChecked: whatever a client puts in the request header, the
// server checks the operation against it, squashes its root, and refuses
// clients from outside the allowed networks or without authentication.
func TestForgedCredChecked(t *testing.T) {
	ctx := context.Background()
	mk := func(acc meta.Access, unauth bool) *meta.Server {
		st := store.NewMem()
		srv, err := meta.New(meta.Options{Store: st, Seed: 1, OrphanGrace: time.Hour, Access: acc, AllowUnauthenticated: unauth})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close(); st.Close() })
		// In-process (trusted): a root-only directory with a file.
		sec, err := srv.Mkdir(ctx, proto.RootIno, "secret", 0700, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := srv.Create(ctx, proto.CreateIn{Parent: sec.Ino, Name: "f", Mode: syscall.S_IFIFO | 0600}); err != nil {
			t.Fatal(err)
		}
		return srv
	}
	client := func(srv *meta.Server, p transport.Peer, cr proto.Cred) *metarpc.Client {
		return metarpc.NewConnClient(peerConn{metarpc.NewHandler(srv, srv, nil), p}, metarpc.WithCred(cr))
	}
	cl := transport.Peer{Addr: "10.1.2.3:4000", Role: transport.RoleClient, Name: "node1"}
	lookup := func(c *metarpc.Client) error {
		sec, err := c.Lookup(ctx, proto.RootIno, "secret")
		if err != nil {
			return err
		}
		_, err = c.Lookup(ctx, sec.Ino, "f")
		return err
	}

	srv := mk(meta.Access{}, false)
	if err := lookup(client(srv, cl, proto.Cred{Uid: 1000, Gid: 1000})); !errors.Is(err, syscall.EACCES) {
		t.Errorf("uid 1000 looked into a 0700 root directory: %v", err)
	}
	if err := client(srv, cl, proto.Cred{Uid: 1000, Gid: 1000}).Unlink(ctx, proto.RootIno, "secret"); !errors.Is(err, syscall.EACCES) && !errors.Is(err, syscall.EISDIR) {
		t.Errorf("uid 1000 unlinked in root's directory: %v", err)
	}
	if _, err := client(srv, cl, proto.Cred{Uid: 1000, Gid: 1000}).SetAttr(ctx, proto.RootIno, proto.SetAttrIn{Valid: proto.SetMode, Mode: 0777}); !errors.Is(err, syscall.EPERM) {
		t.Errorf("uid 1000 chmod of root's directory: %v", err)
	}
	if err := lookup(client(srv, cl, proto.Cred{})); err != nil {
		t.Errorf("root without squash: %v", err)
	}
	// Over a transport without authentication: refused unless allowed.
	none := transport.Peer{Addr: "10.1.2.3:4000"}
	if _, err := client(srv, none, proto.Cred{}).GetAttr(ctx, proto.RootIno); !errors.Is(err, syscall.EACCES) {
		t.Errorf("unauthenticated peer: %v", err)
	}
	if _, err := client(mk(meta.Access{}, true), none, proto.Cred{}).GetAttr(ctx, proto.RootIno); err != nil {
		t.Errorf("unauthenticated peer with AllowUnauthenticated: %v", err)
	}

	nets, _ := meta.ParsePrefixes([]string{"10.1.0.0/16"})
	srv = mk(meta.Access{RootSquash: true}, false)
	if err := lookup(client(srv, cl, proto.Cred{})); !errors.Is(err, syscall.EACCES) {
		t.Errorf("squashed root looked into a 0700 root directory: %v", err)
	}
	a, err := client(srv, cl, proto.Cred{}).Mkdir(ctx, proto.RootIno, "x", 0755, 0, 0)
	if !errors.Is(err, syscall.EACCES) {
		t.Errorf("squashed root made %+v in root's 0755 directory: %v", a, err)
	}
	server := transport.Peer{Addr: "10.9.9.9:1", Role: transport.RoleMeta, Name: "meta2"}
	if err := lookup(client(srv, server, proto.Cred{})); err != nil {
		t.Errorf("a server's root was squashed: %v", err)
	}
	srv = mk(meta.Access{RootSquash: true, RootSquashExempt: nets}, false)
	if err := lookup(client(srv, cl, proto.Cred{})); err != nil {
		t.Errorf("root from an exempt network: %v", err)
	}
	if err := lookup(client(srv, transport.Peer{Addr: "10.2.0.1:5", Role: transport.RoleClient}, proto.Cred{})); !errors.Is(err, syscall.EACCES) {
		t.Errorf("root from outside the exempt network: %v", err)
	}

	srv = mk(meta.Access{ClientNetworks: nets}, false)
	if _, err := client(srv, cl, proto.Cred{}).GetAttr(ctx, proto.RootIno); err != nil {
		t.Errorf("client inside client_networks: %v", err)
	}
	if _, err := client(srv, transport.Peer{Addr: "192.168.1.1:5", Role: transport.RoleClient}, proto.Cred{}).GetAttr(ctx, proto.RootIno); !errors.Is(err, syscall.EACCES) {
		t.Errorf("client outside client_networks: %v", err)
	}
}

// TestSessionsOverRPC: two clients are two sessions; one cannot release
// the other's handle, so A's unlinked open file stays.
func TestSessionsOverRPC(t *testing.T) {
	ctx := context.Background()
	srv := newServer(t)
	h := metarpc.NewHandler(srv, srv, nil)
	if c := metarpc.NewConnClient(directConn{h}); c.Session() != (proto.SessionID{}) {
		t.Fatal("a client has a session id without asking for one")
	}
	a := metarpc.NewConnClient(directConn{h}, metarpc.WithSession(proto.NewSessionID()))
	b := metarpc.NewConnClient(directConn{h}, metarpc.WithSession(proto.NewSessionID()))
	f, err := a.Create(ctx, proto.CreateIn{Parent: proto.RootIno, Name: "p", Mode: syscall.S_IFIFO | 0644})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Open(ctx, f.Ino, proto.AccessRead); err != nil {
		t.Fatal(err)
	}
	if err := b.ReleaseMany(ctx, []proto.Ino{f.Ino}); err != nil {
		t.Fatalf("release of a handle the session does not hold: %v", err)
	}
	if err := b.Release(ctx, f.Ino); err != nil {
		t.Fatal(err)
	}
	if n := srv.OpenCount(f.Ino); n != 1 {
		t.Fatalf("open count %d after B's releases, want A's 1", n)
	}
	if err := b.Unlink(ctx, proto.RootIno, "p"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.GetAttr(ctx, f.Ino); err != nil {
		t.Fatalf("A's open unlinked file is gone: %v", err)
	}
	if err := a.Release(ctx, f.Ino); err != nil {
		t.Fatal(err)
	}
	if n := srv.OpenCount(f.Ino); n != 0 {
		t.Fatalf("open count %d after A's release", n)
	}
	// A fixed session id is kept.
	if c := metarpc.NewConnClient(directConn{h}, metarpc.WithSession(proto.SessionID{5})); c.Session() != (proto.SessionID{5}) {
		t.Fatal("WithSession ignored")
	}
}

// TestSessionLeaseOverTCP: a session that is not renewed expires; the
// client's handle requests then answer ESTALE over the wire, and a new
// registration works.
func TestSessionLeaseOverTCP(t *testing.T) {
	st := store.NewMem()
	srv, err := meta.New(meta.Options{Store: st, Seed: 1, SessionLease: 50 * time.Millisecond, AllowUnauthenticated: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Close(); st.Close() }()
	tr := transport.NewTCP()
	ln, err := tr.Listen("127.0.0.1:0", metarpc.NewHandler(srv, srv, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	pool := transport.NewPool(tr, transport.PoolOptions{})
	defer pool.Close()
	c := metarpc.NewClient(pool, ln.Addr(), metarpc.WithSession(proto.NewSessionID()))
	ctx := context.Background()
	if _, _, err := c.Open(ctx, proto.RootIno, proto.AccessRead); !errors.Is(err, syscall.ESTALE) {
		t.Fatalf("open before the session is registered: %v", err)
	}
	lease, err := c.OpenSession(ctx, nil)
	if err != nil || lease != 50*time.Millisecond {
		t.Fatalf("open session: %v, %v", lease, err)
	}
	if lease, err := c.RenewSession(ctx); err != nil || lease != 50*time.Millisecond {
		t.Fatalf("renew: %v, %v", lease, err)
	}
	if _, _, err := c.Open(ctx, proto.RootIno, proto.AccessRead); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute) // a hang guard
	for srv.Sessions() > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the session did not expire")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := srv.OpenCount(proto.RootIno); n != 0 {
		t.Fatalf("open count %d after the session expired", n)
	}
	if err := c.Release(ctx, proto.RootIno); !errors.Is(err, syscall.ESTALE) {
		t.Fatalf("release in an expired session: %v", err)
	}
	if _, err := c.RenewSession(ctx); !errors.Is(err, syscall.ESTALE) {
		t.Fatalf("renew of an expired session: %v", err)
	}
	if _, err := c.OpenSession(ctx, []proto.OpenHandle{{Ino: proto.RootIno, Count: 1}}); !errors.Is(err, syscall.ESTALE) {
		t.Fatalf("reclaim after expiry: %v", err)
	}
	if err := c.CloseSession(ctx); err != nil {
		t.Fatalf("close of an unknown session: %v", err)
	}
	plain := metarpc.NewConnClient(directConn{metarpc.NewHandler(nopMeta{}, nil, nil)})
	if _, err := plain.OpenSession(ctx, nil); !errors.Is(err, syscall.ENOSYS) {
		t.Fatalf("a service without sessions: %v", err)
	}
}

// nopMeta is a metadata service with nothing beyond proto.MetaService.
type nopMeta struct{ proto.MetaService }
