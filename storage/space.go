package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"

	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/storage/vfs"
)

// entryChunk is how many checksum entries space and seek operations read
// at once.
const entryChunk = 64 << 10

// Space changes how [off, off+n) of obj is backed (proto.SpaceMode), under
// the object's exclusive lock, so it is ordered with writes and truncates:
//
//   - SpacePunch writes zeros over the partial blocks at the range's edges
//     (a write) and frees the whole blocks inside it: their entries first
//     become {hole, old CRC}, then the data file's range is punched
//     (vfs.Punch), then the sidecar's entries are punched too (a hole in
//     the sidecar reads as hole entries); a kill at any point leaves every
//     block matching its entry. Freed blocks leave the used count.
//   - SpaceAllocate reserves the hole blocks of the range (ENOSPC, changing
//     nothing, past the capacity), reserves them in the data file
//     (vfs.Allocate), which grows to cover the range, and then marks them
//     allocated with the CRC of a zero block; blocks that hold data are
//     not touched.
//   - SpaceZero is SpacePunch and then SpaceAllocate.
//
// The object's version grows by one per step that changed something.
func (t *Target) Space(ctx context.Context, obj proto.ObjectID, mode proto.SpaceMode, off, n uint64) error {
	t.markWritten()
	if err := checkCtx(ctx); err != nil {
		return err
	}
	end := off + n
	if end < off || end > MaxObjectSize {
		return fmt.Errorf("storage: space at %d+%d past the object size limit: %w", off, n, syscall.EFBIG)
	}
	if n == 0 {
		return nil
	}
	l := t.lockFor(obj)
	l.Lock()
	defer l.Unlock()
	switch mode {
	case proto.SpacePunch:
		return t.punch(obj, off, end)
	case proto.SpaceAllocate:
		return t.allocate(obj, off, end)
	case proto.SpaceZero:
		if err := t.punch(obj, off, end); err != nil {
			return err
		}
		return t.allocate(obj, off, end)
	}
	return fmt.Errorf("storage: space mode %d: %w", mode, syscall.EINVAL)
}

func (t *Target) punch(obj proto.ObjectID, off, end uint64) error {
	h, err := t.acquire(obj, false)
	if errors.Is(err, errMissing) {
		return nil
	}
	if err != nil {
		return err
	}
	defer t.cache.release(h)
	end = min(end, h.size)
	if off >= end {
		return nil
	}
	// Whole blocks [fb0, fb1); the object's partial tail block counts as
	// whole when the range reaches the end of the object.
	fb0 := blocksFor(off)
	fb1 := end / BlockSize
	if end == h.size {
		fb1 = blocksFor(end)
	}
	zero := func(lo, hi uint64) error {
		if lo >= hi {
			return nil
		}
		_, _, err := t.write(context.Background(), obj, lo, make([]byte, hi-lo), nil) // no fence: space ops are RAID-0 only
		return err
	}
	if fb0 >= fb1 {
		return zero(off, end)
	}
	if err := zero(off, fb0*BlockSize); err != nil {
		return err
	}
	if err := zero(fb1*BlockSize, end); err != nil {
		return err
	}
	wrap := func(err error) error {
		t.cache.drop(obj)
		return fmt.Errorf("storage: target %s object %s: punch [%d, %d): %w", t.dir, objName(obj), off, end, err)
	}
	// 1. Every allocated entry becomes {hole, what the disk holds}.
	var freed uint64
	err = t.eachDataEntries(h, fb0, fb1, func(b uint64, es []entry) error {
		any := false
		for i := range es {
			if es[i].allocated() {
				freed++
				any = true
				es[i] = entry{Cur: 0, Prev: es[i].Cur}
			}
		}
		if !any {
			return nil
		}
		_, err := h.crc.WriteAt(encodeEntries(nil, es), entryOff(b))
		return err
	})
	if err != nil {
		return wrap(err)
	}
	if freed == 0 {
		return nil // only holes: nothing to free
	}
	// 2. The data, 3. the entries (punched entries read as holes).
	if err := vfs.Punch(h.data, int64(fb0*BlockSize), int64((fb1-fb0)*BlockSize)); err != nil {
		return wrap(err)
	}
	if err := vfs.Punch(h.crc, entryOff(fb0), int64(fb1-fb0)*entrySize); err != nil {
		return wrap(err)
	}
	nh := header{Version: h.hdr.Version + 1, Blocks: h.hdr.Blocks - min(freed, h.hdr.Blocks)}
	if _, err := h.crc.WriteAt(nh.encode(), 0); err != nil {
		return wrap(err)
	}
	h.hdr = nh
	t.used.Add(-freed * BlockSize)
	return nil
}

func (t *Target) allocate(obj proto.ObjectID, off, end uint64) error {
	h, err := t.acquire(obj, true)
	if err != nil {
		return err
	}
	defer t.cache.release(h)
	b0, b1 := off/BlockSize, blocksFor(end)
	wrap := func(err error) error {
		t.cache.drop(obj)
		return fmt.Errorf("storage: target %s object %s: allocate [%d, %d): %w", t.dir, objName(obj), off, end, err)
	}
	// Count the holes first: nothing changes unless they all fit.
	var holes uint64
	for b := b0; b < b1; b += entryChunk {
		es, err := t.readEntries(h, b, min(b+entryChunk, b1))
		if err != nil {
			return err
		}
		for i, e := range es {
			if !e.allocated() || (b+uint64(i))*BlockSize >= h.size {
				holes++
			}
		}
	}
	if err := t.reserve(holes * BlockSize); err != nil {
		return err
	}
	if err := vfs.Allocate(h.data, int64(off), int64(end-off)); err != nil {
		t.used.Add(-holes * BlockSize)
		return wrap(err)
	}
	oldSize := h.size
	h.size = max(h.size, end)
	if holes > 0 {
		for b := b0; b < b1; b += entryChunk {
			es, err := t.readEntries(h, b, min(b+entryChunk, b1))
			if err != nil {
				return wrap(err)
			}
			for i, e := range es {
				if !e.allocated() || (b+uint64(i))*BlockSize >= oldSize {
					es[i] = entry{Cur: zeroBlockCRC, Prev: zeroBlockCRC}
				}
			}
			if _, err := h.crc.WriteAt(encodeEntries(nil, es), entryOff(b)); err != nil {
				return wrap(err)
			}
		}
	}
	if holes == 0 && h.size == oldSize {
		return nil
	}
	nh := header{Version: h.hdr.Version + 1, Blocks: h.hdr.Blocks + holes}
	if _, err := h.crc.WriteAt(nh.encode(), 0); err != nil {
		return wrap(err)
	}
	h.hdr = nh
	return nil
}

// eachDataEntries calls fn with the entries of blocks in [b0, b1) that lie
// in the sidecar's data extents (vfs.NextData: entries in its holes, and
// past its end, are holes), in chunks of at most entryChunk, in order. fn
// may change the slice.
func (t *Target) eachDataEntries(h *handle, b0, b1 uint64, fn func(b uint64, es []entry) error) error {
	off := entryOff(b0)
	for {
		start, end, err := vfs.NextData(h.crc, off)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read checksums: %w", err)
		}
		first := b0
		if start > entryOff(b0) {
			first = uint64(start-headerSize) / entrySize
		}
		last := min(b1, (uint64(end-headerSize)+entrySize-1)/entrySize)
		if first >= b1 {
			return nil
		}
		for b := first; b < last; b += entryChunk {
			es, err := t.readEntries(h, b, min(b+entryChunk, last))
			if err != nil {
				return err
			}
			if err := fn(b, es); err != nil {
				return err
			}
		}
		if last >= b1 {
			return nil
		}
		off = max(end, entryOff(last))
	}
}

// Allocated returns the bytes obj's allocated blocks take (the sidecar
// header's count), 0 for a missing object.
func (t *Target) Allocated(ctx context.Context, obj proto.ObjectID) (uint64, error) {
	if err := checkCtx(ctx); err != nil {
		return 0, err
	}
	var n uint64
	err := t.viewObject(obj, func(h *handle) error {
		n = h.hdr.Blocks * BlockSize
		return nil
	})
	if errors.Is(err, errMissing) {
		return 0, nil
	}
	return n, err
}

// Seek implements proto.StorageService.Seek for one object, from its
// checksum entries: a block is data when its entry is allocated. A missing
// object is all hole.
func (t *Target) Seek(ctx context.Context, obj proto.ObjectID, off uint64, what proto.SeekWhat) (uint64, error) {
	if err := checkCtx(ctx); err != nil {
		return 0, err
	}
	if what != proto.SeekData && what != proto.SeekHole {
		return 0, fmt.Errorf("storage: seek for %d: %w", what, syscall.EINVAL)
	}
	l := t.lockFor(obj)
	l.RLock()
	defer l.RUnlock()
	h, err := t.acquire(obj, false)
	if errors.Is(err, errMissing) {
		if what == proto.SeekHole {
			return off, nil
		}
		return 0, syscall.ENXIO
	}
	if err != nil {
		return 0, err
	}
	defer t.cache.release(h)
	if off >= h.size {
		if what == proto.SeekHole {
			return off, nil
		}
		return 0, syscall.ENXIO
	}
	b0, b1 := off/BlockSize, blocksFor(h.size)
	at := func(b uint64) uint64 { return max(off, b*BlockSize) }
	if what == proto.SeekData {
		found, res := false, uint64(0)
		errFound := errors.New("found")
		err := t.eachDataEntries(h, b0, b1, func(b uint64, es []entry) error {
			for i, e := range es {
				if e.allocated() {
					found, res = true, at(b+uint64(i))
					return errFound
				}
			}
			return nil
		})
		if err != nil && err != errFound {
			return 0, fmt.Errorf("storage: target %s object %s: seek: %w", t.dir, objName(obj), err)
		}
		if !found {
			return 0, syscall.ENXIO
		}
		return res, nil
	}
	for b := b0; b < b1; b += entryChunk {
		es, err := t.readEntries(h, b, min(b+entryChunk, b1))
		if err != nil {
			return 0, err
		}
		for i, e := range es {
			if !e.allocated() {
				return at(b + uint64(i)), nil
			}
		}
	}
	return h.size, nil
}
