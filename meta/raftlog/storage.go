package raftlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/weft-fs/weft/internal/walprefill"
	"github.com/weft-fs/weft/wire"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Keys of the log store. The log has a pebble instance of its own (not the
// state machine's), so its fsyncs and compactions are its own.
//
//	e <index:8>   a log entry (raftpb.Entry)
//	h             the HardState (term, vote, commit)
//	s             the latest snapshot (raftpb.Snapshot: metadata and data)
//	o <index:8> <term:8>
//	              the log's offset: the last entry dropped (at or below the
//	              snapshot's index); the log holds (offset, last index]
//	c             the ConfState of the last applied configuration change
//	a             the members' addresses as of c: version(1) count(4), then
//	              id(8) address(bytes) each
const (
	prefixEntry  = 'e'
	keyHard      = "h"
	keySnap      = "s"
	keyConf      = "c"
	keyOffset    = "o"
	keyAddrs     = "a"
	addrsVersion = 1
)

func entryKey(i uint64) []byte {
	return binary.BigEndian.AppendUint64(append(make([]byte, 0, 1+8), prefixEntry), i)
}

// Storage is raft's log storage on pebble: it implements raft.Storage for
// the RawNode and keeps what the Ready loop persists. Save writes the
// HardState, a snapshot and new entries in one batch, synced when raft says
// it must be, so an entry is on disk before any message acknowledging it
// is sent. Storage is safe for concurrent use (raft calls it from the node
// goroutine; status readers may call LastIndex).
type Storage struct {
	db  *pebble.DB
	log *slog.Logger

	mu sync.Mutex
	hs *pb.HardState
	cs *pb.ConfState
	// snap is the latest snapshot.
	snap *pb.Snapshot
	// off and offTerm name the last entry dropped from the log: entries
	// (off, last] are kept. off <= the snapshot's index.
	off, offTerm uint64
	// terms[i] is the term of entry offset+1+i: Term is called for every
	// append a follower receives, and must not cost a read.
	terms []uint64
	// tail holds the newest entries saved, at most tailMax of them and
	// tailMaxBytes (by their encoded size, tailSizes): raft reads back the
	// entries it just wrote, to send them to followers and to apply the
	// committed ones, and reading them from memory costs no pebble
	// iterator and no decode. Invariant: the tail ends at the log's last
	// index (it is entries last-len(tail)+1 .. last), and each entry in it
	// is the one pebble holds at its index. Entries are shared with raft
	// and the state machine, which never modify them.
	tail      []*pb.Entry
	tailSizes []int
	tailBytes int
	// failed: corruption was found; every later write fails with it.
	failed error
	addrs  map[uint64]string
}

// The bounds of Storage.tail: a leader sends followers entries a little
// behind its last index, and applies entries at most a Ready or two
// behind it; a follower that fell further behind is caught up from
// pebble.
const (
	tailMax      = 4096
	tailMaxBytes = 16 << 20
)

// StorageOptions tune OpenStorage. The zero value is fine.
type StorageOptions struct {
	// FS is the file system the log lives on (nil: the OS's); tests pass
	// vfs.NewCrashableMem to check what survives a crash.
	FS     vfs.FS
	Logger *slog.Logger
}

// ErrCorrupt is wrapped by every error about a log that failed a
// checksum or does not decode: the member must not serve from it.
var ErrCorrupt = errors.New("raftlog: the raft log is corrupt")

// RecoverHint is what an error about a corrupt log tells the admin.
const RecoverHint = "wipe this member's data (log, store and snapshots) and re-sync it from the others: " +
	"weft admin meta remove ID, start it empty in join mode, weft admin meta add ID ADDR (docs/deployment.md)"

// OpenStorage opens (or creates) the log in dir. As the metadata store
// does (store.OpenPebble), it refuses, with an error wrapping ErrCorrupt,
// a log whose WAL has a damaged record followed by synced ones (the log is
// kept at pebble.FormatNewest, whose WAL chunks carry the synced offset),
// a table that fails its checksums (every table is read through at open),
// and entries that do not decode or leave a hole. Corruption found later
// fails every call with ErrCorrupt (the node then stops), never a panic.
func OpenStorage(dir string, o StorageOptions) (*Storage, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Storage{log: o.Logger, hs: &pb.HardState{}, cs: &pb.ConfState{}, snap: pb.EnsureSnapshot(nil)}
	opts := &pebble.Options{
		Logger: pebbleLogger{o.Logger}, FormatMajorVersion: pebble.FormatNewest,
		EventListener: &pebble.EventListener{
			BackgroundError: func(err error) {
				o.Logger.Error("raftlog: pebble background error", "dir", dir, "err", err)
			},
			DataCorruption: func(info pebble.DataCorruptionInfo) {
				s.fail(fmt.Errorf("%w: %s: %v", ErrCorrupt, info.Path, info.Details))
			},
		},
	}
	// An explicit FS: pebble wraps a nil one in a disk-health checker
	// whose goroutine outlives an Open that fails (as the store does).
	opts.FS = vfs.Default
	if o.FS != nil {
		opts.FS = o.FS
	}
	// Every append with entries is synced: new logs written full before
	// use sync as cheaply as recycled ones (package walprefill).
	walprefill.Prefill(opts)
	db, err := pebble.Open(dir, opts)
	if pebble.IsCorruptionError(err) {
		return nil, fmt.Errorf("raftlog: open log in %s: %w: %w (%s)", dir, ErrCorrupt, err, RecoverHint)
	}
	if err != nil {
		return nil, fmt.Errorf("raftlog: open log in %s: %w", dir, err)
	}
	s.db = db
	// The WAL Open created predates the format version: rotate to one
	// with sync offsets (the memtable is empty after replay).
	if err := db.Flush(); err != nil {
		db.Close()
		return nil, fmt.Errorf("raftlog: open log in %s: rotate WAL: %w", dir, err)
	}
	var stats pebble.CheckLevelsStats
	if err := db.CheckLevels(&stats); err != nil {
		db.Close()
		return nil, fmt.Errorf("raftlog: open log in %s: consistency check: %w: %w (%s)", dir, ErrCorrupt, err, RecoverHint)
	}
	if err := s.load(); err != nil {
		db.Close()
		return nil, fmt.Errorf("%w (%s)", err, RecoverHint)
	}
	if err := s.Err(); err != nil {
		db.Close()
		return nil, fmt.Errorf("raftlog: open log in %s: %w (%s)", dir, err, RecoverHint)
	}
	return s, nil
}

// fail records that the log can no longer be trusted.
func (s *Storage) fail(err error) {
	s.log.Error("raftlog: the log is damaged; refusing further use", "err", err)
	s.mu.Lock()
	if s.failed == nil {
		s.failed = err
	}
	s.mu.Unlock()
}

// Err returns the corruption found since the log was opened, if any.
func (s *Storage) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed
}

// checkCorrupt fails the log if err is pebble's corruption error.
func (s *Storage) checkCorrupt(err error) error {
	if pebble.IsCorruptionError(err) {
		s.fail(fmt.Errorf("%w: %w", ErrCorrupt, err))
	}
	return err
}

func (s *Storage) load() error {
	if err := s.getProto([]byte(keyHard), s.hs); err != nil {
		return err
	}
	if err := s.getProto([]byte(keyConf), s.cs); err != nil {
		return err
	}
	if err := s.getProto([]byte(keySnap), s.snap); err != nil {
		return err
	}
	s.snap = pb.EnsureSnapshot(s.snap)
	s.addrs = map[uint64]string{}
	if v, closer, err := s.db.Get([]byte(keyAddrs)); err == nil {
		d := wire.NewDecoder(v)
		if ver := d.U8(); ver != addrsVersion && d.Err() == nil {
			closer.Close()
			return fmt.Errorf("raftlog: addresses of version %d, want %d: %w", ver, addrsVersion, ErrCorrupt)
		}
		s.addrs = decodeAddrs(d)
		err := d.Done()
		closer.Close()
		if err != nil {
			return fmt.Errorf("raftlog: addresses: %w: %w", ErrCorrupt, err)
		}
	} else if !errors.Is(err, pebble.ErrNotFound) {
		return fmt.Errorf("raftlog: read addresses: %w", err)
	}
	v, closer, err := s.db.Get([]byte(keyOffset))
	switch {
	case errors.Is(err, pebble.ErrNotFound):
	case err != nil:
		return fmt.Errorf("raftlog: read offset: %w", err)
	case len(v) != 16:
		closer.Close()
		return fmt.Errorf("raftlog: offset record of %d bytes", len(v))
	default:
		s.off, s.offTerm = binary.BigEndian.Uint64(v), binary.BigEndian.Uint64(v[8:])
		closer.Close()
	}
	next := s.offset() + 1
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: entryKey(next), UpperBound: []byte{prefixEntry + 1}})
	if err != nil {
		return fmt.Errorf("raftlog: load: %w", err)
	}
	defer it.Close()
	for valid := it.First(); valid; valid = it.Next() {
		e := &pb.Entry{}
		if err := proto.Unmarshal(it.Value(), e); err != nil {
			return fmt.Errorf("raftlog: entry %x: %w: %w", it.Key(), ErrCorrupt, err)
		}
		if e.GetIndex() != next {
			return fmt.Errorf("raftlog: log has a hole: entry %d where %d was expected: %w", e.GetIndex(), next, ErrCorrupt)
		}
		s.terms = append(s.terms, e.GetTerm())
		next++
	}
	return it.Error()
}

func (s *Storage) getProto(key []byte, m proto.Message) error {
	v, closer, err := s.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("raftlog: read %q: %w", key, err)
	}
	defer closer.Close()
	if err := proto.Unmarshal(v, m); err != nil {
		return fmt.Errorf("raftlog: decode %q: %w: %w", key, ErrCorrupt, err)
	}
	return nil
}

// Close closes the log.
func (s *Storage) Close() error {
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("raftlog: close: %w", err)
	}
	return nil
}

func (s *Storage) offset() uint64 { return s.off }
func (s *Storage) last() uint64   { return s.offset() + uint64(len(s.terms)) }

// InitialState implements raft.Storage.
func (s *Storage) InitialState() (*pb.HardState, *pb.ConfState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return proto.Clone(s.hs).(*pb.HardState), proto.Clone(s.cs).(*pb.ConfState), nil
}

// Entries implements raft.Storage.
func (s *Storage) Entries(lo, hi, maxSize uint64) ([]*pb.Entry, error) {
	s.mu.Lock()
	off, last := s.offset(), s.last()
	s.mu.Unlock()
	if lo <= off {
		return nil, raft.ErrCompacted
	}
	if hi > last+1 {
		return nil, fmt.Errorf("raftlog: entries [%d, %d) beyond the last index %d: %w", lo, hi, last, raft.ErrUnavailable)
	}
	if lo >= hi {
		return nil, nil
	}
	if out := s.fromTail(lo, hi, maxSize); out != nil {
		return out, nil
	}
	return s.fromPebble(lo, hi, maxSize)
}

// fromPebble reads entries [lo, hi) from pebble, as Entries returns them.
func (s *Storage) fromPebble(lo, hi, maxSize uint64) ([]*pb.Entry, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: entryKey(lo), UpperBound: entryKey(hi)})
	if err != nil {
		return nil, fmt.Errorf("raftlog: entries: %w", err)
	}
	defer it.Close()
	var out []*pb.Entry
	var size uint64
	for valid := it.First(); valid; valid = it.Next() {
		v := it.Value()
		if len(out) > 0 && size+uint64(len(v)) > maxSize {
			break
		}
		e := &pb.Entry{}
		if err := proto.Unmarshal(v, e); err != nil {
			s.fail(fmt.Errorf("raftlog: entry %x: %w: %w", it.Key(), ErrCorrupt, err))
			return nil, s.Err()
		}
		if want := lo + uint64(len(out)); e.GetIndex() != want {
			return nil, fmt.Errorf("raftlog: entry %d where %d was expected: %w", e.GetIndex(), want, raft.ErrUnavailable)
		}
		size += uint64(len(v))
		out = append(out, e)
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("raftlog: entries: %w", s.checkCorrupt(err))
	}
	if len(out) == 0 {
		// Compacted concurrently (the node goroutine is the only writer,
		// so this means the store lost entries it said it had).
		return nil, fmt.Errorf("raftlog: entries [%d, %d) missing: %w", lo, hi, raft.ErrUnavailable)
	}
	return out, nil
}

// fromTail returns entries [lo, hi), limited to maxSize bytes as raft
// limits them (at least one entry), if the tail holds lo; nil otherwise.
func (s *Storage) fromTail(lo, hi, maxSize uint64) []*pb.Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	first := s.last() + 1 - uint64(len(s.tail))
	if len(s.tail) == 0 || lo < first || lo <= s.offset() || hi > s.last()+1 {
		return nil
	}
	var size uint64
	k := lo - first
	end := k
	for ; end < hi-first; end++ {
		if end > k && size+uint64(s.tailSizes[end]) > maxSize {
			break
		}
		size += uint64(s.tailSizes[end])
	}
	return append([]*pb.Entry(nil), s.tail[k:end]...)
}

// Term implements raft.Storage.
func (s *Storage) Term(i uint64) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	off := s.offset()
	switch {
	case i < off:
		return 0, raft.ErrCompacted
	case i == off:
		return s.offTerm, nil
	case i > s.last():
		return 0, raft.ErrUnavailable
	}
	return s.terms[i-off-1], nil
}

// LastIndex implements raft.Storage.
func (s *Storage) LastIndex() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last(), nil
}

// FirstIndex implements raft.Storage.
func (s *Storage) FirstIndex() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.offset() + 1, nil
}

// Snapshot implements raft.Storage.
func (s *Storage) Snapshot() (*pb.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return proto.Clone(s.snap).(*pb.Snapshot), nil
}

// Save persists what one Ready asks to persist before its messages are
// sent, in one pebble batch: a snapshot received from the leader (which
// replaces the whole log up to its index), the HardState, and new entries
// (which replace any entries from the first new index on: a new leader may
// overwrite an uncommitted tail). With sync the batch is fsync'd before
// Save returns (Ready.MustSync).
func (s *Storage) Save(hs *pb.HardState, ents []*pb.Entry, snap *pb.Snapshot, sync bool) error {
	if err := s.Err(); err != nil {
		return err
	}
	b := s.db.NewBatch()
	defer b.Close()
	s.mu.Lock()
	off, last := s.offset(), s.last()
	s.mu.Unlock()
	newSnap := snap != nil && !raft.IsEmptySnap(snap)
	var snapAddrs map[uint64]string
	if newSnap {
		i := snap.GetMetadata().GetIndex()
		if i <= off {
			return fmt.Errorf("raftlog: snapshot at %d is not newer than the log's %d: %w", i, off, raft.ErrSnapOutOfDate)
		}
		if err := setProto(b, []byte(keySnap), snap); err != nil {
			return err
		}
		if err := setProto(b, []byte(keyConf), snap.GetMetadata().GetConfState()); err != nil {
			return err
		}
		if d, err := DecodeSnapshotDesc(snap.GetData()); err == nil && d.Addrs != nil {
			snapAddrs = d.Addrs
			if err := b.Set([]byte(keyAddrs), addrsRecord(d.Addrs), nil); err != nil {
				return err
			}
		}
		if err := b.Set([]byte(keyOffset), offsetRecord(i, snap.GetMetadata().GetTerm()), nil); err != nil {
			return err
		}
		// The snapshot replaces the whole log it covers, and the tail too
		// (raft sends a snapshot only to a follower whose log does not
		// match): entries continue from the snapshot.
		if err := b.DeleteRange(entryKey(0), []byte{prefixEntry + 1}, nil); err != nil {
			return err
		}
		off, last = i, i
	}
	if hs != nil && !raft.IsEmptyHardState(hs) {
		if err := setProto(b, []byte(keyHard), hs); err != nil {
			return err
		}
	}
	var first uint64
	sizes := make([]int, len(ents))
	if len(ents) > 0 {
		first = ents[0].GetIndex()
		if first > last+1 {
			return fmt.Errorf("raftlog: append at %d leaves a hole after the last index %d", first, last)
		}
		for k, e := range ents {
			if e.GetIndex() <= off {
				continue // already covered by the snapshot
			}
			v, err := proto.Marshal(e)
			if err != nil {
				return fmt.Errorf("raftlog: encode entry %d: %w", e.GetIndex(), err)
			}
			sizes[k] = len(v)
			if err := b.Set(entryKey(e.GetIndex()), v, nil); err != nil {
				return err
			}
		}
		if end := ents[len(ents)-1].GetIndex(); end < last {
			// A conflicting tail longer than the new entries goes.
			if err := b.DeleteRange(entryKey(end+1), []byte{prefixEntry + 1}, nil); err != nil {
				return err
			}
		}
	}
	opts := pebble.NoSync
	if sync {
		opts = pebble.Sync
	}
	if err := b.Commit(opts); err != nil {
		return fmt.Errorf("raftlog: save: %w", s.checkCorrupt(err))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if newSnap {
		s.snap = proto.Clone(snap).(*pb.Snapshot)
		s.cs = proto.Clone(pb.EnsureConfState(snap.GetMetadata().GetConfState())).(*pb.ConfState)
		s.off, s.offTerm = snap.GetMetadata().GetIndex(), snap.GetMetadata().GetTerm()
		s.terms = nil
		s.dropTail(len(s.tail))
		if snapAddrs != nil {
			s.addrs = maps.Clone(snapAddrs)
		}
	}
	if hs != nil && !raft.IsEmptyHardState(hs) {
		s.hs = proto.Clone(hs).(*pb.HardState)
	}
	if len(ents) > 0 {
		off := s.offset()
		for k, e := range ents {
			i := e.GetIndex()
			if i <= off {
				continue
			}
			// The tail is cut where the log is (a conflicting suffix
			// goes), before the log's end moves.
			s.cutTail(i)
			if k := i - off - 1; k < uint64(len(s.terms)) {
				s.terms = append(s.terms[:k], e.GetTerm())
			} else {
				s.terms = append(s.terms, e.GetTerm())
			}
			s.tail = append(s.tail, e)
			s.tailSizes = append(s.tailSizes, sizes[k])
			s.tailBytes += sizes[k]
		}
		if n := len(s.tail) - tailMax; n > 0 {
			s.dropTail(n)
		}
		for len(s.tail) > 1 && s.tailBytes > tailMaxBytes {
			s.dropTail(1)
		}
	}
	return nil
}

// cutTail drops the tail's entries from index i on (the caller then
// appends entry i: the tail still ends at the log's last index). A tail
// that starts after i is emptied: entry i starts it anew.
func (s *Storage) cutTail(i uint64) {
	first := s.last() + 1 - uint64(len(s.tail))
	if i < first {
		s.dropTail(len(s.tail))
		return
	}
	for _, n := range s.tailSizes[i-first:] {
		s.tailBytes -= n
	}
	clear(s.tail[i-first:])
	s.tail, s.tailSizes = s.tail[:i-first], s.tailSizes[:i-first]
}

// dropTail drops the tail's n oldest entries.
func (s *Storage) dropTail(n int) {
	for _, sz := range s.tailSizes[:n] {
		s.tailBytes -= sz
	}
	clear(s.tail[:n])
	s.tail, s.tailSizes = s.tail[n:], s.tailSizes[n:]
	if len(s.tail) == 0 {
		s.tail, s.tailSizes, s.tailBytes = nil, nil, 0
	}
}

// SetConfState records the configuration the node applied and the
// members' addresses (unsynced: a configuration change is in the log, and
// is applied again after a crash).
func (s *Storage) SetConfState(cs *pb.ConfState, addrs map[uint64]string) error {
	b := s.db.NewBatch()
	defer b.Close()
	if err := setProto(b, []byte(keyConf), cs); err != nil {
		return err
	}
	if err := b.Set([]byte(keyAddrs), addrsRecord(addrs), nil); err != nil {
		return err
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("raftlog: save conf state: %w", err)
	}
	s.mu.Lock()
	s.cs = proto.Clone(cs).(*pb.ConfState)
	s.addrs = maps.Clone(addrs)
	s.mu.Unlock()
	return nil
}

// Addresses returns the members' addresses recorded with the last
// configuration.
func (s *Storage) Addresses() map[uint64]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.addrs)
}

func addrsRecord(addrs map[uint64]string) []byte {
	e := wire.NewEncoder(16 + 32*len(addrs))
	e.U8(addrsVersion)
	encodeAddrs(e, addrs)
	return e.B
}

// CreateSnapshot records a snapshot of the state machine at index (which
// must be applied, and its state durable) with the configuration cs, and
// drops the log entries up to index-keep: the last keep entries stay, so
// that a follower slightly behind catches up from the log rather than
// from a snapshot. It is synced, as the entries it drops are gone.
func (s *Storage) CreateSnapshot(index uint64, cs *pb.ConfState, data []byte, keep uint64) error {
	s.mu.Lock()
	snapIndex, off, last := s.snap.GetMetadata().GetIndex(), s.offset(), s.last()
	s.mu.Unlock()
	if index <= snapIndex {
		return raft.ErrSnapOutOfDate
	}
	if index > last {
		return fmt.Errorf("raftlog: snapshot at %d beyond the last index %d", index, last)
	}
	term, err := s.Term(index)
	if err != nil {
		return err
	}
	snap := &pb.Snapshot{Data: data, Metadata: &pb.SnapshotMetadata{
		Index: new(index), Term: new(term), ConfState: proto.Clone(cs).(*pb.ConfState)}}
	b := s.db.NewBatch()
	defer b.Close()
	if err := setProto(b, []byte(keySnap), snap); err != nil {
		return err
	}
	// A restart must never find the commit index below the log's offset.
	// It cannot: index was applied, so a HardState with a commit index of
	// at least index was saved before (Save, possibly unsynced), in this
	// same WAL, which the synced commit below syncs.
	compact, compactTerm := off, uint64(0)
	if index > keep && index-keep > off {
		compact = index - keep
		if compactTerm, err = s.Term(compact); err != nil {
			return err
		}
		if err := b.DeleteRange(entryKey(0), entryKey(compact+1), nil); err != nil {
			return err
		}
		if err := b.Set([]byte(keyOffset), offsetRecord(compact, compactTerm), nil); err != nil {
			return err
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("raftlog: create snapshot: %w", err)
	}
	s.mu.Lock()
	s.snap = snap
	if compact > off {
		s.terms = append([]uint64(nil), s.terms[compact-off:]...)
		s.off, s.offTerm = compact, compactTerm
		if first := s.last() + 1 - uint64(len(s.tail)); len(s.tail) > 0 && first <= compact {
			s.dropTail(int(min(compact-first+1, uint64(len(s.tail)))))
		}
	}
	s.mu.Unlock()
	return nil
}

func offsetRecord(index, term uint64) []byte {
	return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, index), term)
}

func setProto(b *pebble.Batch, key []byte, m proto.Message) error {
	v, err := proto.Marshal(m)
	if err != nil {
		return fmt.Errorf("raftlog: encode %q: %w", key, err)
	}
	return b.Set(key, v, nil)
}

// pebbleLogger passes pebble's errors on: pebble reports background
// failures (a failed flush or compaction) only through its logger.
type pebbleLogger struct{ log *slog.Logger }

func (l pebbleLogger) Infof(string, ...any) {}
func (l pebbleLogger) Errorf(format string, args ...any) {
	l.log.Error("raftlog: pebble: " + fmt.Sprintf(format, args...))
}
func (l pebbleLogger) Fatalf(format string, args ...any) {
	l.log.Error("raftlog: pebble fatal: " + fmt.Sprintf(format, args...))
	panic(fmt.Sprintf("raftlog: pebble fatal: "+format, args...))
}
