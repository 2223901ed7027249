package proto

import (
	"context"
	"syscall"

	"github.com/weft-fs/weft/layout"
)

// Ino is an inode number. RootIno is the root directory; 0 is never used.
type Ino uint64

const RootIno Ino = 1

// TargetID is re-exported from layout for convenience.
type TargetID = layout.TargetID

// ObjectID names one stripe object of a file on a storage target. Gen is
// the file's generation (Attr.Gen): inode numbers can come back after a
// metadata rollback or restore, generations do not, so objects of a file
// that reused a number never share a name with the old file's.
type ObjectID struct {
	Ino    Ino
	Stripe uint32
	Gen    uint64
}

// Attr is an inode's attributes as the metadata server keeps them. Times are
// nanoseconds since the Unix epoch. Mode holds the file type bits (S_IFMT) and
// the permission bits.
type Attr struct {
	Ino    Ino
	Mode   uint32
	Nlink  uint32
	Uid    uint32
	Gid    uint32
	Rdev   uint32
	Size   uint64
	Atime  int64
	Mtime  int64
	Ctime  int64
	Layout layout.Layout // regular files: the file's layout; directories: the default for children (StripeSize 0 = inherit)
	// Gen is a regular file's generation: a random number made when it was
	// created, part of its objects' names (ObjectID.Gen); 0 for other
	// inodes and for files created before generations.
	Gen uint64
	// Blocks is what a regular file's objects hold on their targets, in
	// 512-byte units (stat's st_blocks), as its writers last reported it
	// (WriteDone); holes cost nothing.
	Blocks uint64
}

// IsDir, IsRegular and IsSymlink test the file type bits.
func (a Attr) IsDir() bool     { return a.Mode&syscall.S_IFMT == syscall.S_IFDIR }
func (a Attr) IsRegular() bool { return a.Mode&syscall.S_IFMT == syscall.S_IFREG }
func (a Attr) IsSymlink() bool { return a.Mode&syscall.S_IFMT == syscall.S_IFLNK }

// DirEntry is one entry of a directory listing, with the child's attributes
// so that the FUSE adapter can answer READDIRPLUS without more round trips.
type DirEntry struct {
	Name string
	Attr Attr
}

// SetAttr bits say which fields of SetAttrIn apply.
const (
	SetMode uint32 = 1 << iota
	SetUid
	SetGid
	SetSize
	SetAtime    // to SetAttrIn.Atime
	SetMtime    // to SetAttrIn.Mtime
	SetAtimeNow // to the server's clock (UTIME_NOW)
	SetMtimeNow
	SetCtime
	// SetHandle says the change is made through an open file handle
	// (ftruncate, open with O_TRUNC): when the caller's session holds an
	// open handle on the inode, a size change needs no write permission
	// (the open was checked). It changes nothing by itself.
	SetHandle
)

// SetAttrIn is a setattr request. Valid is a mask of the Set* bits.
type SetAttrIn struct {
	Valid uint32
	Mode  uint32 // permission bits only (and suid/sgid/sticky)
	Uid   uint32
	Gid   uint32
	Size  uint64
	Atime int64
	Mtime int64
	Ctime int64
}

// CreateIn creates a regular file, fifo, socket or device node.
type CreateIn struct {
	Parent    Ino
	Name      string
	Mode      uint32 // type bits + permission bits (umask already applied)
	Rdev      uint32
	Uid       uint32 // ignored by the server unless trusted: see MetaService
	Gid       uint32
	Exclusive bool           // fail with EEXIST if the name exists; otherwise return the existing file
	Layout    *layout.Layout // optional explicit layout (setstripe on a new file); nil = inherit
}

// Rename flags, as in renameat2(2).
const (
	RenameNoReplace uint32 = 1 // RENAME_NOREPLACE
	RenameExchange  uint32 = 2 // RENAME_EXCHANGE
)

// Xattr flags, as in setxattr(2).
const (
	XattrCreate  uint32 = 1
	XattrReplace uint32 = 2
)

// TargetInfo describes a storage target: where it is served and how full it is.
type TargetInfo struct {
	ID    TargetID
	Addr  string // host:port of the storage server that holds it
	Total uint64 // bytes
	Used  uint64
	Free  uint64
	Up    bool // heard from within the heartbeat timeout
	// Objects is how many objects the target holds; FilesFree how many
	// more inodes its file system has room for (0: not known).
	Objects, FilesFree uint64
	// Device names the file system the target lives on (its host and
	// file system id), so that targets sharing one are counted once in
	// totals; "" for a target with a capacity of its own (--capacity).
	Device string
	// IO counts what the target served since its server started: rates
	// are differences between heartbeats (a smaller count: a restart).
	IO IOCounters
	// Domain is the failure domain the storage server was started in
	// (`weft storage --domain`, e.g. a rack); "" when none was given, and
	// then the server's address is its domain. Copies and shards of one
	// stripe are placed in distinct domains.
	Domain string
	// FSID is, in a registration, the file system id the target was
	// formatted for (its target.json); "" before its first registration.
	// The metadata server refuses a target of another file system.
	FSID string
}

// IOCounters are cumulative counts of reads and writes served.
type IOCounters struct {
	Reads, ReadBytes, Writes, WriteBytes uint64
}

// FailureDomain returns the name placement keeps copies apart by: the
// domain, or the server's address when there is none.
func (t TargetInfo) FailureDomain() string {
	if t.Domain != "" {
		return "domain " + t.Domain
	}
	return "server " + t.Addr
}

// StatFS is the filesystem-wide usage: sums over all targets, plus inodes.
type StatFS struct {
	Total, Used, Free uint64 // bytes
	Files             uint64 // inodes in use
	FilesFree         uint64
}

// MetaService is what the client asks of the metadata server. Every call
// acts for the caller whose credentials ctx carries (WithCred; over the
// network, the request header), and the server checks it by POSIX rules
// (docs/security.md, "Permissions"), independently of the kernel's own
// checks (default_permissions). New inodes are owned by the caller's uid
// and gid; the uid and gid arguments of Create, Mkdir and Symlink are used
// only by trusted in-process callers that carry no credentials, and
// ignored otherwise.
// Open, CreateOpen and Capability check the access they ask for and
// return a capability for the inode's objects.
type MetaService interface {
	Lookup(ctx context.Context, parent Ino, name string) (Attr, error)
	GetAttr(ctx context.Context, ino Ino) (Attr, error)
	SetAttr(ctx context.Context, ino Ino, in SetAttrIn) (Attr, error)

	Create(ctx context.Context, in CreateIn) (Attr, error)
	Mkdir(ctx context.Context, parent Ino, name string, mode, uid, gid uint32) (Attr, error)
	Symlink(ctx context.Context, parent Ino, name, target string, uid, gid uint32) (Attr, error)
	Readlink(ctx context.Context, ino Ino) (string, error)
	Link(ctx context.Context, ino, newParent Ino, newName string) (Attr, error)
	Unlink(ctx context.Context, parent Ino, name string) error
	Rmdir(ctx context.Context, parent Ino, name string) error
	Rename(ctx context.Context, oldParent Ino, oldName string, newParent Ino, newName string, flags uint32) error

	// ReadDir returns up to max entries whose names sort after `after`
	// (empty = from the start), in name order. An empty result means the end.
	ReadDir(ctx context.Context, dir Ino, after string, max int) ([]DirEntry, error)

	GetXattr(ctx context.Context, ino Ino, name string) ([]byte, error)
	SetXattr(ctx context.Context, ino Ino, name string, value []byte, flags uint32) error
	ListXattr(ctx context.Context, ino Ino) ([]string, error)
	RemoveXattr(ctx context.Context, ino Ino, name string) error

	// Open checks that the caller may access ino as want asks (the open(2)
	// access mode; O_TRUNC counts as write), failing with EACCES if not;
	// registers an open handle on ino (so an unlinked file lives until its
	// last close); and returns fresh attributes (close-to-open starts here)
	// and, for a regular file, a capability granting want on its objects,
	// which storage servers require of clients (nil if the server issues
	// none).
	Open(ctx context.Context, ino Ino, want Access) (Attr, []byte, error)
	// Capability returns a fresh capability for the regular file ino,
	// after the same check as Open, without opening it: to renew the
	// capability of a file that stays open, and to truncate by path.
	Capability(ctx context.Context, ino Ino, want Access) ([]byte, error)
	// WriteDone records that data up to end was written and acknowledged by
	// the storage targets: size becomes max(size, end), ctime the server's
	// now, and mtime the time of the last write, mtime (the writer's clock;
	// 0: the server's now), unless the file's mtime is already later and not
	// in the future (a later write elsewhere, or a truncate); Attr.Blocks
	// becomes blocks, what the file's objects hold (NoBlocks: unchanged).
	// Called on fsync and on close of a written file, and before an
	// explicit time set, so that buffered writes never move an explicitly
	// set mtime.
	WriteDone(ctx context.Context, ino Ino, end uint64, mtime int64, blocks uint64) (Attr, error)
	// Release drops an open handle taken by Open.
	Release(ctx context.Context, ino Ino) error

	// SetLayout sets a directory's default layout, or the layout of a regular
	// file that has never been written (size 0). Targets may be empty: the
	// server then chooses them.
	SetLayout(ctx context.Context, ino Ino, l layout.Layout) (Attr, error)

	StatFS(ctx context.Context) (StatFS, error)
	Targets(ctx context.Context) ([]TargetInfo, error)
}

// StorageService is what the client asks of storage targets. A read past the
// end of an object returns fewer bytes (n < len(p)); the client treats the
// rest as a hole (zeros) when it is within the file size.
type StorageService interface {
	Read(ctx context.Context, t TargetID, obj ObjectID, off uint64, p []byte) (n int, err error)
	// Write stores data at off and returns the object's new version: a
	// per-object sequence number, increased by every write, that replication
	// and erasure coding will use to order updates.
	Write(ctx context.Context, t TargetID, obj ObjectID, off uint64, data []byte) (version uint64, err error)
	Truncate(ctx context.Context, t TargetID, obj ObjectID, size uint64) error
	// Sync makes every acknowledged write to obj durable on disk.
	Sync(ctx context.Context, t TargetID, obj ObjectID) error
	Remove(ctx context.Context, t TargetID, obj ObjectID) error
	// RemoveMany removes every object of objs from target t, as Remove
	// does each (a missing object is not an error). On an error some may
	// have been removed already; removing is idempotent, so the caller
	// retries the whole list.
	RemoveMany(ctx context.Context, t TargetID, objs []ObjectID) error
	// Space changes how [off, off+n) of obj is backed (fallocate(2) on one
	// object; see SpaceMode). It never changes what reads return outside
	// the range, and never shrinks the object.
	Space(ctx context.Context, t TargetID, obj ObjectID, mode SpaceMode, off, n uint64) error
	// Seek returns the first offset at or after off where obj has data
	// (what == SeekData) or a hole (SeekHole); the end of the object counts
	// as a hole. Data is what the target has allocated: written blocks and
	// blocks reserved by SpaceAllocate. ENXIO: no data at or after off.
	Seek(ctx context.Context, t TargetID, obj ObjectID, off uint64, what SeekWhat) (uint64, error)
	// Allocated returns the bytes obj holds on its target: its allocated
	// blocks (holes cost nothing); 0 for a missing object.
	Allocated(ctx context.Context, t TargetID, obj ObjectID) (uint64, error)
	// Copy writes n bytes of object src on target srcT, from srcOff, into
	// object dst on target t at dstOff, as Write would write them (bytes
	// past src's end, and its holes, are zeros). The server serving t reads
	// src itself, from its own target or from srcT's server: the bytes do
	// not pass through the caller. ctx's capability must grant write on
	// dst, srcCap read on src.
	Copy(ctx context.Context, t TargetID, dst ObjectID, dstOff uint64, srcT TargetID, src ObjectID, srcOff, n uint64, srcCap []byte) error
}

// ObjectExtender is what storage offers besides StorageService for files
// whose objects are kept as long as their share of the file
// (layout.Layout.ObjectsSized): Extend makes obj at least size bytes long
// (the new bytes a hole) and never shortens it. A missing object is
// created.
type ObjectExtender interface {
	Extend(ctx context.Context, t TargetID, obj ObjectID, size uint64) error
}

// CountingWriter is a StorageService whose writes also answer what
// Allocated would right after them: the bytes the object's allocated
// blocks take once the write is done. A client that wrote every object of
// a file since it last changed them otherwise (truncate, fallocate, copy)
// knows the file's blocks without asking (st_blocks at each flush).
type CountingWriter interface {
	WriteCounting(ctx context.Context, t TargetID, obj ObjectID, off uint64, data []byte) (version, allocated uint64, err error)
}

// AllocatedUnknown is WriteCounting's allocated when the server did not
// count (a storage service without CountingWriter behind the wire).
const AllocatedUnknown = ^uint64(0)

// WriteCounting writes through s's WriteCounting when s is a
// CountingWriter, else through Write with allocated AllocatedUnknown.
func WriteCounting(ctx context.Context, s StorageService, t TargetID, obj ObjectID, off uint64, data []byte) (version, allocated uint64, err error) {
	if cw, ok := s.(CountingWriter); ok {
		return cw.WriteCounting(ctx, t, obj, off, data)
	}
	version, err = s.Write(ctx, t, obj, off, data)
	return version, AllocatedUnknown, err
}

// StaleMarker is what a client asks of the metadata server for protected
// (mirror, EC) files: MarkStale records that the objects in slots of the
// file (of generation gen) missed a write, before the write is
// acknowledged, so that no client reads them until repaired; ClearStale
// records that they were repaired. Both return the file's attributes with
// the new layout. Marking the last readable copies of a stripe fails with
// EIO. ClearStale takes the file's mtime from before the repair copied
// anything and fails with EBUSY if the file changed since or is open for
// writing: the repair may have missed those writes.
type StaleMarker interface {
	MarkStale(ctx context.Context, ino Ino, gen uint64, slots []uint32) (Attr, error)
	ClearStale(ctx context.Context, ino Ino, gen uint64, slots []uint32, mtime int64) (Attr, error)
}

// NoBlocks in WriteDone leaves the file's Attr.Blocks as it is.
const NoBlocks = ^uint64(0)

// SpaceMode is what StorageService.Space does to a range of an object.
type SpaceMode uint8

const (
	// SpaceAllocate reserves the range's blocks (counted as used, so a
	// later write there cannot fail with ENOSPC); the object grows to cover
	// it; blocks that held data keep it, holes read as zeros.
	SpaceAllocate SpaceMode = 1
	// SpacePunch makes the range read as zeros and frees its whole blocks.
	SpacePunch SpaceMode = 2
	// SpaceZero makes the range read as zeros and leaves it allocated
	// (SpacePunch, then SpaceAllocate).
	SpaceZero SpaceMode = 3
)

// SeekWhat says what StorageService.Seek looks for.
type SeekWhat uint8

const (
	SeekData SeekWhat = 1
	SeekHole SeekWhat = 2
)

// TargetRegistry is what a storage server asks of the metadata server.
type TargetRegistry interface {
	// RegisterTarget records a target, or refreshes its address and usage
	// (storage servers call it again as a heartbeat). uuid identifies the
	// target directory and is stored in it; info.ID is 0 on the first
	// registration and the server assigns the id, which the storage server
	// then stores beside the uuid. A known uuid always gets its old id back,
	// and an id that does not belong to the uuid is refused with EINVAL.
	RegisterTarget(ctx context.Context, uuid string, info TargetInfo) (TargetID, error)
}
