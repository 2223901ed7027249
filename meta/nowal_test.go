package meta

import (
	"log/slog"
	"slices"
	"testing"

	"github.com/weft-fs/weft/meta/store"
	"github.com/weft-fs/weft/proto"
)

// storeApplied opens member id's store as it is on its file system (the
// member stopped) and returns the applied index it recorded.
func (r *pebbleSet) storeApplied(id uint64) uint64 {
	r.t.Helper()
	st, err := store.OpenPebble("store", store.PebbleOptions{FS: r.fs[id], NoWAL: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		r.t.Fatal(err)
	}
	defer st.Close()
	applied, err := getCounter(st, store.CounterApplied)
	if err != nil {
		r.t.Fatal(err)
	}
	return applied
}

// TestReplicaCrashReplays: a member's store has no WAL, so a member that
// crashes comes back at its store's last flush and applies the rest again
// from its raft log. A follower, then the leader, crash after hundreds of
// applies (with nothing flushed at all, and after snapshots flushed part
// of it), their stores come back behind what they had applied, and each
// ends with the same store as the others (nothing lost, nothing applied
// twice), then leads and serves the same namespace; a persisted
// parameter it replayed is in force on it.
func TestReplicaCrashReplays(t *testing.T) {
	for _, tc := range []struct {
		name        string
		every, keep uint64 // snapshots (0: the default, none in this test)
	}{
		{"nothing flushed", 0, 0},
		{"after snapshots", 150, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newPebbleSet(t, 3, func(rep *Replica) { rep.SnapshotEvery, rep.SnapshotKeep = tc.every, tc.keep })
			var dir proto.Attr
			r.do(func(s *Server) (err error) { dir, err = s.Mkdir(ctx, proto.RootIno, "d", 0755, 0, 0); return })
			var want []string
			next := 0
			load := func(n int) {
				for range n {
					if name, kept := r.createOrUnlink(dir.Ino, next); kept {
						want = append(want, name)
					}
					next++
				}
			}
			crashed := map[uint64]bool{}
			crashOne := func(id uint64) {
				t.Helper()
				r.converged()
				before, _ := r.srvs[id].ReplicaStatus()
				r.crash(id)
				got := r.storeApplied(id)
				if got >= before.Applied {
					t.Fatalf("member %d's store came back at %d, not behind the %d it had applied: nothing to replay", id, got, before.Applied)
				}
				if tc.every == 0 && got != 0 {
					t.Fatalf("member %d's store came back at %d: something was flushed", id, got)
				}
				if tc.every != 0 && got < before.Snapshot {
					t.Fatalf("member %d's store came back at %d, behind its snapshot at %d: the log may be compacted past it", id, got, before.Snapshot)
				}
				t.Logf("member %d: applied %d (snapshot %d); its store came back at %d", id, before.Applied, before.Snapshot, got)
				r.start(id)
				crashed[id] = true
			}

			// A persisted parameter applies on every member, also on one
			// that replays it after a crash (its store lacked it at start).
			const rate = 7 << 20
			r.do(func(s *Server) error { return s.SetParam(ctx, "rebuild.rate", "7MiB", true) })
			load(240)
			lead := r.leader()
			follower := r.ids[0]
			if follower == lead {
				follower = r.ids[1]
			}
			crashOne(follower)
			load(240)
			r.converged()
			if got := r.srvs[follower].rb.pace.Rate(); got != rate {
				t.Fatalf("member %d's rebuild rate after its replay: %d, want the persisted %d", follower, got, rate)
			}
			lead = r.leader()
			crashOne(lead)
			load(240)
			r.converged()
			for id := range crashed {
				checkInvariants(t, r.stores[id])
				r.campaign(id)
				if got := r.names(r.srvs[id], dir.Ino); !slices.Equal(got, want) {
					t.Fatalf("member %d lists %d names after its crash, want %d", id, len(got), len(want))
				}
			}
			load(30) // and serves changes
			r.converged()
		})
	}
}
