package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/weft-fs/weft/proto"
)

// failingPeers are the other storage servers, all failing their reads.
type failingPeers struct{ proto.StorageService }

func (failingPeers) ReadRow(context.Context, proto.TargetID, proto.ObjectID, uint64, uint64, []byte) (int, proto.RowVersion, error) {
	return 0, proto.RowVersion{}, fmt.Errorf("peer: %w", syscall.EHOSTUNREACH)
}
func (failingPeers) Read(context.Context, proto.TargetID, proto.ObjectID, uint64, []byte) (int, error) {
	return 0, fmt.Errorf("peer: %w", syscall.EHOSTUNREACH)
}
func (failingPeers) WriteRow(context.Context, proto.TargetID, proto.ObjectID, proto.RowWrite) (uint64, error) {
	return 0, syscall.ENOSYS
}
func (failingPeers) Fence(context.Context, proto.TargetID, proto.ObjectID) error {
	return syscall.ENOSYS
}

// TestCopyRowSourceFails: a CopyRow whose source cannot be read is
// EREMOTEIO (the source failed, not the destination shard), EXDEV without
// peers; either way the destination keeps its bytes and version.
func TestCopyRowSourceFails(t *testing.T) {
	s, tg := serveMem(t, nil, 1)
	dst := proto.ObjectID{Ino: 9, Stripe: 1, Gen: 1}
	old := pattern(3, testUnit)
	if _, err := tg.WriteRow(ctx, dst, proto.RowWrite{Unit: testUnit, Data: old, Tag: 5}); err != nil {
		t.Fatal(err)
	}
	rc := proto.RowCopy{SrcTarget: 2, Src: proto.ObjectID{Ino: 8, Gen: 1}, Unit: testUnit, Len: testUnit, Tag: 6}
	if err := s.CopyRow(ctx, 1, dst, rc); !errors.Is(err, syscall.EXDEV) {
		t.Fatalf("source on another server, no peers: %v, want EXDEV", err)
	}
	s.SetPeers(failingPeers{})
	if err := s.CopyRow(ctx, 1, dst, rc); !errors.Is(err, syscall.EREMOTEIO) {
		t.Fatalf("source unreadable: %v, want EREMOTEIO", err)
	}
	if got, v := readRow(t, tg, dst, 0, testUnit); !bytes.Equal(got, old) || v != (proto.RowVersion{Tag: 5}) {
		t.Fatalf("after failed copies: version %+v, bytes equal %v", v, bytes.Equal(got, old))
	}
	// A local source of the expected version is copied, with the new tag.
	src := proto.ObjectID{Ino: 8, Gen: 1}
	data := pattern(4, 1000)
	if _, err := tg.WriteRow(ctx, src, proto.RowWrite{Off: testUnit, Unit: testUnit, Data: data, Tag: 7}); err != nil {
		t.Fatal(err)
	}
	rc = proto.RowCopy{SrcTarget: 1, Src: src, SrcOff: testUnit, Expect: proto.RowVersion{Tag: 7}, Unit: testUnit, Len: testUnit, Tag: 6}
	if err := s.CopyRow(ctx, 1, dst, rc); err != nil {
		t.Fatal(err)
	}
	want := append(bytes.Clone(data), make([]byte, testUnit-len(data))...)
	if got, v := readRow(t, tg, dst, 0, testUnit); !bytes.Equal(got, want) || v != (proto.RowVersion{Tag: 6}) {
		t.Fatalf("copied: version %+v, bytes equal %v", v, bytes.Equal(got, want))
	}
}

// serveMem adds a new in-memory target with id to s (a new server when s
// is nil) and returns both.
func serveMem(t *testing.T, s *Server, id proto.TargetID) (*Server, *Target) {
	t.Helper()
	tg := openMem(t, newMemFS(t), TargetOptions{})
	if err := tg.SetID(id); err != nil {
		t.Fatal(err)
	}
	if s == nil {
		s = NewServer()
	}
	if err := s.Add(tg); err != nil {
		t.Fatal(err)
	}
	return s, tg
}
