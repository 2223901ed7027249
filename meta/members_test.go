package meta

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/transport"
)

// TestReplaceDeadMember: a member whose disk died is replaced while a
// client keeps creating files: a fresh, empty server joins (Replica.Join),
// AddMember adds it as a learner, it catches up from a snapshot and is
// promoted, RemoveMember drops the dead one. The client's creates never
// fail (EAGAIN, nothing applied, is retried on the leader, as clients
// do), the new member ends with the same store as the others, and the
// group is the two survivors and the new member.
func TestReplaceDeadMember(t *testing.T) {
	r := newPebbleSet(t, 3, func(rep *Replica) { rep.SnapshotEvery, rep.SnapshotKeep = 100, 10 })
	var dir proto.Attr
	r.do(func(s *Server) (err error) { dir, err = s.Mkdir(ctx, proto.RootIno, "d", 0755, 0, 0); return })

	var created atomic.Int64
	stop := make(chan struct{})
	failed := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			name := fmt.Sprint("f", i)
			for {
				var s *Server
				for _, srv := range r.running() {
					if st, _ := srv.ReplicaStatus(); st.Ready {
						s = srv
					}
				}
				if s == nil {
					time.Sleep(time.Millisecond)
					continue
				}
				_, err := s.Create(ctx, proto.CreateIn{Parent: dir.Ino, Name: name, Mode: syscall.S_IFIFO | 0644, Exclusive: true})
				if errors.Is(err, syscall.EAGAIN) {
					continue
				}
				if err != nil {
					failed <- fmt.Errorf("create %s: %w", name, err)
					return
				}
				created.Add(1)
				break
			}
		}
	}()
	waitCreated := func(n int64) {
		t.Helper()
		r.eventually(fmt.Sprintf("%d creates", n), func() bool {
			select {
			case err := <-failed:
				t.Fatal(err)
			default:
			}
			return created.Load() >= n
		})
	}
	waitCreated(300)
	lead := r.leader()
	dead := r.ids[0]
	if dead == lead {
		dead = r.ids[1]
	}
	r.crash(dead)
	r.fs[dead] = vfs.NewCrashableMem() // the disk is gone
	waitCreated(created.Load() + 100)

	const fresh = 4
	r.join[fresh] = true
	r.start(fresh)
	// A client may not change the group.
	asClient := transport.WithPeer(ctx, transport.Peer{Addr: "10.0.0.9:1", Role: transport.RoleClient, Name: "c"})
	if err := r.srvs[r.leader()].AddMember(asClient, fresh, "h4:7400"); !errors.Is(err, syscall.EACCES) {
		t.Fatalf("add member as a client: %v, want EACCES", err)
	}
	r.do(func(s *Server) error { return s.AddMember(ctx, fresh, "h4:7400") })
	waitCreated(created.Load() + 100)
	r.do(func(s *Server) error { return s.RemoveMember(ctx, dead) })
	waitCreated(created.Load() + 100)
	close(stop)
	wg.Wait()
	select {
	case err := <-failed:
		t.Fatal(err)
	default:
	}

	r.converged()
	if first, _ := r.logs[fresh].FirstIndex(); first <= 1 {
		t.Fatalf("the new member's log starts at %d: it did not catch up from a snapshot", first)
	}
	lead = r.leader()
	ms, err := r.srvs[lead].Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []uint64
	for _, m := range ms {
		if m.Learner {
			t.Fatalf("member %d is still a learner", m.ID)
		}
		ids = append(ids, m.ID)
		if m.ID == fresh && m.Addr != "h4:7400" {
			t.Fatalf("the new member's address: %q", m.Addr)
		}
	}
	want := []uint64{}
	for _, id := range r.ids {
		if id != dead {
			want = append(want, id)
		}
	}
	want = append(want, fresh)
	if !slices.Equal(ids, want) {
		t.Fatalf("members %v, want %v", ids, want)
	}
	checkInvariants(t, r.stores[fresh])
	// The new member serves: it can lead.
	r.campaign(fresh)
	if n := len(r.names(r.srvs[fresh], dir.Ino)); int64(n) != created.Load() {
		t.Fatalf("the new member lists %d files, %d were created", n, created.Load())
	}
}
