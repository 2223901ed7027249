package meta

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/weft-fs/weft/meta/raftlog"
	"github.com/weft-fs/weft/meta/store"
	"github.com/weft-fs/weft/proto"
)

// pebbleSet is a group of replicated Servers in one process on a
// raftlog.MemNetwork, each with a pebble store, raft log and snapshot
// directory on an in-memory file system of its own (replicaSet's store.Mem
// cannot be checkpointed). Members can be added to the group's network
// with a fresh, empty file system (membership tests).
type pebbleSet struct {
	t      *testing.T
	ids    []uint64 // the members started at the beginning (raft's bootstrap peers)
	nw     *raftlog.MemNetwork
	fs     map[uint64]vfs.FS
	stores map[uint64]*store.Pebble
	logs   map[uint64]*raftlog.Storage
	srvs   map[uint64]*Server
	tune   func(*Replica)
	// join: members started to join the running group (Replica.Join).
	join map[uint64]bool
	mu   sync.Mutex // guards srvs against running
}

func newPebbleSet(t *testing.T, n int, tune func(*Replica)) *pebbleSet {
	r := &pebbleSet{t: t, nw: raftlog.NewMemNetwork(), fs: map[uint64]vfs.FS{}, stores: map[uint64]*store.Pebble{},
		logs: map[uint64]*raftlog.Storage{}, srvs: map[uint64]*Server{}, tune: tune, join: map[uint64]bool{}}
	r.nw.ChunkSize = 64 << 10 // a snapshot in many chunks
	for i := 1; i <= n; i++ {
		id := uint64(i)
		r.ids = append(r.ids, id)
		r.fs[id] = vfs.NewCrashableMem()
	}
	for _, id := range r.ids {
		r.start(id)
	}
	t.Cleanup(func() {
		for id := range r.srvs {
			r.stop(id)
		}
	})
	return r
}

func (r *pebbleSet) start(id uint64) {
	r.t.Helper()
	if err := r.tryStart(id); err != nil {
		r.t.Fatal(err)
	}
}

// tryStart starts member id, or returns why it cannot.
func (r *pebbleSet) tryStart(id uint64) error {
	if r.fs[id] == nil {
		r.fs[id] = vfs.NewCrashableMem()
	}
	quiet := slog.New(slog.DiscardHandler)
	// As Run opens a member's store: without a WAL.
	st, err := store.OpenPebble("store", store.PebbleOptions{FS: r.fs[id], CacheSize: 1 << 20, Logger: quiet, NoWAL: true})
	if err != nil {
		return err
	}
	lg, err := raftlog.OpenStorage("raft", raftlog.StorageOptions{FS: r.fs[id]})
	if err != nil {
		st.Close()
		return err
	}
	rep := &Replica{
		ID: id, Peers: r.ids, Log: lg, Transport: r.nw.Transport(id),
		Started:      func(n *raftlog.Node) { r.nw.Attach(id, n) },
		TickInterval: 5 * time.Millisecond, ElectionTick: 50, Join: r.join[id],
	}
	if r.tune != nil {
		r.tune(rep)
	}
	srv, err := New(Options{Store: st, Storage: newFakeStorage(), Seed: 1, OrphanGrace: time.Hour, Replica: rep})
	if err != nil {
		lg.Close()
		st.Close()
		return err
	}
	r.mu.Lock()
	r.stores[id], r.logs[id], r.srvs[id] = st, lg, srv
	r.mu.Unlock()
	return nil
}

// running returns the running members' servers (any goroutine).
func (r *pebbleSet) running() map[uint64]*Server {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.srvs)
}

func (r *pebbleSet) stop(id uint64) {
	r.nw.Detach(id)
	r.srvs[id].Close()
	r.logs[id].Close()
	r.stores[id].Close()
	r.mu.Lock()
	delete(r.srvs, id)
	r.mu.Unlock()
	delete(r.logs, id)
	delete(r.stores, id)
}

// crash stops id as a power loss would: the next start sees only what
// its store, log and snapshots had synced.
func (r *pebbleSet) crash(id uint64) {
	r.nw.Detach(id)
	r.srvs[id].Close() // stops the node: nothing more is sent or written
	synced := r.fs[id].(*vfs.MemFS).CrashClone(vfs.CrashCloneCfg{})
	r.logs[id].Close()
	r.stores[id].Close()
	r.fs[id] = synced
	r.mu.Lock()
	delete(r.srvs, id)
	r.mu.Unlock()
	delete(r.logs, id)
	delete(r.stores, id)
}

func (r *pebbleSet) eventually(what string, cond func() bool) {
	r.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			r.t.Fatalf("%s never happened", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func (r *pebbleSet) leader() uint64 {
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

// do runs op on the leader, again if leadership moved before it was taken.
func (r *pebbleSet) do(op func(s *Server) error) {
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

// converged waits until every running member applied the leader's commit
// index and checks their stores hold the same keys and values.
// createOrUnlink creates file i (f%04d) in dir on the leader and unlinks
// every third one again; kept says whether the file stays. A retry after
// a change of leader may find its first attempt done (EEXIST, ENOENT).
func (r *pebbleSet) createOrUnlink(dir proto.Ino, i int) (name string, kept bool) {
	name = fmt.Sprintf("f%04d", i)
	r.do(func(s *Server) error {
		_, err := s.Create(ctx, proto.CreateIn{Parent: dir, Name: name, Mode: syscall.S_IFIFO | 0644})
		if errors.Is(err, syscall.EEXIST) {
			err = nil
		}
		return err
	})
	if i%3 != 0 {
		return name, true
	}
	r.do(func(s *Server) error {
		err := s.Unlink(ctx, dir, name)
		if errors.Is(err, syscall.ENOENT) {
			err = nil
		}
		return err
	})
	return name, false
}

func (r *pebbleSet) converged() {
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
	want := dumpStore(r.stores[lead])
	for id := range r.srvs {
		if got := dumpStore(r.stores[id]); got != want {
			r.t.Fatalf("member %d's store differs from the leader's (%d)", id, lead)
		}
	}
}

// dumpStore is every key and value but the applied index, which a member
// that restored a snapshot or took one after an entry that was not a
// command records where the others have not yet.
func dumpStore(st store.Reader) string {
	var b bytes.Buffer
	applied := store.CounterKey(store.CounterApplied)
	st.Scan(nil, nil, func(k, v []byte) bool {
		if !bytes.Equal(k, applied) {
			fmt.Fprintf(&b, "%x=%x\n", k, v)
		}
		return true
	})
	return b.String()
}

func (r *pebbleSet) names(s *Server, dir proto.Ino) []string {
	r.t.Helper()
	var out []string
	after := ""
	for {
		ents, err := s.ReadDir(ctx, dir, after, 1000)
		if err != nil {
			r.t.Fatal(err)
		}
		if len(ents) == 0 {
			return out
		}
		for _, e := range ents {
			out = append(out, e.Name)
		}
		after = ents[len(ents)-1].Name
	}
}

// campaign makes id leader (a leadership transfer).
func (r *pebbleSet) campaign(id uint64) {
	r.t.Helper()
	r.eventually(fmt.Sprintf("member %d leads", id), func() bool {
		if st, _ := r.srvs[id].ReplicaStatus(); st.Ready {
			return true
		}
		c, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		lead := r.leader()
		_ = r.srvs[lead].replica.node.TransferLeadership(c, id)
		time.Sleep(50 * time.Millisecond)
		st, _ := r.srvs[id].ReplicaStatus()
		return st.Ready
	})
}

// TestReplicaSnapshotCatchUp: a member cut off while thousands of
// entries commit, and the others compact their logs past what it has,
// catches up from a snapshot streamed to it in chunks (its own log never
// held those entries), ends with the same store, and then serves the same
// namespace as leader.
func TestReplicaSnapshotCatchUp(t *testing.T) {
	r := newPebbleSet(t, 3, func(rep *Replica) { rep.SnapshotEvery, rep.SnapshotKeep = 200, 20 })
	var dir proto.Attr
	r.do(func(s *Server) (err error) { dir, err = s.Mkdir(ctx, proto.RootIno, "d", 0755, 0, 0); return })
	r.converged()
	lead := r.leader()
	behind := r.ids[0]
	if behind == lead {
		behind = r.ids[1]
	}
	var rest []uint64
	for _, id := range r.ids {
		if id != behind {
			rest = append(rest, id)
		}
	}
	stBehind, _ := r.srvs[behind].ReplicaStatus()
	r.nw.Partition([]uint64{behind}, rest)

	const files = 1500
	var want []string
	for i := range files {
		if name, kept := r.createOrUnlink(dir.Ino, i); kept {
			want = append(want, name)
		}
	}
	lead = r.leader()
	first, _ := r.logs[lead].FirstIndex()
	if first <= stBehind.Applied+1 {
		t.Fatalf("the leader's log starts at %d, not compacted past member %d's applied %d", first, behind, stBehind.Applied)
	}

	r.nw.Heal()
	r.converged()
	bFirst, _ := r.logs[behind].FirstIndex()
	if bFirst <= stBehind.Applied+1 {
		t.Fatalf("member %d's log starts at %d: it caught up from the log, not a snapshot", behind, bFirst)
	}
	if st, _ := r.srvs[behind].ReplicaStatus(); st.Snapshot < first-1 {
		t.Fatalf("member %d restored no snapshot at or after %d (status %+v)", behind, first-1, st)
	}
	checkInvariants(t, r.stores[behind])

	// The member that caught up leads and serves the same namespace, and
	// its inode allocator is above every number handed out.
	r.campaign(behind)
	got := r.names(r.srvs[behind], dir.Ino)
	if !slices.Equal(got, want) {
		t.Fatalf("member %d lists %d names after catching up, want %d", behind, len(got), len(want))
	}
	a, err := r.srvs[behind].Create(ctx, proto.CreateIn{Parent: dir.Ino, Name: "new", Mode: syscall.S_IFIFO | 0644})
	if err != nil {
		t.Fatalf("create on the member that caught up: %v", err)
	}
	last, err := r.srvs[behind].Lookup(ctx, dir.Ino, want[len(want)-1])
	if err != nil || a.Ino <= last.Ino {
		t.Fatalf("new inode %d, last before %d (%v)", a.Ino, last.Ino, err)
	}
	r.converged()
}

// treeBytes is the size of every file under dir.
func treeBytes(fs vfs.FS, dir string) int64 {
	names, err := fs.List(dir)
	if err != nil {
		return 0
	}
	var n int64
	for _, name := range names {
		p := fs.PathJoin(dir, name)
		st, err := fs.Stat(p)
		if err != nil {
			continue
		}
		if st.IsDir() {
			n += treeBytes(fs, p)
		} else {
			n += st.Size()
		}
	}
	return n
}

// diskUse is a member's bytes on disk: raft log, store, snapshots.
type diskUse struct{ log, store, snaps int64 }

func (d diskUse) total() int64 { return d.log + d.store + d.snaps }

func (r *pebbleSet) diskUse(id uint64) diskUse {
	fs := r.fs[id]
	return diskUse{log: treeBytes(fs, "raft"), store: treeBytes(fs, "store"), snaps: treeBytes(fs, "store.snapshots")}
}

// TestReplicaDiskBounded: in a long create/unlink loop (every entry a
// change, nothing left at the end) every member's raft log holds at most
// SnapshotEvery+SnapshotKeep entries plus what is in flight, and its
// snapshot directory at most two sealed snapshots (the last one and the
// one before, which a sender may still read). Bytes on disk
// are pebble's to reclaim (a deleted log entry goes when its range
// tombstone is compacted) and level off only after tens of thousands of
// entries: WEFT_DISK_LOOP=N runs N iterations, logs the numbers
// (docs/performance.md, "Replicated metadata") and checks that the
// largest use in the last quarter of the loop is within 25 % of the
// largest in the third.
func TestReplicaDiskBounded(t *testing.T) {
	iters, long := 6000, false
	if v := os.Getenv("WEFT_DISK_LOOP"); v != "" {
		iters, _ = strconv.Atoi(v)
		long = true
	}
	const every, keep = 1000, 100
	r := newPebbleSet(t, 3, func(rep *Replica) { rep.SnapshotEvery, rep.SnapshotKeep = every, keep })
	var dir proto.Attr
	r.do(func(s *Server) (err error) { dir, err = s.Mkdir(ctx, proto.RootIno, "d", 0755, 0, 0); return })
	var third, fourth int64
	const samples = 8
	for i := range iters {
		name := fmt.Sprint("f", i)
		r.do(func(s *Server) error {
			_, err := s.Create(ctx, proto.CreateIn{Parent: dir.Ino, Name: name, Mode: syscall.S_IFIFO | 0644})
			if errors.Is(err, syscall.EEXIST) {
				err = nil
			}
			return err
		})
		r.do(func(s *Server) error {
			err := s.Unlink(ctx, dir.Ino, name)
			if errors.Is(err, syscall.ENOENT) {
				err = nil
			}
			return err
		})
		if (i+1)%(iters/samples) != 0 {
			continue
		}
		lead := r.leader()
		for _, id := range r.ids {
			first, _ := r.logs[id].FirstIndex()
			last, _ := r.logs[id].LastIndex()
			if entries := last - first + 1; entries > every+keep+64 {
				t.Fatalf("member %d's log holds %d entries [%d, %d], more than SnapshotEvery+SnapshotKeep", id, entries, first, last)
			}
			all, _ := r.fs[id].List("store.snapshots")
			var names []string // sealed (not one being written or received)
			for _, n := range all {
				if !strings.HasPrefix(n, "tmp-") && !strings.HasPrefix(n, "recv-") {
					names = append(names, n)
				}
			}
			// Two are kept; a third is there between a new one's seal and
			// the prune that follows it on the node goroutine.
			if len(names) > 3 {
				t.Fatalf("member %d keeps %v in its snapshot directory", id, names)
			}
			u := r.diskUse(id)
			switch q := (i + 1) * 4 / iters; {
			case q == 2:
				third = max(third, u.total())
			case q >= 3:
				fourth = max(fourth, u.total())
			}
			if id == lead {
				st, _ := r.srvs[id].ReplicaStatus()
				t.Logf("iteration %d: applied %d, leader %d: raft log %d KiB (%d entries), store %d KiB, snapshots %d KiB (%d)",
					i+1, st.Applied, id, u.log>>10, last-first+1, u.store>>10, u.snaps>>10, len(names))
			}
		}
	}
	if long && fourth > third+third/4 {
		t.Fatalf("disk use still grows: at most %d bytes in the third quarter of the loop, %d in the last", third, fourth)
	}
}
