package storage

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"syscall"
	"time"

	"github.com/weft-fs/weft/capability"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/storage/vfs"
)

// Version file of an object, <object>.ver (all integers little-endian):
//
//	offset 0   magic      u32  "WFTV"
//	offset 4   format     u32  verFormat
//	offset 8   unit       u64  bytes per versioned unit (0: not set yet)
//	offset 16  fence      i64  writes with a capability issued before this
//	                           (Unix ns, by the issuer's clock) are refused
//	offset 24  reserved   u32  zero
//	offset 28  headerCRC  u32  CRC32C of bytes 0..28
//	offset 32  entries: unit u at 32+16*u: cur u64, prev u64
//
// An entry is a unit's version tag as {cur, prev} like a block's CRCs in
// the sidecar: cur != prev while a write of the unit is in flight (or was
// interrupted), which reads as RowVersion.Dirty. Entries past the end of
// the file are {0, 0}: tag 0, clean.
const (
	verMagic      = 0x56544657 // "WFTV" read as little-endian
	verFormat     = 1
	verHeaderSize = 32
	verEntrySize  = 16
)

// ErrConflict is wrapped (with syscall.EAGAIN) by a conditional write
// whose unit's version was not the one expected; it changed nothing.
var ErrConflict = errors.New("storage: row version conflict")

// ErrFenced is wrapped (with syscall.EACCES, so a client renews its
// capability and tries once more) by a write whose capability was issued
// before the object's fence: a write delayed from before a repair.
var ErrFenced = errors.New("storage: write from before the object's fence")

type verHeader struct {
	Unit  uint64
	Fence int64
}

func (h verHeader) encode() []byte {
	b := make([]byte, verHeaderSize)
	binary.LittleEndian.PutUint32(b[0:], verMagic)
	binary.LittleEndian.PutUint32(b[4:], verFormat)
	binary.LittleEndian.PutUint64(b[8:], h.Unit)
	binary.LittleEndian.PutUint64(b[16:], uint64(h.Fence))
	binary.LittleEndian.PutUint32(b[28:], crc32.Checksum(b[:28], castagnoli))
	return b
}

// decodeVerHeader parses a version file header. It never panics.
func decodeVerHeader(b []byte) (verHeader, error) {
	if len(b) < verHeaderSize {
		return verHeader{}, fmt.Errorf("%w: version header of %d bytes", errBadSidecar, len(b))
	}
	if m := binary.LittleEndian.Uint32(b[0:]); m != verMagic {
		return verHeader{}, fmt.Errorf("%w: version file magic %#x", errBadSidecar, m)
	}
	if f := binary.LittleEndian.Uint32(b[4:]); f != verFormat {
		return verHeader{}, fmt.Errorf("%w: version file format %d (want %d)", errBadSidecar, f, verFormat)
	}
	if got, want := crc32.Checksum(b[:28], castagnoli), binary.LittleEndian.Uint32(b[28:]); got != want {
		return verHeader{}, fmt.Errorf("%w: version header checksum %#x, stored %#x", errBadSidecar, got, want)
	}
	return verHeader{Unit: binary.LittleEndian.Uint64(b[8:]), Fence: int64(binary.LittleEndian.Uint64(b[16:]))}, nil
}

// verEntry is one unit's tag, {cur, prev}.
type verEntry struct{ Cur, Prev uint64 }

func (e verEntry) version() proto.RowVersion {
	return proto.RowVersion{Tag: e.Cur, Dirty: e.Cur != e.Prev}
}

// inFlight is the entry a write setting tag writes before it touches the
// data: dirty until done writes {tag, tag}.
func (e verEntry) inFlight(tag uint64) verEntry {
	if e.Cur == tag {
		return verEntry{Cur: tag, Prev: ^tag}
	}
	return verEntry{Cur: tag, Prev: e.Cur}
}

func verEntryOff(u uint64) int64 { return verHeaderSize + int64(u)*verEntrySize }

// verFile is an open version file and its header.
type verFile struct {
	f   vfs.File
	hdr verHeader
}

// openVer opens obj's version file if it has one (nil if not). The caller
// holds the object's lock.
func (t *Target) openVer(obj proto.ObjectID, path string) (*verFile, error) {
	f, err := t.fs.OpenFile(path+".ver", os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("storage: target %s object %s: %w", t.dir, objName(obj), err)
	}
	b := make([]byte, verHeaderSize)
	n, rerr := f.ReadAt(b, 0)
	if n == 0 && (rerr == nil || rerr == io.EOF) {
		// Created, killed before its header: nothing was versioned yet.
		if _, err := f.WriteAt(verHeader{}.encode(), 0); err != nil {
			f.Close()
			return nil, fmt.Errorf("storage: target %s object %s: %w", t.dir, objName(obj), err)
		}
		return &verFile{f: f}, nil
	}
	hdr, err := decodeVerHeader(b[:n])
	if err != nil {
		f.Close()
		return nil, t.corrupt(obj, 0, err.Error())
	}
	return &verFile{f: f, hdr: hdr}, nil
}

// ensureVer gives h a version file with units of unit bytes. The caller
// holds the object's lock exclusively. A version file set to another unit
// size fails with EINVAL.
func (t *Target) ensureVer(h *handle, unit uint64) error {
	if unit == 0 {
		return fmt.Errorf("storage: versioned unit of 0 bytes: %w", syscall.EINVAL)
	}
	if h.ver == nil {
		f, err := t.fs.OpenFile(t.objPath(h.obj)+".ver", os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return fmt.Errorf("storage: target %s object %s: %w", t.dir, objName(h.obj), err)
		}
		h.ver = &verFile{f: f}
	}
	switch h.ver.hdr.Unit {
	case unit:
		return nil
	case 0:
		nh := h.ver.hdr
		nh.Unit = unit
		return t.writeVerHeader(h, nh)
	}
	return fmt.Errorf("storage: target %s object %s: versioned in units of %d bytes, asked for %d: %w",
		t.dir, objName(h.obj), h.ver.hdr.Unit, unit, syscall.EINVAL)
}

func (t *Target) writeVerHeader(h *handle, nh verHeader) error {
	if _, err := h.ver.f.WriteAt(nh.encode(), 0); err != nil {
		return fmt.Errorf("storage: target %s object %s: version header: %w", t.dir, objName(h.obj), err)
	}
	h.ver.hdr = nh
	return nil
}

// readVer returns the entries of units [u0, u1).
func (t *Target) readVer(h *handle, u0, u1 uint64) ([]verEntry, error) {
	es := make([]verEntry, u1-u0)
	if h.ver == nil {
		return es, nil
	}
	b := make([]byte, len(es)*verEntrySize)
	n, err := h.ver.f.ReadAt(b, verEntryOff(u0))
	if err != nil && err != io.EOF {
		return nil, fmt.Errorf("storage: target %s object %s: read versions: %w", t.dir, objName(h.obj), err)
	}
	clear(b[n:])
	for i := range es {
		es[i] = verEntry{Cur: binary.LittleEndian.Uint64(b[16*i:]), Prev: binary.LittleEndian.Uint64(b[16*i+8:])}
	}
	return es, nil
}

func (t *Target) writeVer(h *handle, u0 uint64, es []verEntry) error {
	b := make([]byte, 0, len(es)*verEntrySize)
	for _, e := range es {
		b = binary.LittleEndian.AppendUint64(b, e.Cur)
		b = binary.LittleEndian.AppendUint64(b, e.Prev)
	}
	if _, err := h.ver.f.WriteAt(b, verEntryOff(u0)); err != nil {
		return fmt.Errorf("storage: target %s object %s: write versions: %w", t.dir, objName(h.obj), err)
	}
	return nil
}

// freshTag is the tag of a unit changed by an unversioned write, truncate
// or repair: it matches no version a conditional writer read before.
func freshTag() uint64 { return rand.Uint64() | 1 }

// checkFence refuses a write to h whose capability (in ctx) was issued
// before the object's fence. Requests without a capability come from
// servers or in-process callers, which the handler trusts.
func (t *Target) checkFence(ctx context.Context, h *handle) error {
	if h.ver == nil || h.ver.hdr.Fence == 0 {
		return nil
	}
	var issued time.Time
	if f, ok := ctx.Value(rebuildFenceKey{}).(int64); ok {
		// A rebuild, as of the fence the metadata service set for it.
		issued = time.Unix(0, f)
	} else if c := proto.CapabilityFrom(ctx); c != nil {
		cp, err := capability.Parse(c)
		if err != nil {
			return fmt.Errorf("storage: target %s object %s: %w (%w)", t.dir, objName(h.obj), err, syscall.EACCES)
		}
		issued = cp.Issued
	} else {
		return nil
	}
	if issued.UnixNano() < h.ver.hdr.Fence {
		t.logger().Warn("storage: refused a write from before the object's fence", "object", objName(h.obj),
			"issued", issued, "fence", time.Unix(0, h.ver.hdr.Fence))
		return fmt.Errorf("storage: target %s object %s: capability issued %v, fence %v: %w (%w)",
			t.dir, objName(h.obj), issued, time.Unix(0, h.ver.hdr.Fence), ErrFenced, syscall.EACCES)
	}
	return nil
}

// rebuildFenceKey carries, in the context of a rebuild's writes, the
// fence the metadata service set before it (proto.RebuildRequest.Fence):
// the writes are refused once the object was fenced later, as a client's
// write with a capability issued at that time would be.
type rebuildFenceKey struct{}

// withRebuildFence returns ctx for the writes of a rebuild fenced at
// fence (Unix ns; 0: not fenced, ctx unchanged).
func withRebuildFence(ctx context.Context, fence int64) context.Context {
	if fence == 0 {
		return ctx
	}
	return context.WithValue(ctx, rebuildFenceKey{}, fence)
}

// ReadRow reads up to len(p) bytes of obj at off, all in one unit of unit
// bytes, and returns the unit's version with them (read under the
// object's lock, so the bytes are those of that version unless it is
// dirty). A missing object reads as empty, version 0.
func (t *Target) ReadRow(ctx context.Context, obj proto.ObjectID, off, unit uint64, p []byte) (int, proto.RowVersion, error) {
	if err := checkCtx(ctx); err != nil {
		return 0, proto.RowVersion{}, err
	}
	if err := checkUnit(off, uint64(len(p)), unit); err != nil {
		return 0, proto.RowVersion{}, err
	}
	l := t.lockFor(obj)
	l.RLock()
	defer l.RUnlock()
	h, err := t.acquire(obj, false)
	if errors.Is(err, errMissing) {
		return 0, proto.RowVersion{}, nil
	}
	if err != nil {
		return 0, proto.RowVersion{}, err
	}
	defer t.cache.release(h)
	var v proto.RowVersion
	if h.ver != nil && h.ver.hdr.Unit != 0 {
		if h.ver.hdr.Unit != unit {
			return 0, v, fmt.Errorf("storage: target %s object %s: versioned in units of %d bytes, asked for %d: %w",
				t.dir, objName(obj), h.ver.hdr.Unit, unit, syscall.EINVAL)
		}
		es, err := t.readVer(h, off/unit, off/unit+1)
		if err != nil {
			return 0, v, err
		}
		v = es[0].version()
	}
	n, err := t.readHandle(h, obj, off, p)
	if err == nil && n > 0 {
		t.reads.Add(1)
		t.readBytes.Add(uint64(n))
	}
	return n, v, err
}

// checkUnit checks that [off, off+n) lies in one unit of unit bytes.
func checkUnit(off, n, unit uint64) error {
	if unit == 0 || unit > MaxObjectSize {
		return fmt.Errorf("storage: versioned unit of %d bytes: %w", unit, syscall.EINVAL)
	}
	if n > 0 && off/unit != (off+n-1)/unit {
		return fmt.Errorf("storage: range %d+%d spans units of %d bytes: %w", off, n, unit, syscall.EINVAL)
	}
	return nil
}

// WriteRow is a versioned write (proto.RowWrite) of one unit of obj. It
// returns the object's new write version.
func (t *Target) WriteRow(ctx context.Context, obj proto.ObjectID, w proto.RowWrite) (uint64, error) {
	if err := checkCtx(ctx); err != nil {
		return 0, err
	}
	if err := checkUnit(w.Off, uint64(len(w.Data)), w.Unit); err != nil {
		return 0, err
	}
	end := w.Off + uint64(len(w.Data))
	if w.Off >= MaxObjectSize || end > MaxObjectSize {
		return 0, fmt.Errorf("storage: write at %d+%d past the object size limit: %w", w.Off, len(w.Data), syscall.EFBIG)
	}
	l := t.lockFor(obj)
	l.Lock()
	defer l.Unlock()
	version, _, err := t.write(ctx, obj, w.Off, w.Data, &w)
	return version, err
}

// Fence makes obj refuse every write (and truncate) whose capability was
// issued before the one ctx carries (without one, Fence does nothing): a repair
// fences the object it rewrites, so that a write sent before the copy was
// marked stale, and delivered only now, cannot overwrite the repair. A
// fence never moves back. A missing object is created.
func (t *Target) Fence(ctx context.Context, obj proto.ObjectID) error {
	if err := checkCtx(ctx); err != nil {
		return err
	}
	c := proto.CapabilityFrom(ctx)
	if c == nil {
		// A server or an in-process caller: where no request carries a
		// capability, there is no issue time to fence by.
		return nil
	}
	cp, err := capability.Parse(c)
	if err != nil {
		return fmt.Errorf("storage: fence: %w (%w)", err, syscall.EINVAL)
	}
	l := t.lockFor(obj)
	l.Lock()
	defer l.Unlock()
	h, err := t.acquire(obj, true)
	if err != nil {
		return err
	}
	defer t.cache.release(h)
	if h.ver == nil {
		f, err := t.fs.OpenFile(t.objPath(obj)+".ver", os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return fmt.Errorf("storage: target %s object %s: %w", t.dir, objName(obj), err)
		}
		h.ver = &verFile{f: f}
	}
	if f := cp.Issued.UnixNano(); f > h.ver.hdr.Fence {
		nh := h.ver.hdr
		nh.Fence = f
		return t.writeVerHeader(h, nh)
	}
	return nil
}

// unitUpdate is the change of version entries a write or truncate makes:
// entries of units [u0, u0+len(next)) go to next (written dirty first,
// clean after the data).
type unitUpdate struct {
	u0   uint64
	next []verEntry
}

// begin writes the entries in flight; done writes them clean.
func (t *Target) beginUnits(h *handle, uu *unitUpdate) error {
	if uu == nil || len(uu.next) == 0 {
		return nil
	}
	return t.writeVer(h, uu.u0, uu.next)
}

func (t *Target) doneUnits(h *handle, uu *unitUpdate) error {
	if uu == nil || len(uu.next) == 0 {
		return nil
	}
	es := make([]verEntry, len(uu.next))
	for i, e := range uu.next {
		es[i] = verEntry{Cur: e.Cur, Prev: e.Cur}
	}
	return t.writeVer(h, uu.u0, es)
}

// planUnits decides the version change of a write of [off, end) to h: for
// a versioned write w, after checking its condition; for a plain write to
// a versioned object, fresh tags for every unit it touches. nil: nothing
// to change.
func (t *Target) planUnits(h *handle, off, end uint64, w *proto.RowWrite) (*unitUpdate, error) {
	if w != nil {
		if err := t.ensureVer(h, w.Unit); err != nil {
			return nil, err
		}
		u := off / w.Unit
		es, err := t.readVer(h, u, u+1)
		if err != nil {
			return nil, err
		}
		if w.Cond && es[0].version() != w.Expect {
			return nil, fmt.Errorf("storage: target %s object %s unit %d: version %+v, expected %+v: %w (%w)",
				t.dir, objName(h.obj), u, es[0].version(), w.Expect, ErrConflict, syscall.EAGAIN)
		}
		return &unitUpdate{u0: u, next: []verEntry{es[0].inFlight(w.Tag)}}, nil
	}
	if h.ver == nil || h.ver.hdr.Unit == 0 || end <= off {
		return nil, nil
	}
	unit := h.ver.hdr.Unit
	u0, u1 := off/unit, (end-1)/unit+1
	es, err := t.readVer(h, u0, u1)
	if err != nil {
		return nil, err
	}
	for i := range es {
		es[i] = es[i].inFlight(freshTag())
	}
	return &unitUpdate{u0: u0, next: es}, nil
}

// truncateUnits begins the version change of a shrink of h to size: the
// unit the end falls in gets a fresh tag, and the units wholly past the
// end are marked dirty, all before the data is cut; finishTruncateUnits
// then collapses the tail unit's entry and drops the entries past the end
// (they read as tag 0, as the zeros they hold then). A kill in between
// leaves those units dirty, never a tag beside bytes it does not describe.
func (t *Target) truncateUnits(h *handle, size uint64) (*unitUpdate, error) {
	if h.ver == nil || h.ver.hdr.Unit == 0 || size >= h.size {
		return nil, nil
	}
	unit := h.ver.hdr.Unit
	u0, u1 := size/unit, (h.size-1)/unit+1
	es, err := t.readVer(h, u0, u1)
	if err != nil {
		return nil, err
	}
	for i := range es {
		es[i] = es[i].inFlight(freshTag())
	}
	uu := &unitUpdate{u0: u0, next: es}
	if err := t.beginUnits(h, uu); err != nil {
		return nil, err
	}
	if size%unit == 0 {
		uu.next = nil // no unit keeps bytes
	} else {
		uu.next = es[:1]
	}
	return uu, nil
}

func (t *Target) finishTruncateUnits(h *handle, uu *unitUpdate, size uint64) error {
	if uu == nil {
		return nil
	}
	if err := t.doneUnits(h, uu); err != nil {
		return err
	}
	unit := h.ver.hdr.Unit
	if err := h.ver.f.Truncate(verEntryOff((size + unit - 1) / unit)); err != nil {
		return fmt.Errorf("storage: target %s object %s: truncate versions: %w", t.dir, objName(h.obj), err)
	}
	return nil
}

// syncVer fsyncs h's version file, if it has one.
func (t *Target) syncVer(h *handle) error {
	if h.ver == nil {
		return nil
	}
	return h.ver.f.Sync()
}

var _ proto.RowVersioner = (*Server)(nil)

// ReadRow implements proto.RowVersioner.
func (s *Server) ReadRow(ctx context.Context, id proto.TargetID, obj proto.ObjectID, off, unit uint64, p []byte) (int, proto.RowVersion, error) {
	t, err := s.target(ctx, id)
	if err != nil {
		return 0, proto.RowVersion{}, err
	}
	return t.ReadRow(ctx, obj, off, unit, p)
}

// WriteRow implements proto.RowVersioner.
func (s *Server) WriteRow(ctx context.Context, id proto.TargetID, obj proto.ObjectID, w proto.RowWrite) (uint64, error) {
	t, err := s.target(ctx, id)
	if err != nil {
		return 0, err
	}
	return t.WriteRow(ctx, obj, w)
}

// Fence implements proto.RowVersioner.
func (s *Server) Fence(ctx context.Context, id proto.TargetID, obj proto.ObjectID) error {
	t, err := s.target(ctx, id)
	if err != nil {
		return err
	}
	return t.Fence(ctx, obj)
}
