package meta

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/weft-fs/weft/internal/cputime"
	"github.com/weft-fs/weft/meta/raftlog"
	"github.com/weft-fs/weft/meta/store"
	"github.com/weft-fs/weft/proto"
)

// BenchmarkCreate measures file creates per second on pebble with synced
// group commit, from 1, 16 and 64 concurrent callers in one directory, and
// the process CPU time per create (user + system, fsync included). With
// dedupe, every caller is a session whose creates carry sequence numbers,
// so each create also stores its reply and deletes the acknowledged one.
func BenchmarkCreate(b *testing.B) {
	for _, dedupe := range []bool{false, true} {
		for _, callers := range []int{1, 16, 64} {
			benchCreate(b, callers, dedupe)
		}
	}
}

func benchCreate(b *testing.B, callers int, dedupe bool) {
	{
		b.Run(fmt.Sprintf("callers=%d/dedupe=%v", callers, dedupe), func(b *testing.B) {
			st, err := store.OpenPebble(b.TempDir(), store.PebbleOptions{})
			if err != nil {
				b.Fatal(err)
			}
			e := newEnv(b, func(o *Options) { o.Store = st; o.Now = time.Now })
			e.addTarget("t1", 1<<40)
			d, err := e.srv.Mkdir(ctx, proto.RootIno, "d", 0755, 0, 0)
			e.must(err)
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			start, cpu0 := time.Now(), cputime.Self()
			for w := range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					seq := uint64(0)
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							return
						}
						c := ctx
						if dedupe {
							seq++
							c = req(byte(w+1), seq)
						}
						_, err := e.srv.Create(c, proto.CreateIn{Parent: d.Ino, Name: fmt.Sprint("f", i), Mode: 0644})
						if err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "creates/s")
			b.ReportMetric(float64((cputime.Self()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
			groups, cmds := e.srv.GroupStats()
			b.ReportMetric(float64(cmds)/float64(groups), "cmds/group")
		})
	}
}

// BenchmarkRenewPerRequest measures what renewing the caller's session on
// every request would add (a lock of the server's session table, a map
// lookup and a clock read) next to a GetAttr, the cheapest request, from
// parallel callers. Sessions are renewed by explicit heartbeats instead.
func BenchmarkRenewPerRequest(b *testing.B) {
	e := newEnv(b)
	var ids atomic.Uint32
	for _, renew := range []bool{false, true} {
		b.Run(fmt.Sprintf("renew=%v", renew), func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				c := remote("bench", byte(ids.Add(1)))
				if _, err := e.srv.OpenSession(c, nil); err != nil {
					b.Error(err)
					return
				}
				for pb.Next() {
					if renew {
						if _, err := e.srv.RenewSession(c); err != nil {
							b.Error(err)
							return
						}
					}
					if _, err := e.srv.GetAttr(c, proto.RootIno); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkCreateReplicated is BenchmarkCreate on three replicated
// servers in this process (raft messages over a raftlog.MemNetwork, every
// store and raft log a pebble database of its own on disk, all fsyncs
// real): creates on the leader, from 1, 16 and 64 callers. Compare its
// creates/s with BenchmarkCreate's in the same run: all three members
// share this machine's cores and disk.
func BenchmarkCreateReplicated(b *testing.B) {
	for _, callers := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			nw := raftlog.NewMemNetwork()
			ids := []uint64{1, 2, 3}
			srvs := map[uint64]*Server{}
			for _, id := range ids {
				st, err := store.OpenPebble(b.TempDir(), store.PebbleOptions{NoWAL: true}) // as Run opens a member's
				if err != nil {
					b.Fatal(err)
				}
				lg, err := raftlog.OpenStorage(b.TempDir(), raftlog.StorageOptions{})
				if err != nil {
					b.Fatal(err)
				}
				srv, err := New(Options{Store: st, Storage: newFakeStorage(), OrphanGrace: time.Hour,
					Replica: &Replica{ID: id, Peers: ids, Log: lg, Transport: nw.Transport(id),
						Started: func(n *raftlog.Node) { nw.Attach(id, n) }, TickInterval: 10 * time.Millisecond}})
				if err != nil {
					b.Fatal(err)
				}
				srvs[id] = srv
				b.Cleanup(func() {
					nw.Detach(id)
					srv.Close()
					lg.Close()
					st.Close()
				})
			}
			var lead *Server
			waitFor(b, "a leader with a formatted store", func() bool {
				for _, s := range srvs {
					if st, _ := s.ReplicaStatus(); st.Ready {
						if _, err := s.GetAttr(ctx, proto.RootIno); err == nil {
							lead = s
							return true
						}
					}
				}
				return false
			})
			d, err := lead.Mkdir(ctx, proto.RootIno, "d", 0755, 0, 0)
			if err != nil {
				b.Fatal(err)
			}
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			start, cpu0 := time.Now(), cputime.Self()
			for range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							return
						}
						// A fifo needs no placement (the registry of
						// storage targets is not replicated yet).
						_, err := lead.Create(ctx, proto.CreateIn{Parent: d.Ino, Name: fmt.Sprint("f", i), Mode: syscall.S_IFIFO | 0644})
						if err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "creates/s")
			b.ReportMetric(float64((cputime.Self()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

// BenchmarkApplyCreate measures what every member spends applying one
// create entry, the state machine alone (raftApplier.Apply: decode the
// command, check, write the batch): on a pebble store without a WAL, as
// a member's, with the request's reply stored for dedupe and the
// caller's quota accounts charged. The figures to watch are -benchmem's
// allocs/op (the garbage every member makes per entry) and cpu-µs/op,
// the process's CPU time per apply, pebble's background work (the WAL
// writer, flushes) included: ns/op leaves out what runs on the other
// core. wal=true is the same on a store with a WAL (unsynced, as members
// had before): what the WAL cost each apply.
func BenchmarkApplyCreate(b *testing.B) {
	for _, wal := range []bool{false, true} {
		b.Run(fmt.Sprintf("wal=%v", wal), func(b *testing.B) { benchApply(b, wal, false) })
	}
}

// BenchmarkApplyUnlink is BenchmarkApplyCreate for the unlink of a file
// nobody has open, its last link, as mdtest's deletes are: the entry
// removes the name and reclaims the inode at once (Command.Inos), queueing
// its objects for removal. The files are made (untimed) first.
func BenchmarkApplyUnlink(b *testing.B) {
	benchApply(b, false, true)
}

// benchApply times b.N entries applied to a state machine on a pebble
// store (with or without its WAL): creates, or (unlink) the unlinks of
// b.N files created first, untimed.
func benchApply(b *testing.B, wal, unlink bool) {
	st, err := store.OpenPebble(b.TempDir(), store.PebbleOptions{NoWAL: !wal, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	sm, err := openStateMachine(st)
	if err != nil {
		b.Fatal(err)
	}
	a := &raftApplier{sm: sm, raise: func(uint64) {}}
	index := uint64(0)
	apply := func(c *Command) applyResult {
		index++
		r := a.Apply(index, c.Encode()).(appliedEntry)
		if r.err != nil {
			b.Fatal(r.err)
		}
		return r.res
	}
	apply(&Command{Op: OpInit, Now: 1, Mode: 0755, Text: "bench-fsid"})
	d := apply(&Command{Op: OpMkdir, Parent: proto.RootIno, Name: "d", Ino: proto.Ino(sm.nextIno), Mode: 0777, Now: 1}).attr
	cred := &proto.Cred{Uid: 1000, Gid: 1000}
	sess := proto.SessionID{1, 2, 3}
	entries := make([][]byte, b.N)
	inos := make([]proto.Ino, b.N)
	for i := range entries {
		inos[i] = proto.Ino(sm.nextIno + uint64(i))
		entries[i] = (&Command{Op: OpCreate, Parent: d.Ino, Name: fmt.Sprintf("f%08d", i), Ino: inos[i],
			Mode: syscall.S_IFIFO | 0644, Uid: 1000, Gid: 1000, Now: int64(i), Cred: cred,
			Session: sess, SessionName: "bench", Seq: uint64(i + 1)}).Encode()
	}
	if unlink {
		for i := range entries {
			index++
			if r := a.Apply(index, entries[i]).(appliedEntry); r.err != nil {
				b.Fatal(r.err)
			}
			entries[i] = (&Command{Op: OpUnlink, Parent: d.Ino, Name: fmt.Sprintf("f%08d", i), Inos: []proto.Ino{inos[i]},
				Now: int64(b.N + i), Cred: cred, Session: sess, SessionName: "bench", Seq: uint64(b.N + i + 1)}).Encode()
		}
	}
	files := sm.inodes
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cputime.Self()
	for i := range b.N {
		index++
		if r := a.Apply(index, entries[i]).(appliedEntry); r.err != nil {
			b.Fatal(r.err)
		}
	}
	b.ReportMetric(float64((cputime.Self()-cpu0).Nanoseconds())/1e3/float64(b.N), "cpu-µs/op")
	b.StopTimer()
	want := files + uint64(b.N)
	if unlink {
		want = files - uint64(b.N) // each reclaimed at once
	}
	if sm.inodes != want {
		b.Fatalf("%d inodes after the entries, want %d", sm.inodes, want)
	}
}
