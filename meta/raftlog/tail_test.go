package raftlog

import (
	"fmt"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"
)

// TestStorageTail checks the in-memory tail of the log (Storage.tail)
// against pebble: after random appends (some overwriting a suffix, as a
// new leader does), compactions and snapshots received from a leader,
// Entries for any range and size limit returns exactly what a read of
// pebble returns, and both match a model of the log.
func TestStorageTail(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		fs := vfs.NewMem()
		s, err := OpenStorage("log", StorageOptions{FS: fs})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { s.Close() }()
		var (
			model     []*pb.Entry // entries off+1 .. off+len(model)
			off, term uint64      = 0, 1
			snapIdx   uint64
		)
		last := func() uint64 { return off + uint64(len(model)) }
		for step := range rapid.IntRange(1, 60).Draw(t, "steps") {
			switch rapid.IntRange(0, 9).Draw(t, "op") {
			case 0, 1, 2, 3, 4, 5: // append, possibly overwriting a suffix
				from := last() + 1
				if last() > off && rapid.Bool().Draw(t, "overwrite") {
					from = rapid.Uint64Range(off+1, last()).Draw(t, "from")
					term++
				}
				n := rapid.IntRange(1, 40).Draw(t, "n")
				var ents []*pb.Entry
				for i := range uint64(n) {
					data := rapid.SliceOfN(rapid.Byte(), 0, 3000).Draw(t, "data")
					ents = append(ents, &pb.Entry{Index: new(from + i), Term: new(term), Data: data})
				}
				if err := s.Save(nil, ents, nil, false); err != nil {
					t.Fatal(err)
				}
				model = append(model[:from-off-1], ents...)
			case 6, 7: // a snapshot of our own, compacting the log
				if last() <= snapIdx {
					continue
				}
				at := rapid.Uint64Range(max(snapIdx, off)+1, last()).Draw(t, "snapshot")
				keep := rapid.Uint64Range(0, 50).Draw(t, "keep")
				if err := s.CreateSnapshot(at, &pb.ConfState{Voters: []uint64{1}}, nil, keep); err != nil {
					t.Fatal(err)
				}
				snapIdx = at
				if at > keep && at-keep > off {
					model = model[at-keep-off:]
					off = at - keep
				}
			case 8: // a snapshot from a leader replaces the log
				at := last() + rapid.Uint64Range(1, 100).Draw(t, "ahead")
				term++
				snap := &pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: new(at), Term: new(term), ConfState: &pb.ConfState{Voters: []uint64{1}}}}
				if err := s.Save(nil, nil, snap, false); err != nil {
					t.Fatal(err)
				}
				model, off, snapIdx = nil, at, at
			case 9: // reopen: the tail starts empty, pebble serves
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				if s, err = OpenStorage("log", StorageOptions{FS: fs}); err != nil {
					t.Fatal(err)
				}
			}
			if l, _ := s.LastIndex(); l != last() {
				t.Fatalf("step %d: last index %d, want %d", step, l, last())
			}
			if len(model) == 0 {
				continue
			}
			for range 5 {
				lo := rapid.Uint64Range(off+1, last()).Draw(t, "lo")
				hi := rapid.Uint64Range(lo+1, last()+1).Draw(t, "hi")
				maxSize := rapid.Uint64Range(0, 40000).Draw(t, "maxSize")
				got, err := s.Entries(lo, hi, maxSize)
				if err != nil {
					t.Fatalf("step %d: entries [%d, %d): %v", step, lo, hi, err)
				}
				want, err := s.fromPebble(lo, hi, maxSize)
				if err != nil {
					t.Fatalf("step %d: pebble [%d, %d): %v", step, lo, hi, err)
				}
				if !slices.EqualFunc(got, want, func(a, b *pb.Entry) bool { return proto.Equal(a, b) }) {
					t.Fatalf("step %d: entries [%d, %d) max %d: tail gave %s, pebble %s", step, lo, hi, maxSize, span(got), span(want))
				}
				for i, e := range got {
					if !proto.Equal(e, model[lo-off-1+uint64(i)]) {
						t.Fatalf("step %d: entry %d is not the one saved last", step, e.GetIndex())
					}
				}
			}
		}
	})
}

func span(es []*pb.Entry) string {
	if len(es) == 0 {
		return "none"
	}
	return fmt.Sprintf("%d entries %d..%d", len(es), es[0].GetIndex(), es[len(es)-1].GetIndex())
}
