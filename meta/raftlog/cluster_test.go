package raftlog

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// kvSM is the test state machine: "k=v" sets k, and Apply returns the
// previous value. It is in memory (a restarted node starts empty and is
// rebuilt from its log, or from the log's snapshot), and it records the
// order it applied entries in.
type kvSM struct {
	mu      sync.Mutex
	kv      map[string]string
	applied uint64
	fs      vfs.FS   // where its snapshots are
	order   []string // "index:data" of every entry applied since the last restore
	base    uint64   // the snapshot index the state was last restored from
	// log is the node's log: an entry applied beyond its last index (not
	// yet written, so a crash could lose it from the log but not from a
	// state machine with a store of its own) is recorded in ahead.
	log   *Storage
	ahead []string
}

func newKV() *kvSM { return &kvSM{kv: map[string]string{}} }

func (m *kvSM) Apply(index uint64, data []byte) any {
	m.mu.Lock()
	defer m.mu.Unlock()
	if index <= m.applied {
		panic(fmt.Sprintf("kv: applied %d after %d", index, m.applied))
	}
	if m.log != nil {
		if last, _ := m.log.LastIndex(); index > last {
			m.ahead = append(m.ahead, fmt.Sprintf("entry %d applied while the log ends at %d", index, last))
		}
	}
	k, v, _ := strings.Cut(string(data), "=")
	prev := m.kv[k]
	m.kv[k] = v
	m.applied = index
	m.order = append(m.order, fmt.Sprintf("%d:%s", index, data))
	return prev
}

func (m *kvSM) Applied() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.applied
}

type kvSnap struct {
	KV    map[string]string
	Index uint64
}

// Snapshot writes the state as one JSON file, synced.
func (m *kvSM) Snapshot(index uint64, dir string) error {
	m.mu.Lock()
	b, err := json.Marshal(kvSnap{KV: m.kv, Index: index})
	m.mu.Unlock()
	if err != nil {
		return err
	}
	if err := m.fs.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := m.fs.Create(m.fs.PathJoin(dir, "state.json"), vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		return err
	}
	return f.Sync()
}

func (m *kvSM) Restore(index uint64, dir string) error {
	f, err := m.fs.Open(m.fs.PathJoin(dir, "state.json"))
	if err != nil {
		return err
	}
	defer f.Close()
	var s kvSnap
	if err := json.NewDecoder(f).Decode(&s); err != nil {
		return err
	}
	if s.KV == nil {
		s.KV = map[string]string{}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.kv, m.applied, m.base, m.order = s.KV, index, index, nil
	return nil
}

func (m *kvSM) dump() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	keys := make([]string, 0, len(m.kv))
	for k := range m.kv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%s", k, m.kv[k])
	}
	return b.String()
}

// cluster is a raft group on a MemNetwork, each member's log on a
// crashable in-memory file system of its own.
type cluster struct {
	t     testing.TB
	ids   []uint64
	nw    *MemNetwork
	fs    map[uint64]*vfs.MemFS
	st    map[uint64]*Storage
	sm    map[uint64]*kvSM
	nodes map[uint64]*Node
	cfg   func(*Config)
	// keep holds the state machines that survive their node's crash
	// (a state machine with a store of its own), for the next start.
	keep map[uint64]*kvSM
	// join: nodes started to join the running group (Config.Join).
	join map[uint64]bool
}

// answeredNetworks makes newCluster's networks deliver messages as
// answered calls (MemNetwork.Answered): TestAnsweredNetwork sets it to run
// the node tests again that way. No raftlog test runs in parallel.
var answeredNetworks atomic.Bool

func newCluster(t testing.TB, n int, cfg func(*Config)) *cluster {
	nw := NewMemNetwork()
	nw.ChunkSize = 7 // a snapshot in many chunks
	nw.Answered = answeredNetworks.Load()
	c := &cluster{t: t, nw: nw, fs: map[uint64]*vfs.MemFS{}, st: map[uint64]*Storage{},
		sm: map[uint64]*kvSM{}, nodes: map[uint64]*Node{}, cfg: cfg, keep: map[uint64]*kvSM{}, join: map[uint64]bool{}}
	for i := 1; i <= n; i++ {
		c.ids = append(c.ids, uint64(i))
		c.fs[uint64(i)] = vfs.NewCrashableMem()
	}
	for _, id := range c.ids {
		c.start(id)
	}
	// Runs after stopAll (cleanups run last first): no state machine ever
	// applied an entry its log did not hold yet.
	t.Cleanup(func() {
		for id, sm := range c.sm {
			sm.mu.Lock()
			if len(sm.ahead) > 0 {
				t.Errorf("node %d applied entries before its log had them: %v", id, sm.ahead)
			}
			sm.mu.Unlock()
		}
	})
	t.Cleanup(c.stopAll)
	return c
}

// start opens id's log on its file system and starts a node with a fresh
// (empty) state machine.
func (c *cluster) start(id uint64) {
	c.t.Helper()
	st, err := OpenStorage("log", StorageOptions{FS: c.fs[id]})
	if err != nil {
		c.t.Fatalf("node %d: %v", id, err)
	}
	sm := c.keep[id]
	delete(c.keep, id)
	if sm == nil {
		sm = newKV()
	}
	sm.fs = c.fs[id]
	sm.mu.Lock()
	sm.log = st
	sm.mu.Unlock()
	snaps, err := OpenSnapshots(c.fs[id], "snap")
	if err != nil {
		c.t.Fatalf("node %d: %v", id, err)
	}
	cfg := Config{ID: id, Peers: c.ids, Storage: st, SM: sm, Transport: c.nw.Transport(id), Snapshots: snaps, Join: c.join[id]}
	if c.cfg != nil {
		c.cfg(&cfg)
	}
	n, err := NewNode(cfg)
	if err != nil {
		st.Close()
		c.t.Fatalf("node %d: %v", id, err)
	}
	c.st[id], c.sm[id], c.nodes[id] = st, sm, n
	c.nw.Attach(id, n)
}

// crash stops id and drops everything its log did not sync, as a power
// loss would: the next start sees only what was fsync'd.
func (c *cluster) crash(id uint64) {
	c.t.Helper()
	n := c.nodes[id]
	if n == nil {
		c.t.Fatalf("node %d is not running", id)
	}
	c.nw.Detach(id)
	n.Stop()
	synced := c.fs[id].CrashClone(vfs.CrashCloneCfg{})
	if err := c.st[id].Close(); err != nil {
		c.t.Fatalf("node %d: close log: %v", id, err)
	}
	c.fs[id] = synced
	delete(c.nodes, id)
	delete(c.st, id)
}

func (c *cluster) stopAll() {
	for id := range c.nodes {
		if n := c.nodes[id]; n != nil {
			c.nw.Detach(id)
			n.Stop()
			c.st[id].Close()
			delete(c.nodes, id)
		}
	}
}

func (c *cluster) live() []uint64 {
	var out []uint64
	for id, n := range c.nodes {
		if n != nil {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// settle waits until every live node has handled every message and
// request it was given and the network delivered nothing meanwhile: the
// group is quiet until the next tick or proposal. Some of that waits for
// real time (appends held back for CommitNoticeDelay or LaggardDelay, the
// goroutines that deliver answered calls), which a loaded machine
// stretches: settle checks again and again, pausing between checks once
// a thousand found the group busy, and gives up only after
// settleTimeout, against a group that never quiets (a livelock).
func (c *cluster) settle() {
	c.t.Helper()
	deadline := time.Now().Add(settleTimeout)
	for i := 0; time.Now().Before(deadline); i++ {
		if i >= 1000 {
			time.Sleep(50 * time.Microsecond)
		}
		d0, _ := c.nw.Delivered()
		quiet := true
		for _, id := range c.live() {
			n := c.nodes[id]
			ch := make(chan bool, 1)
			if err := n.do(context.Background(), func() {
				ch <- len(n.recv) == 0 && len(n.reqs) == 0 && !n.rn.HasReady() && n.ap.idle()
			}); err != nil {
				c.t.Fatalf("node %d: %v", id, err)
			}
			quiet = <-ch && quiet
		}
		if d1, underWay := c.nw.Delivered(); quiet && d1 == d0 && underWay == 0 {
			return
		}
	}
	c.t.Fatalf("the group did not become quiet in %v", settleTimeout)
}

// settleTimeout bounds settle against a livelock only: a quiet group is
// normally found within milliseconds.
const settleTimeout = 2 * time.Minute

// tick advances every live node's clock by one tick and lets the group
// settle.
func (c *cluster) tick() {
	for _, id := range c.live() {
		c.nodes[id].Tick()
	}
	c.settle()
}

// tickUntil ticks until cond holds, failing after maxTicks (raft's
// election timeout is 10 to 20 ticks, so 500 is many elections).
func (c *cluster) tickUntil(what string, cond func() bool) {
	c.t.Helper()
	const maxTicks = 500
	c.settle()
	for range maxTicks {
		if cond() {
			return
		}
		c.tick()
	}
	c.t.Fatalf("after %d ticks: %s never happened; %s", maxTicks, what, c.statuses())
}

// leader returns the leader that every live node in ids agrees on, or 0.
func (c *cluster) leaderOf(ids []uint64) uint64 {
	var lead uint64
	for _, id := range ids {
		n := c.nodes[id]
		if n == nil {
			continue
		}
		st := n.Status()
		if st.Leader == 0 || (lead != 0 && st.Leader != lead) {
			return 0
		}
		lead = st.Leader
	}
	if lead == 0 || !slices.Contains(ids, lead) || c.nodes[lead] == nil || !c.nodes[lead].Status().Ready {
		return 0
	}
	return lead
}

func (c *cluster) waitLeader(ids []uint64) uint64 {
	c.t.Helper()
	var lead uint64
	c.tickUntil(fmt.Sprintf("a leader among %v", ids), func() bool {
		lead = c.leaderOf(ids)
		return lead != 0
	})
	return lead
}

func (c *cluster) statuses() string {
	var b strings.Builder
	for _, id := range c.ids {
		n := c.nodes[id]
		if n == nil {
			fmt.Fprintf(&b, "[%d down] ", id)
			continue
		}
		s := n.Status()
		fmt.Fprintf(&b, "[%d lead=%d term=%d commit=%d applied=%d last=%d] ", id, s.Leader, s.Term, s.Commit, s.Applied, s.LastIndex)
	}
	return b.String()
}

// propose proposes on id and waits for the answer.
func (c *cluster) propose(id uint64, data string) (any, error) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // against hangs only
	defer cancel()
	return c.nodes[id].Propose(ctx, []byte(data))
}

// async proposes on id in the background; the result arrives on the
// returned channel.
type asyncResult struct {
	v   any
	err error
}

func (c *cluster) proposeAsync(ctx context.Context, id uint64, data string) <-chan asyncResult {
	ch := make(chan asyncResult, 1)
	n := c.nodes[id]
	go func() {
		v, err := n.Propose(ctx, []byte(data))
		ch <- asyncResult{v, err}
	}()
	return ch
}

// waitApplied waits until every live node in ids has applied through the
// leader's commit index.
func (c *cluster) waitApplied(ids []uint64, index uint64) {
	c.t.Helper()
	c.tickUntil(fmt.Sprintf("nodes %v apply index %d", ids, index), func() bool {
		for _, id := range ids {
			if n := c.nodes[id]; n != nil && n.Status().Applied < index {
				return false
			}
		}
		return true
	})
}

// waitStatus waits, without ticking, until node id's status satisfies
// cond (the outer timeout is only against hangs).
func (c *cluster) waitStatus(id uint64, what string, cond func(Status) bool) {
	c.t.Helper()
	n := c.nodes[id]
	timeout := time.After(time.Minute)
	for {
		ch := n.Changed()
		if cond(n.Status()) {
			return
		}
		select {
		case <-ch:
		case <-timeout:
			c.t.Fatalf("%s never happened; %s", what, c.statuses())
		}
	}
}
