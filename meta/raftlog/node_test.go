package raftlog

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func others(ids []uint64, not ...uint64) []uint64 {
	var out []uint64
	for _, id := range ids {
		if !slices.Contains(not, id) {
			out = append(out, id)
		}
	}
	return out
}

// checkSame fails unless every live node in ids has the same state and
// applied the same entries in the same order (since its last restore).
func (c *cluster) checkSame(ids []uint64) {
	c.t.Helper()
	var want string
	var wantOrder []string
	for i, id := range ids {
		sm := c.sm[id]
		got := sm.dump()
		sm.mu.Lock()
		order := append([]string(nil), sm.order...)
		base := sm.base
		sm.mu.Unlock()
		if i == 0 {
			want, wantOrder = got, order
			continue
		}
		if got != want {
			c.t.Fatalf("node %d has %q, node %d %q", id, got, ids[0], want)
		}
		// A node restored from a snapshot applied only the tail.
		if base == 0 && c.sm[ids[0]].base == 0 && !slices.Equal(order, wantOrder) {
			c.t.Fatalf("node %d applied %v, node %d %v", id, order, ids[0], wantOrder)
		}
	}
}

// TestElectAndReplicate: three nodes elect one leader; proposals on it,
// sequential and concurrent, commit and are applied on every node in the
// same order; a proposal on a follower is refused with the leader's id.
func TestElectAndReplicate(t *testing.T) {
	c := newCluster(t, 3, nil)
	lead := c.waitLeader(c.ids)
	for i := range 5 {
		v, err := c.propose(lead, fmt.Sprintf("k%d=v%d", i%2, i))
		if err != nil {
			t.Fatalf("propose %d: %v", i, err)
		}
		if i >= 2 && v != fmt.Sprintf("v%d", i-2) {
			t.Fatalf("proposal %d saw the previous value %q, want v%d", i, v, i-2)
		}
	}
	res := make([]<-chan asyncResult, 20)
	for i := range res {
		res[i] = c.proposeAsync(context.Background(), lead, fmt.Sprintf("c%d=%d", i, i))
	}
	for i, ch := range res {
		if r := <-ch; r.err != nil {
			t.Fatalf("concurrent proposal %d: %v", i, r.err)
		}
	}
	c.waitApplied(c.ids, c.nodes[lead].Status().Commit)
	c.checkSame(c.ids)
	if got := c.sm[c.ids[0]].dump(); len(got) == 0 || c.sm[lead].kv["k0"] != "v4" || c.sm[lead].kv["c19"] != "19" {
		t.Fatalf("state %q lacks acknowledged writes", got)
	}

	f := others(c.ids, lead)[0]
	_, err := c.propose(f, "x=from-follower")
	var nl *NotLeaderError
	if !errors.As(err, &nl) || !errors.Is(err, ErrNotLeader) || nl.Leader != lead {
		t.Fatalf("proposal on follower %d: %v, want NotLeaderError naming %d", f, err, lead)
	}
}

// TestLeaderCrash: the leader crashes (losing whatever it had not synced);
// the two others elect a new leader that has every acknowledged entry and
// commits new ones; the old leader restarts from its log and catches up.
func TestLeaderCrash(t *testing.T) {
	c := newCluster(t, 3, nil)
	old := c.waitLeader(c.ids)
	for i := range 5 {
		if _, err := c.propose(old, fmt.Sprintf("a%d=%d", i, i)); err != nil {
			t.Fatal(err)
		}
	}
	c.crash(old)
	rest := others(c.ids, old)
	lead := c.waitLeader(rest)
	if lead == old {
		t.Fatal("the crashed node is still leader")
	}
	for i := range 5 {
		if got := c.sm[lead].kv[fmt.Sprint("a", i)]; got != fmt.Sprint(i) {
			t.Fatalf("new leader %d lost acknowledged a%d (has %q)", lead, i, got)
		}
	}
	for i := range 5 {
		if _, err := c.propose(lead, fmt.Sprintf("b%d=%d", i, i)); err != nil {
			t.Fatalf("propose on new leader: %v", err)
		}
	}
	c.start(old)
	c.waitApplied(c.ids, c.nodes[lead].Status().Commit)
	c.checkSame(c.ids)
	if c.nodes[old].Status().IsLeader {
		t.Fatal("the restarted node took over while the new leader is up")
	}
}

// TestPartitionedLeader: a leader cut off from the majority acknowledges
// nothing (a proposal and a linearizable read on it never succeed) while
// the majority elects a new leader and commits; after the partition heals
// the old leader steps down, its uncommitted entry is overwritten, and it
// catches up.
func TestPartitionedLeader(t *testing.T) {
	c := newCluster(t, 3, nil)
	old := c.waitLeader(c.ids)
	if _, err := c.propose(old, "before=1"); err != nil {
		t.Fatal(err)
	}
	rest := others(c.ids, old)
	c.nw.Partition([]uint64{old}, rest)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	before := c.nodes[old].Status().LastIndex
	stranded := c.proposeAsync(ctx, old, "minority=lost")
	// The proposal must reach the old leader while it still leads: the
	// ticks below depose it, and a proposal that arrived after that would
	// fail at once with NotLeaderError (its goroutine may be scheduled
	// late on a loaded machine).
	c.waitStatus(old, "the stranded proposal to be appended on the old leader", func(st Status) bool { return st.LastIndex > before })
	read := make(chan error, 1)
	go func() { read <- c.nodes[old].ReadIndex(ctx) }()

	lead := c.waitLeader(rest)
	if _, err := c.propose(lead, "majority=1"); err != nil {
		t.Fatalf("majority side: %v", err)
	}
	// CheckQuorum: the old leader notices it lost its quorum.
	c.tickUntil("the old leader to step down", func() bool { return !c.nodes[old].Status().IsLeader })
	// Neither may have succeeded; either may have failed already (the
	// read fails when the node steps down).
	var strandedDone, readDone bool
	select {
	case r := <-stranded:
		strandedDone = true
		if r.err == nil {
			t.Fatalf("the minority leader acknowledged a proposal (%v)", r.v)
		}
	default:
	}
	select {
	case err := <-read:
		readDone = true
		if err == nil {
			t.Fatal("the minority leader confirmed a linearizable read")
		}
	default:
	}

	c.nw.Heal()
	c.tickUntil("the old leader to follow the new one", func() bool {
		return c.nodes[old].Status().Leader == lead
	})
	c.waitApplied(c.ids, c.nodes[lead].Status().Commit)
	c.checkSame(c.ids)
	for _, id := range c.ids {
		if _, ok := c.sm[id].kv["minority"]; ok {
			t.Fatalf("node %d applied the minority leader's proposal", id)
		}
		if c.sm[id].kv["majority"] != "1" || c.sm[id].kv["before"] != "1" {
			t.Fatalf("node %d: %s", id, c.sm[id].dump())
		}
	}
	// The old leader applied another entry at the stranded proposal's
	// index: its proposer knows, before any ctx ends, that it was dropped.
	if strandedDone {
		t.Fatal("the stranded proposal was resolved before the partition healed")
	}
	if r := <-stranded; !errors.Is(r.err, ErrDropped) {
		t.Fatalf("the stranded proposal: %v, %v; want ErrDropped", r.v, r.err)
	}
	cancel()
	if !readDone {
		if err := <-read; err == nil {
			t.Fatal("the stranded read succeeded")
		}
	}
}

// TestCrashAllRecovers: every node crashes at once, keeping only what its
// log fsync'd; after a restart every acknowledged entry is there: entries
// are on disk on a majority before they are acknowledged.
func TestCrashAllRecovers(t *testing.T) {
	c := newCluster(t, 3, nil)
	lead := c.waitLeader(c.ids)
	res := make([]<-chan asyncResult, 30)
	for i := range res {
		res[i] = c.proposeAsync(context.Background(), lead, fmt.Sprintf("k%d=%d", i, i))
	}
	for i, ch := range res {
		if r := <-ch; r.err != nil {
			t.Fatalf("proposal %d: %v", i, r.err)
		}
	}
	for _, id := range c.ids {
		c.crash(id)
	}
	for _, id := range c.ids {
		c.start(id)
	}
	lead = c.waitLeader(c.ids)
	// A new leader commits an entry of its term, and with it everything
	// before; then every node applies the whole log again.
	c.waitApplied(c.ids, c.nodes[lead].Status().Commit)
	for _, id := range c.ids {
		for i := range res {
			if got := c.sm[id].kv[fmt.Sprint("k", i)]; got != fmt.Sprint(i) {
				t.Fatalf("node %d lost acknowledged k%d after the crash (has %q)", id, i, got)
			}
		}
	}
	c.checkSame(c.ids)
}

// TestSnapshotCatchUp: with snapshots every 10 entries the log stays short;
// a follower that was down while the leader compacted past its log is
// sent a snapshot and then the tail, and ends with the same state; every
// node restarts from its own snapshot and log (keeping no entries before
// the snapshot, or a few).
func TestSnapshotCatchUp(t *testing.T) {
	for _, keep := range []uint64{0, 3} {
		t.Run(fmt.Sprint("keep=", keep), func(t *testing.T) {
			c := newCluster(t, 3, func(cfg *Config) { cfg.SnapshotEvery, cfg.SnapshotKeep = 10, keep })
			lead := c.waitLeader(c.ids)
			down := others(c.ids, lead)[0]
			c.crash(down)
			for i := range 60 {
				if _, err := c.propose(lead, fmt.Sprintf("k%d=%d", i%7, i)); err != nil {
					t.Fatal(err)
				}
			}
			first, _ := c.st[lead].FirstIndex()
			last, _ := c.st[lead].LastIndex()
			if first <= 1 || last-first+1 > 10+keep+1 {
				t.Fatalf("leader's log holds [%d, %d]: not compacted to the last snapshot", first, last)
			}
			c.start(down)
			c.waitApplied(c.ids, c.nodes[lead].Status().Commit)
			c.checkSame(c.ids)
			if c.sm[down].base == 0 {
				t.Fatalf("node %d caught up without a snapshot", down)
			}
			// Every node restarts from its own snapshot and log, the
			// leader too.
			for _, id := range c.ids {
				c.crash(id)
				c.start(id)
				lead = c.waitLeader(c.ids)
				if _, err := c.propose(lead, fmt.Sprintf("after%d=1", id)); err != nil {
					t.Fatal(err)
				}
			}
			c.waitApplied(c.ids, c.nodes[lead].Status().Commit)
			c.checkSame(c.ids)
			if c.sm[lead].kv["k6"] != "55" || c.sm[lead].kv["after3"] != "1" {
				t.Fatalf("state after restarts: %s", c.sm[lead].dump())
			}
		})
	}
}

// TestReadIndex: a read on the leader after an acknowledged write sees it;
// a follower refuses, naming the leader.
func TestReadIndex(t *testing.T) {
	c := newCluster(t, 3, nil)
	lead := c.waitLeader(c.ids)
	if _, err := c.propose(lead, "x=1"); err != nil {
		t.Fatal(err)
	}
	if err := c.nodes[lead].ReadIndex(context.Background()); err != nil {
		t.Fatalf("read on leader: %v", err)
	}
	if c.sm[lead].kv["x"] != "1" {
		t.Fatal("a read after an acknowledged write does not see it")
	}
	f := others(c.ids, lead)[0]
	err := c.nodes[f].ReadIndex(context.Background())
	var nl *NotLeaderError
	if !errors.As(err, &nl) || nl.Leader != lead {
		t.Fatalf("read on follower: %v, want NotLeaderError naming %d", err, lead)
	}
}

// TestOnLeader: OnLeader runs on each new leader, on its own goroutine
// order, when its state machine holds every entry the previous leader
// acknowledged. (That followers usually applied them already, from the
// commit index the old leader sent, does not weaken what is asserted.)
func TestOnLeader(t *testing.T) {
	type call struct {
		id, term uint64
		a4       string
	}
	calls := make(chan call, 16)
	var c *cluster
	c = newCluster(t, 3, func(cfg *Config) {
		id := cfg.ID
		sm := cfg.SM.(*kvSM)
		cfg.OnLeader = func(term uint64) {
			sm.mu.Lock()
			calls <- call{id, term, sm.kv["a4"]}
			sm.mu.Unlock()
		}
	})
	old := c.waitLeader(c.ids)
	if got := <-calls; got.id != old {
		t.Fatalf("OnLeader ran on %d, the leader is %d", got.id, old)
	}
	for i := range 5 {
		if _, err := c.propose(old, fmt.Sprintf("a%d=%d", i, i)); err != nil {
			t.Fatal(err)
		}
	}
	c.crash(old)
	lead := c.waitLeader(others(c.ids, old))
	got := <-calls
	if got.id != lead || got.a4 != "4" {
		t.Fatalf("OnLeader on %d (leader %d) with a4=%q: the previous leader's entries were not applied first", got.id, lead, got.a4)
	}
}

// TestOnRole: OnRole tells a node when it becomes leader and when it
// stops being it (here: cut off from the others, it steps down when it
// misses a quorum, CheckQuorum), and the others nothing until one of them
// is elected in its place. Each call comes before the status that shows
// the change is published.
func TestOnRole(t *testing.T) {
	type call struct {
		id     uint64
		leader bool
	}
	calls := make(chan call, 16)
	told := func() []call { // the calls made so far, in order
		var out []call
		for {
			select {
			case c := <-calls:
				out = append(out, c)
			default:
				return out
			}
		}
	}
	c := newCluster(t, 3, func(cfg *Config) {
		id := cfg.ID
		cfg.OnRole = func(leader bool) { calls <- call{id, leader} }
	})
	old := c.waitLeader(c.ids)
	if got := told(); !slices.Equal(got, []call{{old, true}}) {
		t.Fatalf("OnRole calls %+v once %d leads, want [{%d true}]", got, old, old)
	}
	c.nw.Partition([]uint64{old}, others(c.ids, old))
	c.tickUntil("the cut-off leader steps down", func() bool { return !c.nodes[old].Status().IsLeader })
	lead := c.waitLeader(others(c.ids, old))
	got := told()
	slices.SortFunc(got, func(a, b call) int { return cmp.Compare(a.id, b.id) })
	want := []call{{old, false}, {lead, true}}
	slices.SortFunc(want, func(a, b call) int { return cmp.Compare(a.id, b.id) })
	if !slices.Equal(got, want) {
		t.Fatalf("OnRole calls %+v after %d was cut off and %d elected, want %+v", got, old, lead, want)
	}
}

// TestStateAheadOfLog: a state machine with a store of its own can keep
// more than its log's last synced HardState says was committed (the
// commit index is written unsynced). After a crash the node still starts,
// applies no entry twice (kvSM panics if it sees an index again) and
// converges.
func TestStateAheadOfLog(t *testing.T) {
	c := newCluster(t, 3, nil)
	lead := c.waitLeader(c.ids)
	f := others(c.ids, lead)[0]
	for round := range 5 {
		for i := range 5 {
			if _, err := c.propose(lead, fmt.Sprintf("r%d=%d", round, i)); err != nil {
				t.Fatal(err)
			}
		}
		c.settle()
		sm := c.sm[f]
		c.crash(f)
		c.keep[f] = sm
		c.start(f)
		c.waitApplied(c.ids, c.nodes[lead].Status().Commit)
		if got := c.sm[f].kv[fmt.Sprint("r", round)]; got != "4" {
			t.Fatalf("round %d: follower has %q", round, got)
		}
	}
	if dump, want := c.sm[f].dump(), c.sm[lead].dump(); dump != want {
		t.Fatalf("follower %q, leader %q", dump, want)
	}
}

// TestBadConfig: ids out of range, duplicate peers and a peer list
// without this node are refused before anything is written.
func TestBadConfig(t *testing.T) {
	st, err := OpenStorage("log", StorageOptions{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	nw := NewMemNetwork()
	for _, cfg := range []Config{
		{ID: 0, Peers: []uint64{1}},
		{ID: 1 << 16, Peers: []uint64{1 << 16}},
		{ID: 1, Peers: []uint64{1, 2, 2}},
		{ID: 1, Peers: []uint64{2, 3}},
		{ID: 1},
	} {
		cfg.Storage, cfg.SM, cfg.Transport = st, newKV(), nw.Transport(cfg.ID)
		if n, err := NewNode(cfg); err == nil {
			n.Stop()
			t.Errorf("id %d peers %v: accepted", cfg.ID, cfg.Peers)
		}
	}
	if last, _ := st.LastIndex(); last != 0 {
		t.Fatalf("a refused config left %d entries", last)
	}
}
