package raftlog

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/weft-fs/weft/wire"
)

// Snapshots keeps the state machine's snapshots as directories of files
// (a pebble checkpoint, for meta) on one file system, the state
// machine's, so that a snapshot can be installed by linking its files.
// What raft's Snapshot.Data carries is not the state but a descriptor of
// such a directory: its index and term and, per file, its name, size and
// SHA-256. The files travel between nodes in bounded chunks (snapstream.go);
// a receiver installs nothing whose files do not match the descriptor.
//
// Layout of the directory:
//
//	<index:020d>-<id>   a sealed snapshot: complete, synced, never changed
//	                    again (id: the first 8 bytes of the descriptor's
//	                    SHA-256, hex, so two snapshots at one index differ)
//	tmp-<n>             a snapshot being written by the state machine
//	recv-<id>           a snapshot being received
//
// tmp- and recv- directories are removed when Snapshots is opened (a crash
// left them incomplete).
type Snapshots struct {
	fs  vfs.FS
	dir string

	mu   sync.Mutex
	tmpN int
	recv *incoming // the snapshot being received (one at a time)
}

// Descriptor versions: 2 added the members' addresses (version 1 is still
// read, with none).
const descVersion = 2

// SnapshotFile is one file of a snapshot.
type SnapshotFile struct {
	Name string
	Size uint64
	Sum  [sha256.Size]byte
}

// SnapshotDesc describes a sealed snapshot; its encoding is raft's
// Snapshot.Data.
type SnapshotDesc struct {
	Index, Term uint64
	Files       []SnapshotFile
	// Addrs are the members' addresses as of the snapshot (see
	// Node.Addresses): a member that joins from it learns them.
	Addrs map[uint64]string
}

// maxSnapFiles bounds the files of one snapshot (a checkpoint of a large
// pebble store has a few hundred tables).
const maxSnapFiles = 1 << 16

// Encode returns the descriptor's wire form: version(1) index(8) term(8)
// count(4), then per file name(bytes) size(8) sha256(bytes), then
// count(4) and per member id(8) address(bytes), by id.
func (d *SnapshotDesc) Encode() []byte {
	e := wire.NewEncoder(32 + len(d.Files)*64)
	e.U8(descVersion)
	e.U64(d.Index)
	e.U64(d.Term)
	e.U32(uint32(len(d.Files)))
	for _, f := range d.Files {
		e.String(f.Name)
		e.U64(f.Size)
		e.Bytes(f.Sum[:])
	}
	encodeAddrs(e, d.Addrs)
	return e.B
}

func encodeAddrs(e *wire.Encoder, addrs map[uint64]string) {
	ids := make([]uint64, 0, len(addrs))
	for id := range addrs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	e.U32(uint32(len(ids)))
	for _, id := range ids {
		e.U64(id)
		e.String(addrs[id])
	}
}

// maxAddrs bounds the members a descriptor or the log names.
const maxAddrs = 1 << 16

func decodeAddrs(d *wire.Decoder) map[uint64]string {
	n := d.Count(maxAddrs, 12)
	m := make(map[uint64]string, n)
	for i := 0; i < n && d.Err() == nil; i++ {
		id := d.U64()
		m[id] = d.StringMax(1024)
	}
	return m
}

// DecodeSnapshotDesc decodes a descriptor, refusing file names that are
// not plain names (a descriptor from the network must not write outside
// the receiving directory).
func DecodeSnapshotDesc(b []byte) (*SnapshotDesc, error) {
	d := wire.NewDecoder(b)
	v := d.U8()
	if v != 1 && v != descVersion && d.Err() == nil {
		return nil, fmt.Errorf("raftlog: snapshot descriptor of version %d, want %d: %w", v, descVersion, syscall.EPROTO)
	}
	desc := &SnapshotDesc{Index: d.U64(), Term: d.U64()}
	n := d.Count(maxSnapFiles, 4+8+sha256.Size)
	seen := map[string]bool{}
	for i := 0; i < n && d.Err() == nil; i++ {
		f := SnapshotFile{Name: d.StringMax(255), Size: d.U64()}
		sum := d.BytesMax(sha256.Size)
		if d.Err() != nil {
			break
		}
		if len(sum) != sha256.Size {
			return nil, fmt.Errorf("raftlog: snapshot descriptor: a checksum of %d bytes: %w", len(sum), syscall.EINVAL)
		}
		copy(f.Sum[:], sum)
		if !validName(f.Name) || seen[f.Name] {
			return nil, fmt.Errorf("raftlog: snapshot descriptor names file %q: %w", f.Name, syscall.EINVAL)
		}
		seen[f.Name] = true
		desc.Files = append(desc.Files, f)
	}
	if v >= 2 {
		desc.Addrs = decodeAddrs(d)
	}
	if err := d.Done(); err != nil {
		return nil, fmt.Errorf("raftlog: snapshot descriptor: %v: %w", err, syscall.EINVAL)
	}
	return desc, nil
}

func validName(n string) bool {
	return n != "" && n != "." && n != ".." && !strings.ContainsAny(n, "/\\\x00")
}

// ID names the snapshot among others at its index.
func (d *SnapshotDesc) ID() string {
	sum := sha256.Sum256(d.Encode())
	return fmt.Sprintf("%020d-%x", d.Index, sum[:8])
}

// Size is the bytes of all its files.
func (d *SnapshotDesc) Size() uint64 {
	var n uint64
	for _, f := range d.Files {
		n += f.Size
	}
	return n
}

// OpenSnapshots opens (creating it) the snapshot directory dir on fs and
// removes what a crash left half-written.
func OpenSnapshots(fs vfs.FS, dir string) (*Snapshots, error) {
	if fs == nil {
		fs = vfs.Default
	}
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("raftlog: snapshots: %w", err)
	}
	// The directory's own entry must survive a crash too.
	if err := syncDir(fs, fs.PathDir(dir)); err != nil {
		return nil, err
	}
	s := &Snapshots{fs: fs, dir: dir}
	names, err := fs.List(dir)
	if err != nil {
		return nil, fmt.Errorf("raftlog: snapshots: %w", err)
	}
	for _, n := range names {
		if strings.HasPrefix(n, "tmp-") || strings.HasPrefix(n, "recv-") {
			if err := fs.RemoveAll(fs.PathJoin(dir, n)); err != nil {
				return nil, fmt.Errorf("raftlog: snapshots: remove %s: %w", n, err)
			}
		}
	}
	return s, nil
}

// FS is the file system the snapshots are on.
func (s *Snapshots) FS() vfs.FS { return s.fs }

// Path is the directory of the sealed snapshot d.
func (s *Snapshots) Path(d *SnapshotDesc) string { return s.fs.PathJoin(s.dir, d.ID()) }

// Has reports whether the sealed snapshot d is here.
func (s *Snapshots) Has(d *SnapshotDesc) bool {
	_, err := s.fs.Stat(s.Path(d))
	return err == nil
}

// tempDir returns a directory name for the state machine to write a new
// snapshot into (it does not exist yet).
func (s *Snapshots) tempDir() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tmpN++
	return s.fs.PathJoin(s.dir, "tmp-"+strconv.Itoa(s.tmpN))
}

// seal describes the files the state machine wrote into tmp, syncs them,
// and renames tmp to the snapshot's own name.
func (s *Snapshots) seal(tmp string, index, term uint64, addrs map[uint64]string) (*SnapshotDesc, error) {
	names, err := s.fs.List(tmp)
	if err != nil {
		return nil, fmt.Errorf("raftlog: seal snapshot: %w", err)
	}
	slices.Sort(names)
	d := &SnapshotDesc{Index: index, Term: term, Addrs: maps.Clone(addrs)}
	if d.Addrs == nil {
		d.Addrs = map[uint64]string{}
	}
	for _, n := range names {
		p := s.fs.PathJoin(tmp, n)
		st, err := s.fs.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("raftlog: seal snapshot: %w", err)
		}
		if st.IsDir() {
			return nil, fmt.Errorf("raftlog: seal snapshot: %s is a directory; snapshots are flat", p)
		}
		f := SnapshotFile{Name: n}
		if f.Size, f.Sum, err = s.hashFile(p, true); err != nil {
			return nil, err
		}
		d.Files = append(d.Files, f)
	}
	if err := s.install(tmp, s.Path(d)); err != nil {
		return nil, err
	}
	return d, nil
}

// install syncs dir src and renames it to dst (replacing an identical one).
func (s *Snapshots) install(src, dst string) error {
	if err := syncDir(s.fs, src); err != nil {
		return err
	}
	if _, err := s.fs.Stat(dst); err == nil {
		// The same snapshot again (same descriptor, so the same bytes).
		return s.fs.RemoveAll(src)
	}
	if err := s.fs.Rename(src, dst); err != nil {
		return fmt.Errorf("raftlog: install snapshot: %w", err)
	}
	return syncDir(s.fs, s.dir)
}

// hashFile returns a file's size and SHA-256, syncing it first if asked.
func (s *Snapshots) hashFile(p string, sync bool) (uint64, [sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	f, err := s.fs.Open(p)
	if err != nil {
		return 0, sum, fmt.Errorf("raftlog: snapshot file: %w", err)
	}
	defer f.Close()
	if sync {
		if err := f.Sync(); err != nil {
			return 0, sum, fmt.Errorf("raftlog: sync snapshot file %s: %w", p, err)
		}
	}
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return 0, sum, fmt.Errorf("raftlog: read snapshot file %s: %w", p, err)
	}
	copy(sum[:], h.Sum(nil))
	return uint64(n), sum, nil
}

func syncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return fmt.Errorf("raftlog: sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("raftlog: sync %s: %w", dir, err)
	}
	return nil
}

// prune removes every sealed snapshot but keep's and the newest other one
// (which a sender may still be reading).
func (s *Snapshots) prune(keep *SnapshotDesc) {
	names, err := s.fs.List(s.dir)
	if err != nil {
		return
	}
	slices.Sort(names)
	keepID := keep.ID()
	var sealed []string
	for _, n := range names {
		if len(n) > 21 && n[20] == '-' && n != keepID {
			sealed = append(sealed, n)
		}
	}
	if len(sealed) > 1 {
		for _, n := range sealed[:len(sealed)-1] {
			_ = s.fs.RemoveAll(s.fs.PathJoin(s.dir, n))
		}
	}
}

// incoming is a snapshot being received: its files are written in order,
// each sequentially.
type incoming struct {
	desc *SnapshotDesc
	raw  []byte // the descriptor as sent
	dir  string
	file int      // index of the file being written
	off  uint64   // bytes of it written
	f    vfs.File // open for file, nil before its first chunk
}

// receive writes one chunk of snapshot desc (raw is its encoding): data at
// offset off of file number file. Chunks must come in order; a chunk of
// another snapshot abandons the one under way.
func (s *Snapshots) receive(raw []byte, file int, off uint64, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	in := s.recv
	if in == nil || !bytes.Equal(in.raw, raw) {
		desc, err := DecodeSnapshotDesc(raw)
		if err != nil {
			return err
		}
		if file != 0 || off != 0 {
			return fmt.Errorf("raftlog: snapshot chunk at file %d offset %d of a snapshot not begun: %w", file, off, syscall.EINVAL)
		}
		s.abandonLocked()
		in = &incoming{desc: desc, raw: bytes.Clone(raw), dir: s.fs.PathJoin(s.dir, "recv-"+desc.ID())}
		_ = s.fs.RemoveAll(in.dir)
		if err := s.fs.MkdirAll(in.dir, 0o755); err != nil {
			return fmt.Errorf("raftlog: receive snapshot: %w", err)
		}
		s.recv = in
	}
	if file >= len(in.desc.Files) {
		return fmt.Errorf("raftlog: snapshot chunk for file %d of %d: %w", file, len(in.desc.Files), syscall.EINVAL)
	}
	if file == in.file+1 && in.f != nil && in.off == in.desc.Files[in.file].Size {
		if err := in.closeFile(); err != nil {
			return err
		}
		in.file, in.off = file, 0
	}
	if file != in.file || off != in.off {
		return fmt.Errorf("raftlog: snapshot chunk at file %d offset %d, expected file %d offset %d: %w",
			file, off, in.file, in.off, syscall.EINVAL)
	}
	want := in.desc.Files[file]
	if off+uint64(len(data)) > want.Size {
		return fmt.Errorf("raftlog: snapshot chunk beyond the size of %s (%d): %w", want.Name, want.Size, syscall.EINVAL)
	}
	if in.f == nil {
		f, err := s.fs.Create(s.fs.PathJoin(in.dir, want.Name), vfs.WriteCategoryUnspecified)
		if err != nil {
			return fmt.Errorf("raftlog: receive snapshot: %w", err)
		}
		in.f = f
	}
	if _, err := in.f.Write(data); err != nil {
		return fmt.Errorf("raftlog: receive snapshot: %w", err)
	}
	in.off += uint64(len(data))
	return nil
}

func (in *incoming) closeFile() error {
	if in.f == nil {
		return nil
	}
	f := in.f
	in.f = nil
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("raftlog: receive snapshot: %w", err)
	}
	return f.Close()
}

func (s *Snapshots) abandonLocked() {
	if s.recv == nil {
		return
	}
	if s.recv.f != nil {
		s.recv.f.Close()
	}
	_ = s.fs.RemoveAll(s.recv.dir)
	s.recv = nil
}

// finish checks the snapshot received for desc (raw) against its
// descriptor, every file's size and SHA-256, and seals it. Nothing that
// fails the check is installed.
func (s *Snapshots) finish(raw []byte) (*SnapshotDesc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	desc, err := DecodeSnapshotDesc(raw)
	if err != nil {
		return nil, err
	}
	if s.Has(desc) {
		return desc, nil // received before
	}
	in := s.recv
	if in == nil || !bytes.Equal(in.raw, raw) {
		if len(desc.Files) > 0 {
			return nil, fmt.Errorf("raftlog: snapshot %s finished but not received: %w", desc.ID(), syscall.EINVAL)
		}
		// A snapshot with no files (an empty state) has no chunks.
		s.abandonLocked()
		in = &incoming{desc: desc, raw: bytes.Clone(raw), dir: s.fs.PathJoin(s.dir, "recv-"+desc.ID())}
		if err := s.fs.MkdirAll(in.dir, 0o755); err != nil {
			return nil, fmt.Errorf("raftlog: receive snapshot: %w", err)
		}
		s.recv = in
	}
	defer s.abandonLocked()
	if err := in.closeFile(); err != nil {
		return nil, err
	}
	for _, f := range desc.Files {
		size, sum, err := s.hashFile(s.fs.PathJoin(in.dir, f.Name), false)
		if errors.Is(err, iofs.ErrNotExist) || (err == nil && size != f.Size) {
			return nil, fmt.Errorf("raftlog: received snapshot file %s is %d bytes, want %d: %w", f.Name, size, f.Size, syscall.EIO)
		}
		if err != nil {
			return nil, err
		}
		if sum != f.Sum {
			return nil, fmt.Errorf("raftlog: received snapshot file %s fails its SHA-256: %w", f.Name, syscall.EIO)
		}
	}
	if err := s.install(in.dir, s.Path(desc)); err != nil {
		return nil, err
	}
	s.recv = nil
	return desc, nil
}

// openFile opens file number file of the sealed snapshot d for reading.
func (s *Snapshots) openFile(d *SnapshotDesc, file int) (vfs.File, error) {
	f, err := s.fs.Open(s.fs.PathJoin(s.Path(d), d.Files[file].Name))
	if err != nil {
		return nil, fmt.Errorf("raftlog: send snapshot %s: %w", d.ID(), err)
	}
	return f, nil
}
