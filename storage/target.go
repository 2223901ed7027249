package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/storage/vfs"
)

// MaxObjectSize bounds object sizes and offsets (16 TiB - 4 KiB): the
// largest file ext4 holds with 4 KiB blocks (2^32-1 blocks), so the limit is
// the same on every disk (XFS would allow more) and is ours, not the
// kernel's; a file striped over N targets can still grow to N times that.
// Past it Write and Truncate fail with EFBIG.
const MaxObjectSize = 16<<40 - BlockSize

// DefaultMaxOpen is how many objects a target keeps open (two descriptors
// each) when TargetOptions.MaxOpen is 0.
const DefaultMaxOpen = 128

// lockStripes is the size of the striped lock table.
const lockStripes = 1024

// ErrCorrupt is wrapped (together with syscall.EIO) by errors for data whose
// checksum does not match.
var ErrCorrupt = errors.New("storage: checksum mismatch")

// TargetOptions configures OpenTarget.
type TargetOptions struct {
	FS       vfs.FS // nil = vfs.Default
	Capacity uint64 // byte limit; 0 = the disk's size
	MaxOpen  int    // open objects kept (2 fds each); 0 = DefaultMaxOpen
	Logger   *slog.Logger
}

// Usage is a target's space accounting.
type Usage struct {
	Total, Used, Free uint64
	Objects           int64
	FilesFree         uint64 // inodes the file system has room for (0: not known)
	Device            string // the file system's identity; "" with a capacity of its own
	IO                proto.IOCounters
}

// Target is one storage target: a directory of objects. It is safe for
// concurrent use. See the package documentation for the format.
type Target struct {
	dir      string
	fs       vfs.FS
	capacity uint64
	log      *slog.Logger
	cache    *handleCache
	locks    [lockStripes]sync.RWMutex

	used    atomic.Uint64 // bytes in allocated blocks
	objects atomic.Int64
	// I/O served since the target was opened (Usage), for throughput.
	reads, readBytes, writes, writeBytes atomic.Uint64

	mu    sync.Mutex
	ident identity
	lock  io.Closer // the flock of target.lock, nil once closed

	// written: an object changed since the last background sync
	// (flush.go).
	written atomic.Bool

	// objs: the objects that may have files here (presence.go), filled
	// by scan before the target serves.
	objs objectSet

	fsidChecked atomic.Bool                 // Run checked the file system id with the registry
	newFiles    map[proto.ObjectID]struct{} // created since their fan-out dir was last synced

	// The scrub (scrub.go): its state, what is told of corrupt objects,
	// and requests for a pass now.
	scrubMu   sync.Mutex
	scrub     proto.ScrubTarget
	onCorrupt atomic.Pointer[func(proto.ObjectID)]
	scrubKick chan struct{}
}

// OpenTarget opens (creating if needed) the target in dir. dir's parent must
// exist. Startup reads every object's sidecar header to compute usage.
func OpenTarget(dir string, opts TargetOptions) (*Target, error) {
	fs := opts.FS
	if fs == nil {
		fs = vfs.Default
	}
	if opts.MaxOpen <= 0 {
		opts.MaxOpen = DefaultMaxOpen
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if _, err := fs.Stat(filepath.Dir(filepath.Clean(dir))); err != nil {
		return nil, fmt.Errorf("storage: target %s: parent directory: %w", dir, err)
	}
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("storage: target %s: %w", dir, err)
	}
	lock, err := fs.Lock(filepath.Join(dir, lockFile))
	if errors.Is(err, vfs.ErrLocked) {
		return nil, fmt.Errorf("storage: target %s is in use by another storage server (it holds %s); a target is served by one server at a time: %w", dir, lockFile, err)
	}
	if err != nil {
		return nil, fmt.Errorf("storage: target %s: lock: %w", dir, err)
	}
	ok := false
	defer func() {
		if !ok {
			lock.Close()
		}
	}()
	t := &Target{
		dir:       dir,
		fs:        fs,
		lock:      lock,
		capacity:  opts.Capacity,
		cache:     newHandleCache(opts.MaxOpen),
		newFiles:  make(map[proto.ObjectID]struct{}),
		scrubKick: make(chan struct{}, 1),
	}
	for i := 0; i < 256; i++ {
		if err := fs.MkdirAll(t.fanoutDir(i), 0o755); err != nil {
			return nil, fmt.Errorf("storage: target %s: %w", dir, err)
		}
	}
	if err := syncDir(fs, filepath.Join(dir, "objects")); err != nil {
		return nil, fmt.Errorf("storage: target %s: %w", dir, err)
	}
	id, err := loadIdentity(fs, dir)
	if err != nil {
		return nil, err
	}
	t.ident = id
	t.log = log.With("target", dir, "uuid", id.UUID)
	if err := t.scan(); err != nil {
		return nil, err
	}
	ok = true
	return t, nil
}

// scan computes usage from the sidecar headers of every object, then
// fills the presence filter, sized for the objects it counted, with every
// object that has a file (leftovers of an interrupted creation or removal
// included, so that their removal still finds them): the directories are
// listed a second time, which costs little beside the first pass's read of
// every sidecar.
func (t *Target) scan() error {
	var used uint64
	var objects int64
	for i := 0; i < 256; i++ {
		dir := t.fanoutDir(i)
		names, err := t.fs.ReadDir(dir)
		if err != nil {
			return fmt.Errorf("storage: target %s: scan: %w", t.dir, err)
		}
		have := make(map[string]bool, len(names))
		for _, n := range names {
			have[n] = true
		}
		for _, n := range names {
			base, ok := strings.CutSuffix(n, ".crc")
			if !ok || !have[base] {
				continue
			}
			objects++
			f, err := t.fs.Open(filepath.Join(dir, n))
			if err != nil {
				return fmt.Errorf("storage: target %s: scan: %w", t.dir, err)
			}
			b := make([]byte, headerSize)
			_, rerr := f.ReadAt(b, 0)
			f.Close()
			h, err := decodeHeader(b)
			if rerr != nil && rerr != io.EOF || err != nil {
				// Reported again, as EIO, when the object is used.
				t.log.Error("storage: unreadable sidecar header", "file", filepath.Join(dir, n), "err", errors.Join(rerr, err))
				continue
			}
			used += h.Blocks * BlockSize
		}
	}
	t.used.Store(used)
	t.objects.Store(objects)
	filter := newPresence(int(objects))
	if err := t.listObjects(filter.add); err != nil {
		return err
	}
	t.objs.cur.Store(filter)
	t.objs.list, t.objs.count, t.objs.log = t.listObjects, t.objects.Load, t.logger
	return nil
}

// objectOfFile returns the object a file in a fan-out directory belongs
// to (its data, sidecar or version file), false for other names.
func objectOfFile(name string) (proto.ObjectID, bool) {
	return parseObjName(strings.TrimSuffix(strings.TrimSuffix(name, ".crc"), ".ver"))
}

// listObjects calls add for every object that has a file on the target.
func (t *Target) listObjects(add func(proto.ObjectID)) error {
	for i := 0; i < 256; i++ {
		names, err := t.fs.ReadDir(t.fanoutDir(i))
		if err != nil {
			return fmt.Errorf("storage: target %s: list objects: %w", t.dir, err)
		}
		for _, n := range names {
			if obj, ok := objectOfFile(n); ok {
				add(obj)
			}
		}
	}
	return nil
}

// Dir returns the target's directory.
func (t *Target) Dir() string { return t.dir }

// UUID returns the target's uuid (stored in target.json).
func (t *Target) UUID() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ident.UUID
}

// ID returns the target id assigned by the metadata server, 0 before the
// first registration.
func (t *Target) ID() proto.TargetID {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ident.ID
}

// SetID records the id the metadata server assigned. A target's id never
// changes: setting a different non-zero id fails with EINVAL.
func (t *Target) SetID(id proto.TargetID) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ident.ID == id {
		return nil
	}
	if t.ident.ID != 0 || id == 0 {
		return fmt.Errorf("storage: target %s has id %d, registry says %d: %w", t.dir, t.ident.ID, id, syscall.EINVAL)
	}
	ni := t.ident
	ni.ID = id
	if err := storeIdentity(t.fs, t.dir, ni); err != nil {
		return err
	}
	t.ident = ni
	t.log = t.log.With("id", id)
	return nil
}

func (t *Target) logger() *slog.Logger {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.log
}

// Usage reports the target's capacity and use.
func (t *Target) Usage() (Usage, error) {
	u := Usage{Used: t.used.Load(), Objects: t.objects.Load(), IO: proto.IOCounters{
		Reads: t.reads.Load(), ReadBytes: t.readBytes.Load(), Writes: t.writes.Load(), WriteBytes: t.writeBytes.Load()}}
	if t.capacity > 0 {
		u.Total = t.capacity
		if u.Used < u.Total {
			u.Free = u.Total - u.Used
		}
		return u, nil
	}
	fu, err := t.fs.Statfs(t.dir)
	if err != nil {
		return Usage{}, fmt.Errorf("storage: target %s: %w", t.dir, err)
	}
	u.Total, u.Free, u.FilesFree, u.Device = fu.Total, fu.Free, fu.FilesFree, fu.Device
	return u, nil
}

// Close closes every cached object. Operations still running finish first
// with their own handles.
func (t *Target) Close() error {
	t.cache.closeAll()
	t.mu.Lock()
	lock := t.lock
	t.lock = nil
	t.mu.Unlock()
	if lock != nil {
		return lock.Close()
	}
	return nil
}

// FSID returns the file system id the target was formatted for, "" before
// its first registration.
func (t *Target) FSID() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ident.FSID
}

// CheckFSID makes the target belong to file system fsid: it records fsid
// if the target has none yet, and fails with ErrForeignFS if it has
// another.
func (t *Target) CheckFSID(fsid string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch t.ident.FSID {
	case fsid:
		return nil
	case "":
		ni := t.ident
		ni.FSID = fsid
		if err := storeIdentity(t.fs, t.dir, ni); err != nil {
			return err
		}
		t.ident = ni
		return nil
	}
	return fmt.Errorf("%w: target %s was formatted for file system %s, the metadata server serves %s (point it at its own metadata server, or give it an empty directory)",
		ErrForeignFS, t.dir, t.ident.FSID, fsid)
}

func (t *Target) fanoutDir(i int) string {
	return filepath.Join(t.dir, "objects", fmt.Sprintf("%02x", i))
}

func (t *Target) objPath(obj proto.ObjectID) string {
	return filepath.Join(t.fanoutDir(int(obj.Ino&0xff)), objName(obj))
}

func (t *Target) lockFor(obj proto.ObjectID) *sync.RWMutex {
	h := uint64(obj.Ino)*0x9e3779b97f4a7c15 ^ uint64(obj.Stripe)*0xbf58476d1ce4e5b9 ^ obj.Gen
	return &t.locks[(h>>32)%lockStripes]
}

// corrupt logs and returns an EIO error for a checksum mismatch or an
// unreadable sidecar, and reports the object to the corrupt hook (so the
// metadata service has it repaired, scrub.go).
func (t *Target) corrupt(obj proto.ObjectID, off uint64, why string) error {
	t.logger().Error("storage: corrupt object", "object", objName(obj), "offset", off, "reason", why)
	t.noteCorrupt(obj)
	return fmt.Errorf("storage: target %s object %s offset %d: %s: %w (%w)", t.dir, objName(obj), off, why, ErrCorrupt, syscall.EIO)
}

// objName is an object's file name: <ino>.<stripe> for generation 0 (files
// created before generations, so their objects stay where they are), and
// <ino>.<gen in hex>.<stripe> otherwise.
func objName(obj proto.ObjectID) string {
	ino := strconv.FormatUint(uint64(obj.Ino), 10)
	stripe := strconv.FormatUint(uint64(obj.Stripe), 10)
	if obj.Gen == 0 {
		return ino + "." + stripe
	}
	return ino + "." + strconv.FormatUint(obj.Gen, 16) + "." + stripe
}

// errMissing is returned by acquire when the object does not exist.
var errMissing = errors.New("storage: no such object")

// viewObject runs f with obj's open handle under the object's read lock:
// the prologue of every call that reads an object without changing it. A
// missing object fails with errMissing (f is not called), which callers
// turn into their own answer for it.
func (t *Target) viewObject(obj proto.ObjectID, f func(h *handle) error) error {
	l := t.lockFor(obj)
	l.RLock()
	defer l.RUnlock()
	h, err := t.acquire(obj, false)
	if err != nil {
		return err
	}
	defer t.cache.release(h)
	return f(h)
}

// acquire returns obj's handle, opening it if needed. The caller holds the
// object's lock (exclusively if create is set). Without create a missing
// object gives errMissing.
func (t *Target) acquire(obj proto.ObjectID, create bool) (*handle, error) {
	if h := t.cache.get(obj); h != nil {
		return h, nil
	}
	if !create && !t.objs.mayHold(obj) {
		return nil, errMissing
	}
	h, err := t.openHandle(obj, create)
	if err != nil {
		return nil, err
	}
	return t.cache.put(h), nil
}

func (t *Target) openHandle(obj proto.ObjectID, create bool) (*handle, error) {
	path := t.objPath(obj)
	data, err := t.fs.OpenFile(path, os.O_RDWR, 0)
	created := false
	if errors.Is(err, os.ErrNotExist) {
		if !create {
			return nil, errMissing
		}
		// In the presence filter before any of its files exists.
		done := t.objs.creatingObject(obj)
		// Sidecar first: a data file never exists without its sidecar
		// (except empty, see below), so data is always checkable.
		var crc vfs.File
		crc, err = t.fs.OpenFile(path+".crc", os.O_RDWR|os.O_CREATE, 0o644)
		if err == nil {
			crc.Close()
			data, err = t.fs.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
			created = err == nil
		}
		done()
	}
	if err != nil {
		return nil, fmt.Errorf("storage: target %s object %s: %w", t.dir, objName(obj), err)
	}
	h, err := t.initHandle(obj, path, data)
	if err != nil {
		data.Close()
		return nil, err
	}
	if created {
		t.objects.Add(1)
		t.mu.Lock()
		t.newFiles[obj] = struct{}{}
		t.mu.Unlock()
	}
	return h, nil
}

// initHandle opens the sidecar of an open data file and reads the state.
func (t *Target) initHandle(obj proto.ObjectID, path string, data vfs.File) (*handle, error) {
	fi, err := data.Stat()
	if err != nil {
		return nil, fmt.Errorf("storage: target %s object %s: %w", t.dir, objName(obj), err)
	}
	size := uint64(fi.Size())
	crcFlags := os.O_RDWR
	if size == 0 {
		// An empty data file may lack a sidecar (crash while creating, or
		// a data file created by hand): there is nothing to check yet.
		crcFlags |= os.O_CREATE
	}
	crc, err := t.fs.OpenFile(path+".crc", crcFlags, 0o644)
	if errors.Is(err, os.ErrNotExist) {
		return nil, t.corrupt(obj, 0, "sidecar missing")
	}
	if err != nil {
		return nil, fmt.Errorf("storage: target %s object %s: %w", t.dir, objName(obj), err)
	}
	h := &handle{obj: obj, data: data, crc: crc, size: size}
	if err := t.loadSidecar(h); err != nil {
		crc.Close()
		return nil, err
	}
	if h.ver, err = t.openVer(obj, path); err != nil {
		crc.Close()
		return nil, err
	}
	return h, nil
}

func (t *Target) loadSidecar(h *handle) error {
	fi, err := h.crc.Stat()
	if err != nil {
		return fmt.Errorf("storage: target %s object %s: %w", t.dir, objName(h.obj), err)
	}
	crcLen := fi.Size()
	if crcLen < headerSize {
		if h.size != 0 {
			return t.corrupt(h.obj, 0, fmt.Sprintf("sidecar of %d bytes for %d bytes of data", crcLen, h.size))
		}
		// A new object: write its header.
		h.hdr = header{}
		if _, err := h.crc.WriteAt(h.hdr.encode(), 0); err != nil {
			return fmt.Errorf("storage: target %s object %s: %w", t.dir, objName(h.obj), err)
		}
		return nil
	}
	b := make([]byte, headerSize)
	if _, err := h.crc.ReadAt(b, 0); err != nil {
		return fmt.Errorf("storage: target %s object %s: %w", t.dir, objName(h.obj), err)
	}
	h.hdr, err = decodeHeader(b)
	if err != nil {
		return t.corrupt(h.obj, 0, err.Error())
	}
	// Entries past the data's last block are left by a truncate interrupted
	// between the data and the sidecar; drop them so that a later extension
	// sees holes there.
	if want := entryOff(blocksFor(h.size)); crcLen > want {
		t.logger().Warn("storage: trimming stale checksum entries", "object", objName(h.obj), "sidecar", crcLen, "want", want)
		if err := h.crc.Truncate(want); err != nil {
			return fmt.Errorf("storage: target %s object %s: %w", t.dir, objName(h.obj), err)
		}
	}
	return nil
}

// readEntries returns the entries of blocks [b0, b1). Entries past the end of
// the sidecar are holes.
func (t *Target) readEntries(h *handle, b0, b1 uint64) ([]entry, error) {
	buf := make([]byte, (b1-b0)*entrySize)
	if err := t.readEntryBytes(h, b0, buf); err != nil {
		return nil, err
	}
	es := make([]entry, b1-b0)
	decodeEntries(buf, es)
	return es, nil
}

// readEntryBytes reads the sidecar's entries of the len(buf)/entrySize
// blocks from b0 into buf, as stored; entries past the sidecar's end are
// holes (zeros).
func (t *Target) readEntryBytes(h *handle, b0 uint64, buf []byte) error {
	n, err := h.crc.ReadAt(buf, entryOff(b0))
	if err != nil && err != io.EOF {
		return fmt.Errorf("storage: target %s object %s: read checksums: %w", t.dir, objName(h.obj), err)
	}
	clear(buf[n:])
	return nil
}

// readBlock reads block blk of the object into buf (BlockSize bytes), with
// zeros past the end of the data.
func (t *Target) readBlock(h *handle, blk uint64, buf []byte) error {
	start := blk * BlockSize
	buf = buf[:BlockSize]
	clear(buf)
	if start >= h.size {
		return nil
	}
	want := min(uint64(BlockSize), h.size-start)
	n, err := h.data.ReadAt(buf[:want], int64(start))
	if uint64(n) < want {
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("storage: target %s object %s: read at %d: %w", t.dir, objName(h.obj), start, err)
	}
	return nil
}

// checkCtx fails an operation whose ctx has ended before it started, with
// the errnos the transport uses: ETIMEDOUT past a deadline, EINTR when
// cancelled.
func checkCtx(ctx context.Context) error {
	err := ctx.Err()
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("storage: %w (%w)", err, syscall.ETIMEDOUT)
	default:
		return fmt.Errorf("storage: %w (%w)", err, syscall.EINTR)
	}
}

// Read reads up to len(p) bytes of obj at off. Past the end of the object
// it returns fewer bytes (0 for a missing object). Every block read is
// checked against its CRC; a mismatch fails the whole read with EIO.
func (t *Target) Read(ctx context.Context, obj proto.ObjectID, off uint64, p []byte) (int, error) {
	n, err := t.read(ctx, obj, off, p)
	if err == nil && n > 0 {
		t.reads.Add(1)
		t.readBytes.Add(uint64(n))
	}
	return n, err
}

// read is Read without counting the read in the target's I/O (the
// scrub's reads are not clients').
func (t *Target) read(ctx context.Context, obj proto.ObjectID, off uint64, p []byte) (int, error) {
	if err := checkCtx(ctx); err != nil {
		return 0, err
	}
	if len(p) == 0 || off >= MaxObjectSize {
		return 0, nil
	}
	var n int
	err := t.viewObject(obj, func(h *handle) (err error) {
		n, err = t.readHandle(h, obj, off, p)
		return err
	})
	if errors.Is(err, errMissing) {
		return 0, nil
	}
	return n, err
}

// readHandle is Read of an acquired handle, under the object's lock.
func (t *Target) readHandle(h *handle, obj proto.ObjectID, off uint64, p []byte) (int, error) {
	if off >= h.size || len(p) == 0 {
		return 0, nil
	}
	n := min(uint64(len(p)), h.size-off)
	end := off + n
	b0, b1 := off/BlockSize, blocksFor(end)
	es, err := t.readEntries(h, b0, b1)
	if err != nil {
		return 0, err
	}
	spanEnd := min(b1*BlockSize, h.size)
	var span []byte // the bytes of blocks [b0, b1) that exist in the file
	if off%BlockSize == 0 && end == spanEnd {
		span = p[:n] // aligned: read straight into the caller's buffer
	} else {
		span = make([]byte, spanEnd-b0*BlockSize)
	}
	got, err := h.data.ReadAt(span, int64(b0*BlockSize))
	if got < len(span) {
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, fmt.Errorf("storage: target %s object %s: read at %d: %w", t.dir, objName(obj), off, err)
	}
	for i, e := range es {
		blk := span[uint64(i)*BlockSize : min(uint64(i+1)*BlockSize, uint64(len(span)))]
		if _, ok := e.match(blockCRC(blk)); !ok {
			return 0, t.corrupt(obj, (b0+uint64(i))*BlockSize, "checksum mismatch")
		}
	}
	if &span[0] != &p[0] {
		copy(p, span[off-b0*BlockSize:])
	}
	return int(n), nil
}

// Write stores data at off in obj, creating the object if needed, and
// returns the object's new version. It fails with ENOSPC, changing nothing,
// if the blocks it newly allocates would take the target over its capacity.
//
// Order of updates (see the package documentation for why): checksum entries
// {new, old}, then the data, then the entries collapsed to {new, new}, then
// the header (version, allocated blocks).
func (t *Target) Write(ctx context.Context, obj proto.ObjectID, off uint64, data []byte) (uint64, error) {
	version, _, err := t.WriteCounting(ctx, obj, off, data)
	return version, err
}

// WriteCounting is Write that also returns what Allocated would answer
// right after it (proto.CountingWriter): the bytes the object's allocated
// blocks take, counted under the same lock as the write.
func (t *Target) WriteCounting(ctx context.Context, obj proto.ObjectID, off uint64, data []byte) (version, allocated uint64, err error) {
	if err := checkCtx(ctx); err != nil {
		return 0, 0, err
	}
	end := off + uint64(len(data))
	if off >= MaxObjectSize || end > MaxObjectSize {
		return 0, 0, fmt.Errorf("storage: write at %d+%d past the object size limit: %w", off, len(data), syscall.EFBIG)
	}
	l := t.lockFor(obj)
	l.Lock()
	defer l.Unlock()
	version, blocks, err := t.write(ctx, obj, off, data, nil)
	return version, blocks * BlockSize, err
}

// write is Write (w nil) or WriteRow under the object's exclusive lock.
// The version file's entries (version.go) go dirty before the data is
// touched and clean after the sidecar's header. It returns the object's
// version and its allocated blocks (Allocated's count) after the write.
func (t *Target) write(ctx context.Context, obj proto.ObjectID, off uint64, data []byte, w *proto.RowWrite) (version, blocks uint64, err error) {
	t.markWritten()
	end := off + uint64(len(data))
	if len(data) == 0 && w == nil {
		h, err := t.acquire(obj, false)
		if errors.Is(err, errMissing) {
			return 0, 0, nil
		}
		if err != nil {
			return 0, 0, err
		}
		defer t.cache.release(h)
		return h.hdr.Version, h.hdr.Blocks, nil
	}
	h, err := t.acquire(obj, true)
	if err != nil {
		return 0, 0, err
	}
	defer t.cache.release(h)
	if err := t.checkFence(ctx, h); err != nil {
		return 0, 0, err
	}
	uu, err := t.planUnits(h, off, end, w)
	if err != nil {
		return 0, 0, err
	}
	if len(data) == 0 { // a versioned write of no bytes: only the version changes
		if err := t.doneUnits(h, uu); err != nil {
			return 0, 0, err
		}
		return h.hdr.Version, h.hdr.Blocks, nil
	}

	b0, b1 := off/BlockSize, blocksFor(end)
	old, err := t.readEntries(h, b0, b1)
	if err != nil {
		return 0, 0, err
	}
	next := make([]entry, len(old))
	var newBlocks uint64
	var buf []byte
	for i := range old {
		blk := b0 + uint64(i)
		bs, be := blk*BlockSize, (blk+1)*BlockSize
		if bs >= h.size {
			old[i] = entry{} // past the end: zeros on disk, whatever the sidecar says
		}
		if !old[i].allocated() {
			newBlocks++
		}
		lo, hi := max(off, bs), min(end, be)
		full := lo == bs && hi == be
		onDisk := old[i].Cur // the CRC the data on disk matches
		switch {
		case full && old[i].Cur == old[i].Prev:
			// Steady state: the data matches Cur.
		case full && bs < h.size:
			// A write was interrupted here: find out which CRC holds. The
			// block is replaced entirely, so a mismatch is only logged.
			if buf == nil {
				buf = make([]byte, BlockSize)
			}
			if err := t.readBlock(h, blk, buf); err != nil {
				return 0, 0, err
			}
			if v, ok := old[i].match(blockCRC(buf)); ok {
				onDisk = v
			} else {
				t.logger().Warn("storage: overwriting a corrupt block", "object", objName(obj), "offset", bs)
			}
		case !full:
			// Read-modify-write of an edge block: verify what is there,
			// then compute the CRC of the merged block.
			if buf == nil {
				buf = make([]byte, BlockSize)
			}
			if err := t.readBlock(h, blk, buf); err != nil {
				return 0, 0, err
			}
			v, ok := old[i].match(blockCRC(buf))
			if !ok {
				return 0, 0, t.corrupt(obj, bs, "checksum mismatch")
			}
			onDisk = v
			copy(buf[lo-bs:], data[lo-off:hi-off])
			// Bytes past the new end of the object stay zero: they were
			// past the old end too, and readBlock zeroed them.
			next[i] = entry{Cur: blockCRC(buf[:min(uint64(BlockSize), max(h.size, end)-bs)]), Prev: onDisk}
			continue
		}
		next[i] = entry{Cur: blockCRC(data[bs-off : be-off]), Prev: onDisk}
	}

	if err := t.reserve(newBlocks * BlockSize); err != nil {
		return 0, 0, err
	}
	// On a failed update the entries stay {new, old}: whichever of the two
	// the data holds (a partial write may leave some blocks of each) checks.
	// The handle is dropped because its cached size may be stale.
	fail := func(err error, release bool) (uint64, uint64, error) {
		if release {
			t.used.Add(-newBlocks * BlockSize)
		}
		t.cache.drop(obj)
		return 0, 0, fmt.Errorf("storage: target %s object %s: write at %d: %w", t.dir, objName(obj), off, err)
	}
	if err := t.beginUnits(h, uu); err != nil {
		return fail(err, true)
	}
	raw := encodeEntries(make([]byte, 0, len(next)*entrySize), next)
	if _, err := h.crc.WriteAt(raw, entryOff(b0)); err != nil {
		return fail(err, true)
	}
	if _, err := h.data.WriteAt(data, int64(off)); err != nil {
		return fail(err, true)
	}
	for i := range next {
		next[i].Prev = next[i].Cur
	}
	raw = encodeEntries(raw[:0], next)
	if _, err := h.crc.WriteAt(raw, entryOff(b0)); err != nil {
		return fail(err, false)
	}
	nh := header{Version: h.hdr.Version + 1, Blocks: h.hdr.Blocks + newBlocks}
	if _, err := h.crc.WriteAt(nh.encode(), 0); err != nil {
		return fail(err, false)
	}
	h.hdr = nh
	h.size = max(h.size, end)
	if err := t.doneUnits(h, uu); err != nil {
		return fail(err, false)
	}
	t.writes.Add(1)
	t.writeBytes.Add(uint64(len(data)))
	return nh.Version, nh.Blocks, nil
}

// reserve accounts n more used bytes, or fails with ENOSPC if that would
// exceed the capacity.
func (t *Target) reserve(n uint64) error {
	if n == 0 {
		return nil
	}
	for {
		u := t.used.Load()
		if t.capacity > 0 && u+n > t.capacity {
			return fmt.Errorf("storage: target %s: %d more bytes would exceed capacity %d (used %d): %w", t.dir, n, t.capacity, u, syscall.ENOSPC)
		}
		if t.used.CompareAndSwap(u, u+n) {
			return nil
		}
	}
}

// Truncate sets obj's size. Growing leaves a hole (reads as zeros, takes no
// space). Truncating a missing object to 0 does nothing; to a larger size it
// creates the object. The object's version is increased.
func (t *Target) Truncate(ctx context.Context, obj proto.ObjectID, size uint64) error {
	return t.resize(ctx, obj, size, false)
}

// Extend makes obj at least size bytes long, the new bytes a hole, and
// never shortens it: a client that recorded a larger file size makes every
// object as long as its share (so a shortened object shows as lost data),
// without cutting what a concurrent writer on another mount wrote past it.
// A missing object is created.
func (t *Target) Extend(ctx context.Context, obj proto.ObjectID, size uint64) error {
	return t.resize(ctx, obj, size, true)
}

func (t *Target) resize(ctx context.Context, obj proto.ObjectID, size uint64, growOnly bool) error {
	t.markWritten()
	if err := checkCtx(ctx); err != nil {
		return err
	}
	if size > MaxObjectSize {
		return fmt.Errorf("storage: truncate to %d past the object size limit: %w", size, syscall.EFBIG)
	}
	l := t.lockFor(obj)
	l.Lock()
	defer l.Unlock()
	h, err := t.acquire(obj, size > 0)
	if errors.Is(err, errMissing) {
		return nil
	}
	if err != nil {
		return err
	}
	defer t.cache.release(h)
	if size == h.size || (growOnly && size < h.size) {
		return nil
	}
	if err := t.checkFence(ctx, h); err != nil {
		return err
	}
	wrap := func(err error) error {
		t.cache.drop(obj)
		return fmt.Errorf("storage: target %s object %s: truncate to %d: %w", t.dir, objName(obj), size, err)
	}
	nh := header{Version: h.hdr.Version + 1, Blocks: h.hdr.Blocks}
	if size > h.size {
		// The old tail block's bytes past the old end were zero in its CRC
		// and are zero in the file now: its entry stays right.
		if err := h.data.Truncate(int64(size)); err != nil {
			return wrap(err)
		}
	} else {
		nbNew := blocksFor(size)
		// Cut-off blocks that hold data give back their space. Counting
		// them reads only the sidecar's data extents, so a truncate costs
		// time in proportion to the data there is, not to the sizes.
		freed := h.hdr.Blocks // every allocated block, by the header's invariant
		if nbNew > 0 {
			freed, err = t.countAllocated(h, nbNew)
			if err != nil {
				return wrap(err)
			}
		}
		uu, err := t.truncateUnits(h, size)
		if err != nil {
			return wrap(err)
		}
		// A new partial tail block: its bytes past size become zeros.
		var tail []entry
		tailBlk := size / BlockSize
		es, err := t.readEntries(h, tailBlk, tailBlk+1)
		if err != nil {
			return wrap(err)
		}
		if size%BlockSize != 0 && es[0].allocated() { // a hole stays a hole
			buf := make([]byte, BlockSize)
			if err := t.readBlock(h, tailBlk, buf); err != nil {
				return wrap(err)
			}
			v, ok := es[0].match(blockCRC(buf))
			if !ok {
				return t.corrupt(obj, tailBlk*BlockSize, "checksum mismatch")
			}
			tail = []entry{{Cur: blockCRC(buf[:size%BlockSize]), Prev: v}}
			if _, err := h.crc.WriteAt(encodeEntries(nil, tail), entryOff(tailBlk)); err != nil {
				return wrap(err)
			}
		}
		// Data before sidecar: entries past the end are trimmed when the
		// object is next opened if we stop in between.
		if err := h.data.Truncate(int64(size)); err != nil {
			return wrap(err)
		}
		if err := h.crc.Truncate(entryOff(nbNew)); err != nil {
			return wrap(err)
		}
		if tail != nil {
			tail[0].Prev = tail[0].Cur
			if _, err := h.crc.WriteAt(encodeEntries(nil, tail), entryOff(tailBlk)); err != nil {
				return wrap(err)
			}
		}
		nh.Blocks -= min(freed, nh.Blocks)
		t.used.Add(-freed * BlockSize)
		if err := t.finishTruncateUnits(h, uu, size); err != nil {
			return wrap(err)
		}
	}
	h.size = size
	if _, err := h.crc.WriteAt(nh.encode(), 0); err != nil {
		return wrap(err)
	}
	h.hdr = nh
	return nil
}

// countAllocated counts the allocated entries of blocks from b0 on. It
// reads only the ranges of the sidecar that hold data (vfs.NextData):
// entries in its holes, and past its end, are holes of the object.
func (t *Target) countAllocated(h *handle, b0 uint64) (uint64, error) {
	const chunk = 64 << 10 // entries read at once
	var n uint64
	off := entryOff(b0)
	for {
		start, end, err := vfs.NextData(h.crc, off)
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return 0, fmt.Errorf("read checksums: %w", err)
		}
		// The entries overlapping [start, end), from b0 on.
		first := b0
		if start > entryOff(b0) {
			first = uint64(start-headerSize) / entrySize
		}
		last := (uint64(end-headerSize) + entrySize - 1) / entrySize
		for b := first; b < last; b += chunk {
			es, err := t.readEntries(h, b, min(b+chunk, last))
			if err != nil {
				return 0, err
			}
			for _, e := range es {
				if e.allocated() {
					n++
				}
			}
		}
		off = max(end, entryOff(last))
	}
}

// Sync makes every acknowledged write to obj durable: it fsyncs the data
// file, the sidecar and, for an object created since, its directory.
func (t *Target) Sync(ctx context.Context, obj proto.ObjectID) error {
	if err := checkCtx(ctx); err != nil {
		return err
	}
	err := t.viewObject(obj, func(h *handle) error {
		if err := h.data.Sync(); err != nil {
			return fmt.Errorf("storage: target %s object %s: sync: %w", t.dir, objName(obj), err)
		}
		if err := h.crc.Sync(); err != nil {
			return fmt.Errorf("storage: target %s object %s: sync: %w", t.dir, objName(obj), err)
		}
		if err := t.syncVer(h); err != nil {
			return fmt.Errorf("storage: target %s object %s: sync versions: %w", t.dir, objName(obj), err)
		}
		t.mu.Lock()
		_, isNew := t.newFiles[obj]
		t.mu.Unlock()
		if isNew {
			if err := syncDir(t.fs, filepath.Dir(t.objPath(obj))); err != nil {
				return fmt.Errorf("storage: target %s object %s: sync directory: %w", t.dir, objName(obj), err)
			}
			t.mu.Lock()
			delete(t.newFiles, obj)
			t.mu.Unlock()
		}
		return nil
	})
	if errors.Is(err, errMissing) {
		return nil
	}
	return err
}

// Remove deletes obj (version file, data file, then sidecar). A missing
// object is not an error, and costs little: the objects of files never
// written (mdtest-easy's empty files) were never made, yet every unlink
// queues their removal. Only a removal that removed a file marks the
// target for the background sync.
func (t *Target) Remove(ctx context.Context, obj proto.ObjectID) error {
	if err := checkCtx(ctx); err != nil {
		return err
	}
	l := t.lockFor(obj)
	l.Lock()
	defer l.Unlock()
	if !t.objs.mayHold(obj) {
		// No file of it was ever made here (or found at open): nothing
		// to remove, and no system call to learn it.
		return nil
	}
	var blocks uint64
	exists, dataMissing := false, false
	if h, err := t.acquire(obj, false); err == nil {
		blocks, exists = h.hdr.Blocks, true
		t.cache.release(h)
	} else if errors.Is(err, errMissing) {
		// No data file (acquire opened its path, under this lock: none
		// can appear meanwhile). A sidecar or version file may still be
		// left by a creation or removal a kill interrupted.
		dataMissing = true
	} else {
		// Unreadable sidecar: remove anyway; its blocks were not counted.
		t.logger().Warn("storage: removing an unreadable object", "object", objName(obj), "err", err)
		exists = true
	}
	t.cache.drop(obj)
	path := t.objPath(obj)
	remove := func(name string) error {
		err := t.fs.Remove(name)
		if err == nil {
			t.markWritten()
			return nil
		}
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("storage: target %s object %s: remove: %w", t.dir, objName(obj), err)
	}
	// The version file first: one left behind (a kill in between) would
	// give a new object of the same name the old tags and fence.
	if err := remove(path + ".ver"); err != nil {
		return err
	}
	if !dataMissing {
		if err := remove(path); err != nil {
			return err
		}
	}
	if err := remove(path + ".crc"); err != nil {
		return err
	}
	if exists {
		t.used.Add(-blocks * BlockSize)
		t.objects.Add(-1)
	}
	t.mu.Lock()
	delete(t.newFiles, obj)
	t.mu.Unlock()
	return nil
}
