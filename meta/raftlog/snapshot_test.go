package raftlog

import (
	"bytes"
	"context"
	"errors"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/weft-fs/weft/wire"
	pb "go.etcd.io/raft/v3/raftpb"
)

// sealTestSnapshot writes files of the given sizes into a new snapshot of
// s and seals it at index 7.
func sealTestSnapshot(t *testing.T, s *Snapshots, sizes ...int) *SnapshotDesc {
	t.Helper()
	tmp := s.tempDir()
	if err := s.fs.MkdirAll(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, n := range sizes {
		f, err := s.fs.Create(s.fs.PathJoin(tmp, string(rune('a'+i))), vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, n)
		for j := range b {
			b[j] = byte(i*31 + j)
		}
		f.Write(b)
		f.Close()
	}
	d, err := s.seal(tmp, 7, 2, map[uint64]string{4: "h4:7400"})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestSnapshotStream: a snapshot streamed in small chunks arrives whole
// (empty files and files of several chunks); a chunk damaged on the way
// makes the receiver refuse it at OpSnapDone, with nothing installed and
// no MsgSnap handed on, and the next clean attempt installs it.
func TestSnapshotStream(t *testing.T) {
	src, err := OpenSnapshots(vfs.NewMem(), "snap")
	if err != nil {
		t.Fatal(err)
	}
	d := sealTestSnapshot(t, src, 0, 100, 3000, 1)
	dst, err := OpenSnapshots(vfs.NewMem(), "snap")
	if err != nil {
		t.Fatal(err)
	}
	m := &pb.Message{Type: pb.MessageType_MsgSnap.Enum(), From: new(uint64(1)), To: new(uint64(2)),
		Snapshot: &pb.Snapshot{Data: d.Encode(), Metadata: &pb.SnapshotMetadata{Index: new(uint64(7)), Term: new(uint64(2))}}}
	member := func(id uint64) bool { return id == 1 }
	send := func(damage bool) (*pb.Message, error) {
		var got *pb.Message
		chunks := 0
		err := streamSnapshot(context.Background(), src, m, 64, func(_ context.Context, op uint16, body []byte) error {
			body = bytes.Clone(body)
			if op == OpSnapChunk {
				chunks++
				if damage && chunks == 20 {
					body[len(body)-1] ^= 1
				}
			}
			r, err := receiveSnapshotOp(dst, 2, member, op, body)
			got = r
			return err
		})
		return got, err
	}
	if got, err := send(true); !errors.Is(err, syscall.EIO) || got != nil {
		t.Fatalf("damaged snapshot: %v, %v; want EIO and no message", got, err)
	}
	if dst.Has(d) {
		t.Fatal("a damaged snapshot was installed")
	}
	got, err := send(false)
	if err != nil || got == nil || got.GetSnapshot().GetMetadata().GetIndex() != 7 {
		t.Fatalf("clean snapshot: %v, %v", got, err)
	}
	if !dst.Has(d) {
		t.Fatal("the snapshot was not installed")
	}
	for i, f := range d.Files {
		size, sum, err := dst.hashFile(dst.fs.PathJoin(dst.Path(d), f.Name), false)
		if err != nil || size != f.Size || sum != f.Sum {
			t.Fatalf("file %d: %d bytes, %v", i, size, err)
		}
	}
	// Only leftover-free directories: no recv- staging remains.
	names, _ := dst.fs.List("snap")
	if len(names) != 1 {
		t.Fatalf("snapshot directory holds %v", names)
	}
}

// TestSnapshotRefusals: chunks out of order, beyond a file's size, from a
// non-member, or a descriptor naming a path are refused.
func TestSnapshotRefusals(t *testing.T) {
	src, _ := OpenSnapshots(vfs.NewMem(), "snap")
	d := sealTestSnapshot(t, src, 10)
	dst, _ := OpenSnapshots(vfs.NewMem(), "snap")
	chunk := func(from uint64, desc []byte, file uint32, off uint64, data []byte) error {
		e := wire.NewEncoder(64)
		e.U8(snapVersion)
		e.U64(2)
		e.U64(from)
		e.Bytes(desc)
		e.U32(file)
		e.U64(off)
		e.Bytes(data)
		_, err := receiveSnapshotOp(dst, 2, func(id uint64) bool { return id == 1 }, OpSnapChunk, e.B)
		return err
	}
	raw := d.Encode()
	for name, err := range map[string]error{
		"not a member":  chunk(9, raw, 0, 0, []byte("x")),
		"not begun":     chunk(1, raw, 0, 5, []byte("x")),
		"beyond size":   chunk(1, raw, 0, 0, make([]byte, 11)),
		"no such file":  chunk(1, raw, 3, 0, []byte("x")),
		"path in names": chunk(1, (&SnapshotDesc{Index: 1, Files: []SnapshotFile{{Name: "../x", Size: 1}}}).Encode(), 0, 0, []byte("x")),
	} {
		if !errors.Is(err, syscall.EINVAL) {
			t.Errorf("%s: %v, want EINVAL", name, err)
		}
	}
	if err := chunk(1, raw, 0, 0, []byte("01234")); err != nil {
		t.Fatal(err)
	}
	if err := chunk(1, raw, 0, 3, []byte("x")); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("overlapping chunk: %v, want EINVAL", err)
	}
}

// FuzzDecodeSnapshotDesc: a descriptor from the network never panics the
// decoder, never names a path, and what decodes re-encodes to what decodes
// the same.
func FuzzDecodeSnapshotDesc(f *testing.F) {
	f.Add((&SnapshotDesc{Index: 3, Term: 1, Files: []SnapshotFile{{Name: "a", Size: 5}}, Addrs: map[uint64]string{2: "h:1"}}).Encode())
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := DecodeSnapshotDesc(b)
		if err != nil {
			return
		}
		for _, file := range d.Files {
			if !validName(file.Name) {
				t.Fatalf("decoded a file name %q", file.Name)
			}
		}
		d2, err := DecodeSnapshotDesc(d.Encode())
		if err != nil || d2.ID() != d.ID() {
			t.Fatalf("re-encoded descriptor: %v", err)
		}
	})
}
