package meta

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/weft-fs/weft/meta/raftlog"
	"github.com/weft-fs/weft/meta/store"
	"github.com/weft-fs/weft/proto"
)

// replicaSet is a group of replicated Servers in one process, on a
// raftlog.MemNetwork, each with its own store and raft log.
type replicaSet struct {
	t      *testing.T
	ids    []uint64
	nw     *raftlog.MemNetwork
	fs     map[uint64]vfs.FS
	stores map[uint64]*store.Mem
	logs   map[uint64]*raftlog.Storage
	srvs   map[uint64]*Server
	// addrs, if set, are the members' client addresses (Replica.Addrs);
	// the servers then admit unauthenticated peers (tests without TLS).
	addrs map[uint64]string
}

func newReplicaSet(t *testing.T, n int) *replicaSet { return newReplicaSetAddrs(t, n, nil) }

func newReplicaSetAddrs(t *testing.T, n int, addrs map[uint64]string) *replicaSet {
	r := &replicaSet{t: t, nw: raftlog.NewMemNetwork(), fs: map[uint64]vfs.FS{}, stores: map[uint64]*store.Mem{},
		logs: map[uint64]*raftlog.Storage{}, srvs: map[uint64]*Server{}, addrs: addrs}
	for i := 1; i <= n; i++ {
		id := uint64(i)
		r.ids = append(r.ids, id)
		r.fs[id] = vfs.NewMem()
		r.stores[id] = store.NewMem()
	}
	for _, id := range r.ids {
		r.start(id)
	}
	t.Cleanup(func() {
		for _, id := range r.ids {
			if r.srvs[id] != nil {
				r.stop(id)
			}
		}
	})
	return r
}

func (r *replicaSet) start(id uint64) {
	r.t.Helper()
	lg, err := raftlog.OpenStorage("raft", raftlog.StorageOptions{FS: r.fs[id]})
	if err != nil {
		r.t.Fatal(err)
	}
	srv, err := New(Options{
		Store: r.stores[id], Storage: newFakeStorage(), Seed: 1, OrphanGrace: time.Hour,
		AllowUnauthenticated: r.addrs != nil,
		Replica: &Replica{
			ID: id, Peers: r.ids, Addrs: r.addrs, Log: lg, Transport: r.nw.Transport(id),
			Started: func(n *raftlog.Node) { r.nw.Attach(id, n) },
			// A 250 ms election timeout: long enough that a loaded test
			// machine does not depose the leader mid-test (the test
			// asserts who leads), short enough for a quick failover.
			TickInterval: 5 * time.Millisecond, ElectionTick: 50,
			// Reads within half the election timeout of a confirmed
			// round are answered at once (the partition test checks a
			// deposed leader still never answers stale).
			ReadLease: 125 * time.Millisecond,
		},
	})
	if err != nil {
		lg.Close()
		r.t.Fatal(err)
	}
	r.logs[id], r.srvs[id] = lg, srv
}

// stop closes a server (a clean stop: its store keeps what it applied).
func (r *replicaSet) stop(id uint64) {
	r.nw.Detach(id)
	r.srvs[id].Close()
	r.logs[id].Close()
	delete(r.srvs, id)
	delete(r.logs, id)
}

// eventually polls cond; the bound is against hangs only.
func (r *replicaSet) eventually(what string, cond func() bool) {
	r.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			r.t.Fatalf("%s never happened", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// leader waits for a ready leader with a formatted store.
func (r *replicaSet) leader() uint64 {
	r.t.Helper()
	var lead uint64
	r.eventually("a leader with a formatted store", func() bool {
		for id, s := range r.srvs {
			if st, _ := s.ReplicaStatus(); st.Ready {
				if _, err := s.GetAttr(ctx, proto.RootIno); err == nil {
					lead = id
					return true
				}
			}
		}
		return false
	})
	return lead
}

// do runs op on the leader, again on the new one if leadership moved
// before the command was taken (EAGAIN: nothing was proposed).
func (r *replicaSet) do(op func(s *Server) error) {
	r.t.Helper()
	for range 100 {
		err := op(r.srvs[r.leader()])
		if errors.Is(err, syscall.EAGAIN) {
			continue
		}
		if err != nil {
			r.t.Fatal(err)
		}
		return
	}
	r.t.Fatal("no leader took the command")
}

// converged waits until every running server applied what the leader
// did, then checks their stores are byte-identical.
func (r *replicaSet) converged() {
	r.t.Helper()
	lead := r.leader()
	st, _ := r.srvs[lead].ReplicaStatus()
	r.eventually("every member applied the leader's commit index", func() bool {
		for _, s := range r.srvs {
			if got, _ := s.ReplicaStatus(); got.Applied < st.Commit {
				return false
			}
		}
		return true
	})
	want := dump(r.stores[lead])
	for id := range r.srvs {
		if got := dump(r.stores[id]); got != want {
			r.t.Fatalf("member %d's store differs from the leader's (%d):\n%s\nvs\n%s", id, lead, got, want)
		}
	}
}

// TestReplicatedServers: three metadata servers replicate every mutation
// to byte-identical stores; a follower refuses mutations and reads
// (EAGAIN, naming the leader); when the leader stops, a new one takes over with an inode
// allocator above every number handed out before; the old leader catches
// up when it comes back.
func TestReplicatedServers(t *testing.T) {
	r := newReplicaSet(t, 3)
	var dir proto.Attr
	r.do(func(s *Server) (err error) { dir, err = s.Mkdir(ctx, proto.RootIno, "d", 0755, 0, 0); return })
	maxIno := dir.Ino
	for i := range 10 {
		var a proto.Attr
		r.do(func(s *Server) (err error) {
			a, err = s.Create(ctx, proto.CreateIn{Parent: dir.Ino, Name: fmt.Sprint("f", i), Mode: syscall.S_IFIFO | 0644})
			return
		})
		maxIno = max(maxIno, a.Ino)
	}
	r.do(func(s *Server) error { return s.Rename(ctx, dir.Ino, "f1", proto.RootIno, "moved", 0) })
	r.do(func(s *Server) error { return s.Unlink(ctx, dir.Ino, "f2") })
	r.do(func(s *Server) error { return s.SetXattr(ctx, dir.Ino, "user.k", []byte("v"), 0) })
	r.converged()

	lead := r.leader()
	var follower uint64
	for _, id := range r.ids {
		if id != lead {
			follower = id
		}
	}
	_, err := r.srvs[follower].Mkdir(ctx, proto.RootIno, "nope", 0755, 0, 0)
	var nl *raftlog.NotLeaderError
	if !errors.Is(err, syscall.EAGAIN) || !errors.As(err, &nl) || nl.Leader != lead {
		t.Fatalf("mkdir on a follower: %v, want EAGAIN naming leader %d", err, lead)
	}

	r.stop(lead)
	r.do(func(s *Server) error {
		a, err := s.Mkdir(ctx, proto.RootIno, "after", 0755, 0, 0)
		if err == nil && a.Ino <= maxIno {
			t.Fatalf("the new leader handed out inode %d, at or below %d, used before", a.Ino, maxIno)
		}
		return err
	})
	if r.leader() == lead {
		t.Fatal("the stopped leader is leader")
	}
	r.start(lead)
	r.converged()
	// converged compared the stores; reads go to the leader only.
	now := r.leader()
	if _, err := r.srvs[now].Lookup(ctx, proto.RootIno, "after"); err != nil {
		t.Fatalf("lookup on the leader: %v", err)
	}
	for id, s := range r.srvs {
		if id == now {
			continue
		}
		_, err := s.Lookup(ctx, proto.RootIno, "after")
		if !errors.Is(err, syscall.EAGAIN) || !errors.As(err, &nl) || nl.Leader != now {
			t.Fatalf("lookup on follower %d: %v, want EAGAIN naming leader %d", id, err, now)
		}
	}
	for id, st := range r.stores {
		t.Run(fmt.Sprint("invariants-", id), func(t *testing.T) { checkInvariants(t, st) })
	}
}

// TestReplicatedPartition: a leader cut off from the others acknowledges
// no change and never answers a read with stale data (a lookup of what the
// majority made after the cut does not answer ENOENT: with read leases it
// may answer reads only within its lease, before any other leader can
// exist), while the majority elects a new leader and goes on; after the
// partition heals, every store is the same and holds none of the minority
// side's change.
func TestReplicatedPartition(t *testing.T) {
	r := newReplicaSet(t, 3)
	r.do(func(s *Server) error { _, err := s.Mkdir(ctx, proto.RootIno, "before", 0755, 0, 0); return err })
	r.converged()
	old := r.leader()
	var rest []uint64
	for _, id := range r.ids {
		if id != old {
			rest = append(rest, id)
		}
	}
	r.nw.Partition([]uint64{old}, rest)

	// Bounds against hangs only.
	minority := make(chan error, 2)
	go func() {
		c, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		_, err := r.srvs[old].Mkdir(c, proto.RootIno, "minority", 0755, 0, 0)
		minority <- err
	}()
	var lead uint64
	r.eventually("a leader on the majority side", func() bool {
		for _, id := range rest {
			if st, _ := r.srvs[id].ReplicaStatus(); st.Ready {
				lead = id
				return true
			}
		}
		return false
	})
	if _, err := r.srvs[lead].Mkdir(ctx, proto.RootIno, "majority", 0755, 0, 0); err != nil {
		t.Fatalf("mkdir on the majority's leader: %v", err)
	}
	go func() {
		c, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		_, err := r.srvs[old].Lookup(c, proto.RootIno, "majority")
		minority <- err
	}()
	select {
	case err := <-minority:
		if err == nil {
			t.Fatal("the partitioned leader acknowledged a change or answered a read")
		}
		minority <- err
	default:
	}
	r.eventually("the old leader steps down", func() bool {
		st, _ := r.srvs[old].ReplicaStatus()
		return !st.IsLeader
	})
	if _, err := r.srvs[old].GetAttr(ctx, proto.RootIno); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("a read on the deposed leader: %v, want EAGAIN", err)
	}

	r.nw.Heal()
	// Both minority calls end with EAGAIN, nothing done: the read when the
	// old leader stepped down, the mkdir when the entry a new leader
	// committed at its index was applied (or at once, if it came after the
	// step-down).
	for range 2 {
		if err := <-minority; !errors.Is(err, syscall.EAGAIN) {
			t.Fatalf("a request to the partitioned leader: %v, want EAGAIN", err)
		}
	}
	r.converged()
	now := r.leader()
	if _, err := r.srvs[now].Lookup(ctx, proto.RootIno, "minority"); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("the minority side's mkdir: %v, want ENOENT", err)
	}
	if _, err := r.srvs[now].Lookup(ctx, proto.RootIno, "majority"); err != nil {
		t.Fatalf("the majority side's mkdir: %v", err)
	}
}
