package raftlog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"

	"github.com/weft-fs/weft/wire"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Snapshot streaming. raft hands the transport a MsgSnap whose
// Snapshot.Data is a descriptor (SnapshotDesc), not the state; the
// transport sends the files it names in chunks of at most ChunkSize bytes
// (OpSnapChunk, one call each, in order), then the MsgSnap itself
// (OpSnapDone). The receiver writes the chunks into a staging directory,
// and on OpSnapDone checks every file's size and SHA-256 against the
// descriptor, seals the snapshot and only then steps the MsgSnap into its
// node; a failed check fails the call, and the sender reports
// SnapshotFailure to raft (which sends a snapshot again later), success
// SnapshotFinish.
const (
	// OpSnapChunk: version(1) to(8) from(8) desc(bytes) file(4)
	// offset(8) data(bytes).
	OpSnapChunk uint16 = 61
	// OpSnapDone: version(1) to(8) message(bytes: the raftpb.Message
	// MsgSnap).
	OpSnapDone uint16 = 62

	snapVersion = 1
	// ChunkSize bounds the file bytes of one OpSnapChunk call.
	ChunkSize = 1 << 20
	// maxDesc bounds an encoded descriptor.
	maxDesc = 8 << 20
)

// snapCall sends one snapshot operation to the receiving node.
type snapCall func(ctx context.Context, op uint16, body []byte) error

// streamSnapshot sends the files of m's snapshot from snaps, chunk bytes
// at a time, and then m, through call.
func streamSnapshot(ctx context.Context, snaps *Snapshots, m *pb.Message, chunk int, call snapCall) error {
	if snaps == nil {
		return errors.New("raftlog: no snapshot directory to send from")
	}
	raw := m.GetSnapshot().GetData()
	desc, err := DecodeSnapshotDesc(raw)
	if err != nil {
		return err
	}
	buf := make([]byte, chunk)
	for i, f := range desc.Files {
		if err := sendFile(ctx, snaps, desc, raw, i, f.Size, m, buf, call); err != nil {
			return err
		}
	}
	msg, err := proto.Marshal(m)
	if err != nil {
		return fmt.Errorf("raftlog: encode snapshot message: %w", err)
	}
	e := wire.NewEncoder(16 + len(msg))
	e.U8(snapVersion)
	e.U64(m.GetTo())
	e.Bytes(msg)
	return call(ctx, OpSnapDone, e.B)
}

func sendFile(ctx context.Context, snaps *Snapshots, desc *SnapshotDesc, raw []byte, i int, size uint64, m *pb.Message, buf []byte, call snapCall) error {
	f, err := snaps.openFile(desc, i)
	if err != nil {
		return err
	}
	defer f.Close()
	var off uint64
	for first := true; first || off < size; first = false {
		n, err := io.ReadFull(f, buf)
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
			return fmt.Errorf("raftlog: read snapshot file %s: %w", desc.Files[i].Name, err)
		}
		if n == 0 && off < size {
			return fmt.Errorf("raftlog: snapshot file %s shorter than its %d bytes", desc.Files[i].Name, size)
		}
		e := wire.NewEncoder(64 + len(raw) + n)
		e.U8(snapVersion)
		e.U64(m.GetTo())
		e.U64(m.GetFrom())
		e.Bytes(raw)
		e.U32(uint32(i))
		e.U64(off)
		e.Bytes(buf[:n])
		if err := call(ctx, OpSnapChunk, e.B); err != nil {
			return err
		}
		off += uint64(n)
	}
	return nil
}

// handleSnapshot serves OpSnapChunk and OpSnapDone for node n (whose id
// is self); member tells which node ids may send.
func handleSnapshot(ctx context.Context, n *Node, self uint64, member func(uint64) bool, op uint16, body []byte) error {
	m, err := receiveSnapshotOp(n.cfg.Snapshots, self, member, op, body)
	if err != nil {
		if op == OpSnapDone {
			n.log.Error("raftlog: received snapshot refused", "id", self, "err", err)
		}
		return err
	}
	if m == nil {
		return nil
	}
	return n.stepWait(ctx, m)
}

// receiveSnapshotOp does the snapshot directory's part of one operation:
// it stores a chunk, or checks and seals the snapshot of an OpSnapDone and
// returns its MsgSnap.
func receiveSnapshotOp(snaps *Snapshots, self uint64, member func(uint64) bool, op uint16, body []byte) (*pb.Message, error) {
	if snaps == nil {
		return nil, fmt.Errorf("raftlog: node %d keeps no snapshots: %w", self, syscall.ENOSYS)
	}
	d := wire.NewDecoder(body)
	if v := d.U8(); v != snapVersion && d.Err() == nil {
		return nil, fmt.Errorf("raftlog: snapshot operation of version %d, want %d: %w", v, snapVersion, syscall.EPROTO)
	}
	to := d.U64()
	if d.Err() == nil && to != self {
		return nil, fmt.Errorf("raftlog: snapshot for node %d reached node %d: %w", to, self, syscall.EINVAL)
	}
	switch op {
	case OpSnapChunk:
		from := d.U64()
		raw := d.BytesMax(maxDesc)
		file := d.U32()
		off := d.U64()
		data := d.BytesMax(ChunkSize)
		if err := d.Done(); err != nil {
			return nil, fmt.Errorf("raftlog: snapshot chunk: %v: %w", err, syscall.EINVAL)
		}
		if !member(from) {
			return nil, fmt.Errorf("raftlog: snapshot chunk from %d, not a member of node %d's group: %w", from, self, syscall.EINVAL)
		}
		return nil, snaps.receive(raw, int(file), off, data)
	case OpSnapDone:
		b := d.BytesMax(maxDesc + 64<<10)
		if err := d.Done(); err != nil {
			return nil, fmt.Errorf("raftlog: snapshot message: %v: %w", err, syscall.EINVAL)
		}
		m := &pb.Message{}
		if err := proto.Unmarshal(b, m); err != nil {
			return nil, fmt.Errorf("raftlog: snapshot message: %v: %w", err, syscall.EINVAL)
		}
		if m.GetType() != pb.MessageType_MsgSnap || m.GetTo() != self || !member(m.GetFrom()) {
			return nil, fmt.Errorf("raftlog: snapshot message %v from %d to %d refused: %w", m.GetType(), m.GetFrom(), m.GetTo(), syscall.EINVAL)
		}
		desc, err := snaps.finish(m.GetSnapshot().GetData())
		if err != nil {
			return nil, err
		}
		if desc.Index != m.GetSnapshot().GetMetadata().GetIndex() {
			return nil, fmt.Errorf("raftlog: snapshot of index %d described as index %d: %w", m.GetSnapshot().GetMetadata().GetIndex(), desc.Index, syscall.EINVAL)
		}
		return m, nil
	}
	return nil, fmt.Errorf("raftlog: unknown op %d: %w", op, syscall.ENOSYS)
}
