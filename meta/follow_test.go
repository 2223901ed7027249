package meta

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/weft-fs/weft/meta/metarpc"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/transport"
)

// TestReplicatedClientFollowsLeader serves a group of three replicated
// servers over real TCP (metarpc) and gives a client only one follower's
// address: it finds the leader (Members), its requests (in a session) work, and when the
// leader stops it follows the new one and its requests go on working;
// the followers refuse requests with EAGAIN naming the leader.
func TestReplicatedClientFollowsLeader(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	tr := transport.NewTCPWith(transport.TCPOptions{Logger: quiet})
	var (
		mu   sync.Mutex
		srvs = map[uint64]*Server{}
		lns  = map[uint64]transport.Listener{}
	)
	addrs := map[uint64]string{}
	for id := uint64(1); id <= 3; id++ {
		ln, err := tr.Listen("127.0.0.1:0", func(ctx context.Context, op uint16, req []byte) ([]byte, error) {
			mu.Lock()
			s := srvs[id]
			mu.Unlock()
			if s == nil {
				return nil, syscall.EAGAIN
			}
			return metarpc.NewHandler(s, s, quiet)(ctx, op, req)
		})
		if err != nil {
			t.Fatal(err)
		}
		lns[id], addrs[id] = ln, ln.Addr()
		t.Cleanup(func() { ln.Close() })
	}
	r := newReplicaSetAddrs(t, 3, addrs)
	mu.Lock()
	for id, s := range r.srvs {
		srvs[id] = s
	}
	mu.Unlock()
	lead := r.leader()
	follower := lead%3 + 1

	pool := transport.NewPool(tr, transport.PoolOptions{})
	defer pool.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // against hangs only
	defer cancel()

	// A follower refuses, naming the leader.
	direct := metarpc.NewConnClient(dial(t, tr, addrs[follower]))
	_, err := direct.Mkdir(ctx, proto.RootIno, "x", 0o755, 0, 0)
	if !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("mkdir on follower %d: %v, want EAGAIN", follower, err)
	}
	// The follower may not have heard from the new leader yet (an
	// election's winner knows first): wait for it to, then check.
	m, err := direct.Group(ctx)
	for err == nil && m.Leader == 0 && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
		m, err = direct.Group(ctx)
	}
	if err != nil || m.Leader != lead || m.LeaderAddr != addrs[lead] || len(m.Members) != 3 || m.ID != follower {
		t.Fatalf("follower %d's Group: %+v, %v; want leader %d at %s", follower, m, err, lead, addrs[lead])
	}

	c := metarpc.NewClient(pool, addrs[follower], metarpc.WithSession(proto.NewSessionID()))
	if _, err := c.OpenSession(ctx, nil); err != nil {
		t.Fatal(err)
	}
	d, err := c.Mkdir(ctx, proto.RootIno, "d", 0o755, 0, 0)
	if err != nil {
		t.Fatalf("mkdir through a client given a follower's address: %v", err)
	}
	if _, err := c.Symlink(ctx, d.Ino, "before", "t", 0, 0); err != nil {
		t.Fatal(err)
	}

	// The leader stops; the client's next requests go to the new one.
	r.stop(lead)
	mu.Lock()
	delete(srvs, lead)
	mu.Unlock()
	lns[lead].Close()
	if _, err := c.Symlink(ctx, d.Ino, "after", "t", 0, 0); err != nil {
		t.Fatalf("create after the leader stopped: %v", err)
	}
	for _, name := range []string{"before", "after"} {
		if _, err := c.Lookup(ctx, d.Ino, name); err != nil {
			t.Errorf("lookup %s after the failover: %v", name, err)
		}
	}
	if now := r.leader(); now == lead {
		t.Fatalf("stopped member %d still leads", lead)
	}
}

func dial(t *testing.T, tr transport.Transport, addr string) transport.Conn {
	t.Helper()
	conn, err := tr.Dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestReplicatedCreateOpenRetryAfterFailover: a CreateOpen applied by a
// leader that then stopped, retried with the same sequence number on the
// new leader (its reply was lost with the old one), answers the first
// attempt's file, neither EEXIST nor a second file, and the new leader
// counts its handle (the old leader's count died with it), so the file
// is not reclaimed under the client.
func TestReplicatedCreateOpenRetryAfterFailover(t *testing.T) {
	r := newReplicaSet(t, 3)
	r.do(func(s *Server) error {
		_, err := s.RegisterTarget(ctx, "t1", proto.TargetInfo{Addr: "host:t1", Total: 2 << 30, Used: 1 << 30, Free: 1 << 30})
		return err
	})
	lead := r.leader()
	s := r.srvs[lead]
	if _, err := s.OpenSession(req(7, 0), nil); err != nil {
		t.Fatal(err)
	}
	in := proto.CreateIn{Parent: proto.RootIno, Name: "f", Mode: 0o644, Exclusive: true}
	a1, _, _, err := s.CreateOpen(req(7, 1), in, proto.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	r.converged()
	r.stop(lead)

	now := r.leader()
	s2 := r.srvs[now]
	if _, err := s2.OpenSession(req(7, 0), nil); err != nil {
		t.Fatalf("re-register the session with the new leader: %v", err)
	}
	a2, _, _, err := s2.CreateOpen(req(7, 1), in, proto.AccessReadWrite)
	if err != nil || a2.Ino != a1.Ino {
		t.Fatalf("retried CreateOpen on the new leader: %+v, %v; want inode %d", a2, err, a1.Ino)
	}
	if n := s2.OpenCount(a1.Ino); n != 1 {
		t.Fatalf("the new leader counts %d handles on the file, want 1", n)
	}
	// A second retry on the same leader counts nothing more.
	if _, _, _, err := s2.CreateOpen(req(7, 1), in, proto.AccessReadWrite); err != nil {
		t.Fatal(err)
	}
	if n := s2.OpenCount(a1.Ino); n != 1 {
		t.Fatalf("after a second retry the new leader counts %d handles, want 1", n)
	}
}

// TestReplicatedTargetsAfterFailover: a new leader reloads the target
// registry from its store; a target registered well before counts up at
// once (files can be placed right after a failover), while one whose
// registration it applied only moments ago (while taking over: its
// server may not have the reply, and so its id, yet) counts down until
// its server is heard from.
func TestReplicatedTargetsAfterFailover(t *testing.T) {
	r := newReplicaSet(t, 3)
	info := proto.TargetInfo{Addr: "host:t1", Total: 2 << 30, Used: 1 << 30, Free: 1 << 30}
	r.do(func(s *Server) error { _, err := s.RegisterTarget(ctx, "t1", info); return err })
	r.converged()
	time.Sleep(r.srvs[r.leader()].electionTimeout) // the registration is not recent any more
	r.stop(r.leader())
	s := r.srvs[r.leader()]
	ts, err := s.Targets(ctx)
	if err != nil || len(ts) != 1 || !ts[0].Up {
		t.Fatalf("on the new leader: %+v, %v; want t1 up", ts, err)
	}

	// The registry of a member that applied t1's registration just now.
	s.reg.noteApplied(ts[0].ID)
	if err := s.reg.reload(s.st, time.Hour); err != nil {
		t.Fatal(err)
	}
	if ts, _ := s.Targets(ctx); len(ts) != 1 || ts[0].Up {
		t.Fatalf("a target registered moments before the reload: %+v, want down until heard", ts)
	}
	if _, err := s.RegisterTarget(ctx, "t1", info); err != nil {
		t.Fatal(err)
	}
	if ts, _ := s.Targets(ctx); len(ts) != 1 || !ts[0].Up {
		t.Fatalf("after its heartbeat: %+v, want up", ts)
	}
}
