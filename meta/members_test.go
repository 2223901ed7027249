package meta

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/weft-fs/weft/internal/testutil"
	"github.com/weft-fs/weft/meta/raftlog"
	"github.com/weft-fs/weft/meta/store"
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

// flipMem flips a byte in the middle of the largest file in dir whose
// name ends in suffix, on an in-memory file system.
func flipMem(t *testing.T, fs vfs.FS, dir, suffix string) string {
	t.Helper()
	best, size := testutil.Largest(t, fs, dir, suffix)
	f, err := fs.Open(best)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	b[size/2] ^= 0x40
	w, err := fs.Create(best, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(b)
	w.Sync()
	w.Close()
	return best
}

// TestCorruptMemberResync: a member whose store has a damaged table, or
// whose raft log has a damaged WAL record, refuses to start with an error
// that says so and how to recover (no panic); the group goes on without
// it; wiped, removed and added back in join mode, it re-syncs from a
// snapshot and ends with the same store as the others.
func TestCorruptMemberResync(t *testing.T) {
	for _, tc := range []struct {
		name, dir, suffix string
		want              error
	}{
		{"store-sst", "store", ".sst", store.ErrCorrupt},
		{"log-wal", "raft", ".log", raftlog.ErrCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newPebbleSet(t, 3, func(rep *Replica) { rep.SnapshotEvery, rep.SnapshotKeep = 100, 10 })
			var dir proto.Attr
			r.do(func(s *Server) (err error) { dir, err = s.Mkdir(ctx, proto.RootIno, "d", 0755, 0, 0); return })
			create := func(from, to int) {
				for i := from; i < to; i++ {
					r.do(func(s *Server) error {
						_, err := s.Create(ctx, proto.CreateIn{Parent: dir.Ino, Name: fmt.Sprint("f", i), Mode: syscall.S_IFIFO | 0644})
						return err
					})
				}
			}
			create(0, 300)
			r.converged()
			lead := r.leader()
			bad := r.ids[0]
			if bad == lead {
				bad = r.ids[1]
			}
			if err := r.stores[bad].Flush(); err != nil {
				t.Fatal(err)
			}
			r.stop(bad)
			flipMem(t, r.fs[bad], tc.dir, tc.suffix)
			err := r.tryStart(bad)
			if err == nil {
				t.Fatal("a member with a damaged " + tc.name + " started")
			}
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), "re-sync") {
				t.Fatalf("start: %v, want %v with the way to recover", err, tc.want)
			}
			t.Logf("refused: %v", err)
			create(300, 400) // the others go on

			// Wipe, remove, add back empty.
			r.fs[bad] = vfs.NewCrashableMem()
			r.do(func(s *Server) error { return s.RemoveMember(ctx, bad) })
			r.join[bad] = true
			r.start(bad)
			r.do(func(s *Server) error { return s.AddMember(ctx, bad, "again:7400") })
			create(400, 450)
			r.converged()
			if first, _ := r.logs[bad].FirstIndex(); first <= 1 {
				t.Fatalf("the re-synced member's log starts at %d: no snapshot", first)
			}
			checkInvariants(t, r.stores[bad])
		})
	}
}
