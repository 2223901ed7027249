package raftlog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	pb "go.etcd.io/raft/v3/raftpb"
)

func change(typ pb.ConfChangeType, id uint64) []*pb.ConfChangeSingle {
	return []*pb.ConfChangeSingle{{Type: typ.Enum(), NodeId: new(id)}}
}

// TestReplaceMember: a member whose disk died is replaced without
// downtime: a fresh node joins as a learner, catches up from a snapshot
// (the leader's log was compacted), is promoted to voter, and the dead
// member is removed; proposals succeed between every step, and the group
// ends with the same state on the survivors and the new member.
func TestReplaceMember(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) { cfg.SnapshotEvery, cfg.SnapshotKeep = 10, 2 })
	lead := c.waitLeader(c.ids)
	n := 0
	put := func() {
		t.Helper()
		n++
		if _, err := c.propose(lead, fmt.Sprintf("k%d=%d", n%5, n)); err != nil {
			t.Fatalf("proposal %d: %v", n, err)
		}
	}
	for range 30 {
		put()
	}
	dead := others(c.ids, lead)[0]
	c.crash(dead)
	c.fs[dead] = vfs.NewCrashableMem() // its disk is gone
	put()

	const fresh = 4
	c.fs[fresh] = vfs.NewCrashableMem()
	c.join[fresh] = true
	c.start(fresh)
	members := func(ctx context.Context, ch []*pb.ConfChangeSingle) *pb.ConfState {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		for {
			cs, err := c.nodes[lead].ChangeMembers(ctx, ch, "h:1")
			if errors.Is(err, ErrDropped) {
				continue // a change raft was still applying: try again
			}
			if err != nil {
				t.Fatal(err)
			}
			return cs
		}
	}
	cs := members(context.Background(), change(pb.ConfChangeType_ConfChangeAddLearnerNode, fresh))
	if !slices.Contains(cs.GetLearners(), fresh) {
		t.Fatalf("after adding a learner: %v", cs)
	}
	put()
	c.waitApplied([]uint64{fresh}, c.nodes[lead].Status().Commit)
	if c.sm[fresh].base == 0 {
		t.Fatal("the new member caught up without a snapshot")
	}
	ms, err := c.nodes[lead].Members(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.ID == fresh && (!m.Learner || m.Match == 0) {
			t.Fatalf("the leader's view of the learner: %+v", m)
		}
	}
	cs = members(context.Background(), change(pb.ConfChangeType_ConfChangeAddNode, fresh))
	put()
	cs = members(context.Background(), change(pb.ConfChangeType_ConfChangeRemoveNode, dead))
	put()
	want := []uint64{lead, others(c.ids, lead)[1], fresh}
	slices.Sort(want)
	got := slices.Clone(cs.GetVoters())
	slices.Sort(got)
	if !slices.Equal(got, want) || len(cs.GetLearners()) != 0 {
		t.Fatalf("voters %v learners %v, want voters %v", got, cs.GetLearners(), want)
	}
	c.waitApplied(want, c.nodes[lead].Status().Commit)
	c.checkSame(want)
	for _, id := range want {
		if v := c.nodes[id].Voters(); !slices.Equal(sorted(v), want) {
			t.Fatalf("node %d has voters %v", id, v)
		}
	}
}

func sorted(v []uint64) []uint64 { slices.Sort(v); return v }

// TestAddressesRecorded: the address given with a member's addition is
// recorded by every member, survives a restart, reaches a member that
// joins later through the snapshot it joins with, and goes with the
// member's removal.
func TestAddressesRecorded(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) { cfg.SnapshotEvery, cfg.SnapshotKeep = 10, 2 })
	lead := c.waitLeader(c.ids)
	changeOn := func(typ pb.ConfChangeType, id uint64, addr string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for {
			_, err := c.nodes[lead].ChangeMembers(ctx, change(typ, id), addr)
			if errors.Is(err, ErrDropped) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	c.fs[4] = vfs.NewCrashableMem()
	c.join[4] = true
	c.start(4)
	changeOn(pb.ConfChangeType_ConfChangeAddLearnerNode, 4, "h4:7400")
	changeOn(pb.ConfChangeType_ConfChangeAddNode, 4, "h4:7400")
	for i := range 25 {
		if _, err := c.propose(lead, fmt.Sprintf("k=%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	all := []uint64{1, 2, 3, 4}
	c.waitApplied(all, c.nodes[lead].Status().Commit)
	for _, id := range all {
		c.crash(id)
		c.start(id)
		if got := c.nodes[id].Addresses()[4]; got != "h4:7400" {
			t.Fatalf("node %d after a restart knows node 4 at %q", id, got)
		}
	}
	lead = c.waitLeader(all)
	c.fs[5] = vfs.NewCrashableMem()
	c.join[5] = true
	c.start(5)
	changeOn(pb.ConfChangeType_ConfChangeAddLearnerNode, 5, "h5:7400")
	if _, err := c.propose(lead, "after=1"); err != nil {
		t.Fatal(err)
	}
	c.waitApplied([]uint64{5}, c.nodes[lead].Status().Commit)
	if c.sm[5].base == 0 {
		t.Fatal("node 5 caught up without a snapshot")
	}
	if got := c.nodes[5].Addresses(); got[4] != "h4:7400" || got[5] != "h5:7400" {
		t.Fatalf("node 5 knows %v", got)
	}
	changeOn(pb.ConfChangeType_ConfChangeRemoveNode, 4, "")
	if _, ok := c.nodes[lead].Addresses()[4]; ok {
		t.Fatal("the removed member's address is still recorded")
	}
}

// TestRemoveLeader: the leader removing itself steps down once the change
// is applied; the others elect a leader and go on.
func TestRemoveLeader(t *testing.T) {
	c := newCluster(t, 3, nil)
	lead := c.waitLeader(c.ids)
	if _, err := c.propose(lead, "a=1"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.nodes[lead].ChangeMembers(ctx, change(pb.ConfChangeType_ConfChangeRemoveNode, lead), ""); err != nil {
		t.Fatal(err)
	}
	rest := others(c.ids, lead)
	c.tickUntil("the removed leader steps down", func() bool { return !c.nodes[lead].Status().IsLeader })
	now := c.waitLeader(rest)
	if _, err := c.propose(now, "b=1"); err != nil {
		t.Fatal(err)
	}
	c.waitApplied(rest, c.nodes[now].Status().Commit)
	c.checkSame(rest)
	if v := sorted(c.nodes[now].Voters()); !slices.Equal(v, sorted(slices.Clone(rest))) {
		t.Fatalf("voters %v, want %v", v, rest)
	}
}
