package meta

import (
	"errors"
	"fmt"

	"github.com/weft-fs/weft/meta/raftlog"
	"github.com/weft-fs/weft/meta/store"
	pb "go.etcd.io/raft/v3/raftpb"
)

// Snapshots of a replica's store (raftlog.StateMachine's Snapshot and
// Restore): a snapshot is a checkpoint of the store (store.Checkpointer:
// a pebble checkpoint, its tables hard-linked), written into a directory
// that package raftlog seals, describes in the MsgSnap and streams to a
// member that fell behind; Restore replaces the member's store with the
// received checkpoint atomically (store.Pebble.Replace) and reloads what
// the state machine and the server keep in memory from it.

// Defaults of Replica.SnapshotEvery and SnapshotKeep.
const (
	DefaultSnapshotEvery = 10000
	DefaultSnapshotKeep  = 1000
)

var errNoSnapshots = errors.New("meta: this store cannot be checkpointed (a replica needs a pebble store for snapshots)")

// Snapshot implements raftlog.StateMachine: it records index as the
// applied index (entries that are not commands, such as a new leader's
// empty entry, reach the store only here), then checkpoints the store.
// The checkpoint also makes every applied entry durable in the store
// itself (store.Checkpointer: a store without a WAL flushes its memtable
// first), and that is what lets raftlog compact the log up to index
// once this returns: after a crash the store is never behind it.
func (a *raftApplier) Snapshot(index uint64, dir string) error {
	cp, ok := a.sm.st.(store.Checkpointer)
	if !ok {
		return errNoSnapshots
	}
	if a.sm.applied < index {
		if err := a.sm.recordApplied(index, false); err != nil {
			return err
		}
	}
	if err := cp.Checkpoint(dir); err != nil {
		return fmt.Errorf("meta: snapshot at %d: %w", index, err)
	}
	return nil
}

// Restore implements raftlog.StateMachine: the store becomes the
// checkpoint in dir, and the state machine's counters and maps, and the
// server's target registry and inode allocator, are reloaded from it.
func (a *raftApplier) Restore(index uint64, dir string) error {
	cp, ok := a.sm.st.(store.Checkpointer)
	if !ok {
		return errNoSnapshots
	}
	if err := cp.Replace(dir); err != nil {
		return fmt.Errorf("meta: restore snapshot at %d: %w", index, err)
	}
	fresh, err := openStateMachine(cp)
	if err != nil {
		return fmt.Errorf("meta: restore snapshot at %d: %w", index, err)
	}
	if fresh.applied > index {
		return fmt.Errorf("meta: restore snapshot at %d: the checkpoint applied entry %d, beyond it", index, fresh.applied)
	}
	a.sm.replaceWith(fresh)
	if a.sm.applied < index {
		// Synced (without a WAL: flushed), or a crash would leave the
		// store at the checkpoint's own index, below the log's start;
		// raftlog would restore the snapshot again, which is safe but
		// slow.
		if err := a.sm.recordApplied(index, true); err != nil {
			return err
		}
	}
	if a.restored != nil {
		return a.restored()
	}
	return nil
}

// Err reports a store that failed (a checksum, a fatal pebble error):
// the raft node stops rather than apply further entries (raftlog).
func (a *raftApplier) Err() error {
	if f, ok := a.sm.st.(interface{ Err() error }); ok {
		return f.Err()
	}
	return nil
}

// recordApplied records index as the last applied log index.
func (sm *stateMachine) recordApplied(index uint64, sync bool) error {
	b := sm.st.NewBatch()
	defer b.Close()
	b.Set(store.CounterKey(store.CounterApplied), u64(index))
	if err := b.Commit(sync); err != nil {
		return fmt.Errorf("meta: record applied index %d: %w", index, err)
	}
	sm.applied = index
	return nil
}

// restored reloads, after a snapshot replaced the store, what the server
// keeps in memory of it.
func (s *Server) restored() error {
	if err := s.reg.reload(s.st, 0); err != nil {
		return fmt.Errorf("meta: reload target registry: %w", err)
	}
	s.raiseIno(s.sm.nextIno)
	return nil
}

// configure sets up what this file and members.go add to a replica's raft
// node: joining (Replica.Join), membership changes, and snapshots.
func (r *Replica) configure(s *Server, cfg *raftlog.Config) error {
	cfg.Join = r.Join
	tr := r.Transport
	cfg.OnConfChange = func(cc *pb.ConfChangeV2, cs *pb.ConfState) { s.onConfChange(tr, cc, cs) }
	cfg.OnAddresses = func(addrs map[uint64]string) { s.onAddresses(tr, addrs) }
	if p, ok := tr.(interface{ Peers() map[uint64]string }); ok {
		s.members.mu.Lock()
		s.members.addrs = p.Peers()
		s.members.mu.Unlock()
	}
	return r.snapshotConfig(s.st, cfg)
}

// snapshotConfig sets up the snapshots of a replica on store st: their
// directory (Replica.SnapshotDir, default the store's directory with
// ".snapshots" appended) on the store's file system, and how often they
// are taken. A store that cannot be checkpointed takes none.
func (r *Replica) snapshotConfig(st store.Store, cfg *raftlog.Config) error {
	cp, ok := st.(store.Checkpointer)
	if !ok {
		return nil
	}
	dir := r.SnapshotDir
	if dir == "" {
		dir = cp.Dir() + ".snapshots"
	}
	snaps, err := raftlog.OpenSnapshots(cp.FS(), dir)
	if err != nil {
		return fmt.Errorf("meta: %w", err)
	}
	cfg.Snapshots = snaps
	cfg.SnapshotEvery, cfg.SnapshotKeep = r.SnapshotEvery, r.SnapshotKeep
	if cfg.SnapshotEvery == 0 {
		cfg.SnapshotEvery = DefaultSnapshotEvery
	}
	if cfg.SnapshotKeep == 0 {
		cfg.SnapshotKeep = DefaultSnapshotKeep
	}
	return nil
}
