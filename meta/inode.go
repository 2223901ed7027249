package meta

import (
	"errors"
	"fmt"
	"slices"
	"syscall"

	"github.com/weft-fs/weft/meta/store"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/wire"
)

// inode is the stored record of one inode: the attributes the client sees
// plus what only the server needs.
type inode struct {
	proto.Attr
	Parent  proto.Ino // directories: the one parent (for the rename subtree check); root: itself
	Written bool      // regular files: data was ever written (setstripe is refused after)
	Symlink string    // symlinks: the target
	// Project is the project id the inode counts against (quota.go); new
	// inodes take their parent directory's. 0: no project.
	Project uint32
	// Migrated lists, oldest first, the generations a regular file had
	// before restripes replaced them (migrate.go): a handle opened at one
	// of them follows the file to its current objects (Server.Follow),
	// while a handle of any other generation is of another file. At most
	// maxMigrated are kept.
	Migrated []uint64
	// Keyed records other keys of the store that belong to the inode and
	// must go with it (inodeHasXattrs, inodeHasLost): set when the first
	// is written and never cleared, so reclaimInode looks for them only
	// where there may be some. A scan of a key prefix costs a pebble
	// iterator (tens of µs), on every member, for every unlink, and the
	// answer was almost always "none".
	Keyed uint8
	// Flags are facts about the inode's past (inodeTruncated).
	Flags uint8
}

// inode.Flags bits.
const (
	// inodeTruncated: a truncate (setattr of the size) was applied to the
	// file. With Written false, a file without it has had no bytes
	// recorded or cut since it was made: what a copy of its bytes
	// requires (copies.go).
	inodeTruncated = 1 << iota
)

// inode.Keyed bits.
const (
	inodeHasXattrs = 1 << iota // store.XattrKey records may exist
	inodeHasLost               // store.LostKey records may exist
	// inodeHasCopy: the store.AppendCopyKey record exists (copies.go).
	// Unlike the others it is cleared when the record is deleted, so
	// an open looks the copy up only when there is one.
	inodeHasCopy
	// inodeKeyedUnknown: a record older than version 6 did not say.
	inodeKeyedUnknown = inodeHasXattrs | inodeHasLost
)

// maxMigrated bounds inode.Migrated: a handle that stayed open across
// more restripes than this gets ESTALE (reopen) rather than a record that
// grows with every restripe.
const maxMigrated = 16

// inodeVersion 2 added the generation (proto.Attr.Gen, encoded with the
// attributes); version 1 records decode with generation 0. Version 3 holds
// the layout in format 2 (kinds, stale slots; layoutdisk.go) and the
// allocated blocks (proto.Attr.Blocks); a regular file of an earlier
// record gets its size in blocks, what stat reported before, until its
// next WriteDone reports them. Version 4 appends the project id
// (quota.go); earlier records decode with project 0. Version 5 appends
// the generations restripes replaced (inode.Migrated: u16 count, u64
// each); earlier records decode with none. Version 6 appends
// inode.Keyed (u8); earlier records decode with every bit set (may have
// such keys: look). Version 7 appends inode.Flags (u8); earlier records
// decode with inodeTruncated set (their past is not known).
const inodeVersion = 7

// clone returns a copy of n that shares nothing with it.
func (n *inode) clone() *inode {
	c := *n
	c.Layout = n.Layout.Clone()
	c.Migrated = slices.Clone(n.Migrated)
	return &c
}

func (n *inode) encode() []byte {
	return n.appendTo(wire.NewEncoder(99 + len(n.Symlink) + 4*len(n.Layout.Targets) + 8*len(n.Migrated)))
}

// appendTo appends the inode's record (encode) to e's buffer and returns
// the buffer.
func (n *inode) appendTo(e *wire.Encoder) []byte {
	e.U8(inodeVersion)
	encodeAttrDisk(e, &n.Attr)
	e.U64(uint64(n.Parent))
	e.Bool(n.Written)
	e.String(n.Symlink)
	e.U32(n.Project)
	e.U16(uint16(len(n.Migrated)))
	for _, g := range n.Migrated {
		e.U64(g)
	}
	e.U8(n.Keyed)
	e.U8(n.Flags)
	return e.B
}

func decodeInode(b []byte) (*inode, error) {
	d := wire.NewDecoder(b)
	v := d.U8()
	if d.Err() == nil && (v < 1 || v > inodeVersion) {
		return nil, fmt.Errorf("meta: inode record version %d not supported", v)
	}
	n := &inode{}
	switch v {
	case 1:
		decodeAttrDisk(d, &n.Attr, 1, false, false)
	case 2:
		decodeAttrDisk(d, &n.Attr, 1, true, false)
	default:
		decodeAttrDisk(d, &n.Attr, diskLayoutFormat, true, true)
	}
	if v < 3 && n.IsRegular() {
		n.Blocks = (n.Size + 511) / 512
	}
	n.Parent = proto.Ino(d.U64())
	n.Written = d.Bool()
	n.Symlink = d.String()
	if v >= 4 {
		n.Project = d.U32()
	}
	if v >= 5 {
		k := int(d.U16())
		if d.Err() == nil && k > maxMigrated {
			return nil, fmt.Errorf("meta: decode inode: %d replaced generations, at most %d", k, maxMigrated)
		}
		for range k {
			n.Migrated = append(n.Migrated, d.U64())
		}
	}
	n.Keyed = inodeKeyedUnknown
	if v >= 6 {
		n.Keyed = d.U8()
	}
	n.Flags = inodeTruncated
	if v >= 7 {
		n.Flags = d.U8()
	}
	if err := d.Done(); err != nil {
		return nil, fmt.Errorf("meta: decode inode: %w", err)
	}
	return n, nil
}

// loadInode reads and decodes inode ino from st: ENOENT if there is none,
// EIO if it cannot be read or decoded.
func loadInode(st store.Reader, ino proto.Ino) (*inode, error) { return loadInodeBuf(st, ino, nil) }

// loadInodeBuf is loadInode with its key built on kb (reused: the key is
// not kept).
func loadInodeBuf(st store.Reader, ino proto.Ino, kb []byte) (*inode, error) {
	if ino == 0 {
		return nil, errnof(syscall.ENOENT, "no inode 0")
	}
	v, err := st.Get(store.AppendInodeKey(kb[:0], uint64(ino)))
	if errors.Is(err, store.ErrNotFound) {
		return nil, errnof(syscall.ENOENT, "no inode %d", ino)
	}
	if err != nil {
		return nil, errnof(syscall.EIO, "read inode %d: %v", ino, err)
	}
	n, err := decodeInode(v)
	if err != nil {
		return nil, errnof(syscall.EIO, "inode %d: %v", ino, err)
	}
	return n, nil
}

// loadDirent reads and decodes the entry name of parent from st; ok is
// false if there is none. It does not check that parent exists.
func loadDirent(st store.Reader, parent proto.Ino, name string) (de dirent, ok bool, err error) {
	return loadDirentBuf(st, parent, name, make([]byte, 0, 1+8+len(name))) // the key's size: one allocation
}

// loadDirentBuf is loadDirent with its key built on kb (reused: the key
// is not kept).
func loadDirentBuf(st store.Reader, parent proto.Ino, name string, kb []byte) (de dirent, ok bool, err error) {
	v, err := st.Get(store.AppendDirentKey(kb[:0], uint64(parent), name))
	if errors.Is(err, store.ErrNotFound) {
		return dirent{}, false, nil
	}
	if err != nil {
		return dirent{}, false, errnof(syscall.EIO, "read entry %q: %v", name, err)
	}
	de, err = decodeDirent(v)
	if err != nil {
		return dirent{}, false, errnof(syscall.EIO, "entry %q: %v", name, err)
	}
	return de, true, nil
}

// dirent is the value of a directory entry: the child and its file type.
type dirent struct {
	Ino  proto.Ino
	Type uint32 // S_IFMT bits
}

func (de dirent) encode() []byte { return de.appendTo(make([]byte, 0, 12)) }

// appendTo appends the entry's value (encode) to b.
func (de dirent) appendTo(b []byte) []byte {
	e := &wire.Encoder{B: b}
	e.U64(uint64(de.Ino))
	e.U32(de.Type)
	return e.B
}

func decodeDirent(b []byte) (dirent, error) {
	d := wire.NewDecoder(b)
	de := dirent{Ino: proto.Ino(d.U64()), Type: d.U32()}
	if err := d.Done(); err != nil {
		return dirent{}, fmt.Errorf("meta: decode dirent: %w", err)
	}
	return de, nil
}

func isDirMode(m uint32) bool { return m&syscall.S_IFMT == syscall.S_IFDIR }
