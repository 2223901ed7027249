package raftlog

import (
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

func ent(index, term uint64, data string) *pb.Entry {
	return &pb.Entry{Index: new(index), Term: new(term), Type: pb.EntryType_EntryNormal.Enum(), Data: []byte(data)}
}

// span returns "first..last" and the terms of the log, reading through
// raft.Storage only.
func checkLog(t *testing.T, s *Storage, first, last uint64, terms ...uint64) {
	t.Helper()
	f, _ := s.FirstIndex()
	l, _ := s.LastIndex()
	if f != first || l != last {
		t.Fatalf("log holds [%d, %d], want [%d, %d]", f, l, first, last)
	}
	for i := first; i <= last; i++ {
		term, err := s.Term(i)
		if err != nil || term != terms[i-first] {
			t.Fatalf("term of %d: %d, %v; want %d", i, term, err, terms[i-first])
		}
	}
	if last >= first {
		es, err := s.Entries(first, last+1, 1<<30)
		if err != nil || uint64(len(es)) != last-first+1 {
			t.Fatalf("entries [%d, %d]: %d, %v", first, last, len(es), err)
		}
		for i, e := range es {
			if e.GetIndex() != first+uint64(i) || e.GetTerm() != terms[i] {
				t.Fatalf("entry %d is %d/%d", first+uint64(i), e.GetIndex(), e.GetTerm())
			}
		}
	}
}

// TestStorage: appends, a conflicting shorter tail that replaces a longer
// one, the HardState, snapshots with compaction, a snapshot received from
// a leader; everything as raft.Storage reports it and after a reopen.
func TestStorage(t *testing.T) {
	fs := vfs.NewMem()
	open := func() *Storage {
		s, err := OpenStorage("log", StorageOptions{FS: fs})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open()
	checkLog(t, s, 1, 0)
	if _, err := s.Term(1); !errors.Is(err, raft.ErrUnavailable) {
		t.Fatalf("term beyond the log: %v", err)
	}
	hs := &pb.HardState{Term: new(uint64(2)), Vote: new(uint64(1)), Commit: new(uint64(3))}
	if err := s.Save(hs, []*pb.Entry{ent(1, 1, "a"), ent(2, 1, "b"), ent(3, 2, "c"), ent(4, 2, "d"), ent(5, 2, "e")}, nil, true); err != nil {
		t.Fatal(err)
	}
	checkLog(t, s, 1, 5, 1, 1, 2, 2, 2)
	// A new leader overwrites the uncommitted tail with a shorter one.
	if err := s.Save(nil, []*pb.Entry{ent(4, 3, "D")}, nil, true); err != nil {
		t.Fatal(err)
	}
	checkLog(t, s, 1, 4, 1, 1, 2, 3)
	// maxSize limits, but at least one entry comes back.
	if es, err := s.Entries(1, 5, 1); err != nil || len(es) != 1 {
		t.Fatalf("entries with a tiny maxSize: %d, %v", len(es), err)
	}
	if err := s.Save(nil, []*pb.Entry{ent(9, 3, "gap")}, nil, true); err == nil {
		t.Fatal("an append leaving a hole was accepted")
	}
	s.Close()

	s = open()
	checkLog(t, s, 1, 4, 1, 1, 2, 3)
	got, cs, _ := s.InitialState()
	if got.GetTerm() != 2 || got.GetVote() != 1 || got.GetCommit() != 3 || len(cs.GetVoters()) != 0 {
		t.Fatalf("hard state after reopen: %v %v", got, cs)
	}
	es, _ := s.Entries(4, 5, 1<<20)
	if string(es[0].GetData()) != "D" {
		t.Fatalf("entry 4 after reopen: %q", es[0].GetData())
	}

	// A snapshot at 3 keeping 1 entry: the log starts at 3, entry 2 is
	// its offset (term still known), entry 1 is compacted.
	conf := &pb.ConfState{Voters: []uint64{1, 2, 3}}
	if err := s.CreateSnapshot(3, conf, []byte("state@3"), 1); err != nil {
		t.Fatal(err)
	}
	checkLog(t, s, 3, 4, 2, 3)
	if term, err := s.Term(2); err != nil || term != 1 {
		t.Fatalf("term of the offset: %d, %v", term, err)
	}
	if _, err := s.Entries(2, 4, 1<<20); !errors.Is(err, raft.ErrCompacted) {
		t.Fatalf("entries before the offset: %v", err)
	}
	if err := s.CreateSnapshot(3, conf, nil, 0); !errors.Is(err, raft.ErrSnapOutOfDate) {
		t.Fatalf("an old snapshot: %v", err)
	}
	s.Close()

	s = open()
	checkLog(t, s, 3, 4, 2, 3)
	snap, _ := s.Snapshot()
	if snap.GetMetadata().GetIndex() != 3 || snap.GetMetadata().GetTerm() != 2 || string(snap.GetData()) != "state@3" ||
		len(snap.GetMetadata().GetConfState().GetVoters()) != 3 {
		t.Fatalf("snapshot after reopen: %v", snap)
	}

	// A snapshot from the leader replaces the whole log.
	recv := &pb.Snapshot{Data: []byte("state@10"), Metadata: &pb.SnapshotMetadata{Index: new(uint64(10)), Term: new(uint64(4)), ConfState: conf}}
	if err := s.Save(&pb.HardState{Term: new(uint64(4)), Commit: new(uint64(10))}, nil, recv, true); err != nil {
		t.Fatal(err)
	}
	checkLog(t, s, 11, 10)
	if err := s.Save(nil, []*pb.Entry{ent(11, 4, "after")}, nil, true); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = open()
	defer s.Close()
	checkLog(t, s, 11, 11, 4)
	if term, _ := s.Term(10); term != 4 {
		t.Fatalf("term of the received snapshot's index: %d", term)
	}
}
