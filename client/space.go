package client

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/weft-fs/weft/layout"
	"github.com/weft-fs/weft/proto"
)

// Allocate is fallocate(2) on the file: mode is fallocate's flags. It
// supports mode 0 and FALLOC_FL_KEEP_SIZE (reserve the range on the
// targets; without KEEP_SIZE the file grows to cover it),
// FALLOC_FL_PUNCH_HOLE|FALLOC_FL_KEEP_SIZE (the range reads as zeros and
// its blocks are freed) and FALLOC_FL_ZERO_RANGE, with or without
// KEEP_SIZE (the range reads as zeros and stays reserved); any other flag
// fails with EOPNOTSUPP, PUNCH_HOLE without KEEP_SIZE with EINVAL, as on
// Linux. Each object of the file gets one StorageService.Space for its
// share of the range, concurrently, after this client's writes accepted
// before (like a truncate, it waits for them and holds new ones back). A
// size change or a changed range counts as a write: the size and mtime
// are recorded on the metadata server at the next flush or fsync.
func (f *File) Allocate(ctx context.Context, off, n uint64, mode uint32) error {
	st := f.st
	if st == nil {
		return syscall.ENODEV // fallocate on a file that is not regular
	}
	if err := f.stale(ctx); err != nil {
		return err
	}
	const known = unix.FALLOC_FL_KEEP_SIZE | unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_ZERO_RANGE
	if mode&^known != 0 {
		return fmt.Errorf("client: fallocate mode %#x: %w", mode, syscall.EOPNOTSUPP)
	}
	keep := mode&unix.FALLOC_FL_KEEP_SIZE != 0
	var sm proto.SpaceMode
	switch mode &^ unix.FALLOC_FL_KEEP_SIZE {
	case 0:
		sm = proto.SpaceAllocate
	case unix.FALLOC_FL_PUNCH_HOLE:
		if !keep {
			return fmt.Errorf("client: fallocate PUNCH_HOLE without KEEP_SIZE: %w", syscall.EINVAL)
		}
		sm = proto.SpacePunch
	case unix.FALLOC_FL_ZERO_RANGE:
		sm = proto.SpaceZero
	default:
		return fmt.Errorf("client: fallocate mode %#x: %w", mode, syscall.EINVAL)
	}
	end := off + n
	if n == 0 || end < off {
		return syscall.EINVAL
	}
	if st.protected() {
		return fmt.Errorf("client: fallocate of ino %d: not for mirrored or erasure-coded files yet: %w", st.ino, syscall.EOPNOTSUPP)
	}
	l := st.beginTruncate() // waits for the writes in flight, holds new ones back
	defer st.endTruncate()
	st.mu.Lock()
	err := st.takeErrLocked()
	st.mu.Unlock()
	if err != nil {
		return err
	}
	if len(l.Targets) == 0 || l.StripeSize == 0 {
		return fmt.Errorf("client: ino %d has no usable layout (%v): %w", st.ino, l, syscall.EIO)
	}
	rctx, cancel := f.c.rpcCtx(ctx)
	defer cancel()
	err = parallel(len(l.Targets), func(s int) error {
		lo, hi := l.ObjectOffset(s, off), l.ObjectOffset(s, end)
		if hi <= lo {
			return nil
		}
		obj := proto.ObjectID{Ino: st.ino, Stripe: uint32(s), Gen: st.gen}
		if err := st.withCap(rctx, proto.AccessWrite, func(ctx context.Context) error {
			return f.c.storage.Space(ctx, l.Targets[s], obj, sm, lo, hi-lo)
		}); err != nil {
			return fmt.Errorf("client: fallocate ino %d stripe %d [%d,+%d) on target %d: %w", st.ino, s, lo, hi-lo, l.Targets[s], err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	grows := !keep && end > st.size()
	if sm == proto.SpaceAllocate && !grows {
		// Nothing a reader can see changed, so mtime stays; the blocks
		// reserved are reported at the next flush of a write.
		st.allocEnd = max(st.allocEnd, end)
		return nil
	}
	for s := range l.Targets {
		st.unsynced[s] = true
	}
	if grows {
		st.end = max(st.end, end)
	}
	if sm != proto.SpacePunch {
		st.allocEnd = max(st.allocEnd, end)
	}
	st.dirty = true
	st.seq++
	st.lastWrite = time.Now().UnixNano()
	return nil
}

// Lseek is lseek(2) with SEEK_DATA or SEEK_HOLE: it returns the first
// offset at or after off that is data, or a hole (the end of the file
// counts as one), as the storage targets see the file after this client's
// accepted writes reached them (it sends and waits for them first). Every
// object is asked (StorageService.Seek) where its next data or hole is,
// concurrently; the answer is the nearest, in file offsets. Past the end
// of the file, or SEEK_DATA with no data after off, fails with ENXIO.
// Ranges reserved by fallocate count as data.
func (f *File) Lseek(ctx context.Context, off uint64, whence int) (uint64, error) {
	st := f.st
	if st == nil {
		return 0, syscall.EINVAL
	}
	if err := f.stale(ctx); err != nil {
		return 0, err
	}
	var what proto.SeekWhat
	switch whence {
	case unix.SEEK_DATA:
		what = proto.SeekData
	case unix.SEEK_HOLE:
		what = proto.SeekHole
	default:
		return 0, syscall.EINVAL
	}
	st.mu.Lock()
	for {
		st.pushAllLocked()
		if st.truncating == 0 && len(st.inflight) == 0 {
			break
		}
		st.cond.Wait()
	}
	size, l := st.size(), st.layout
	st.mu.Unlock()
	if off >= size {
		return 0, syscall.ENXIO
	}
	if len(l.Targets) == 0 || l.StripeSize == 0 || l.Kind != layout.RAID0 {
		// No layout, or copies and shards (whose holes are not asked yet):
		// all data up to the size, the hole at the end.
		if what == proto.SeekData {
			return 0, syscall.ENXIO
		}
		return off, nil
	}
	found := make([]uint64, len(l.Targets))
	rctx, cancel := f.c.rpcCtx(ctx)
	defer cancel()
	err := parallel(len(l.Targets), func(s int) error {
		obj := proto.ObjectID{Ino: st.ino, Stripe: uint32(s), Gen: st.gen}
		lo := l.ObjectOffset(s, off)
		var r uint64
		err := st.withCap(rctx, proto.AccessRead, func(ctx context.Context) (err error) {
			r, err = f.c.storage.Seek(ctx, l.Targets[s], obj, lo, what)
			return err
		})
		switch {
		case errors.Is(err, syscall.ENXIO):
			found[s] = size // no data in this object from lo on
		case err != nil:
			return fmt.Errorf("client: seek ino %d stripe %d from %d on target %d: %w", st.ino, s, lo, l.Targets[s], err)
		default:
			found[s] = min(l.FileOffset(s, r), size)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	res := size
	for _, r := range found {
		res = min(res, r)
	}
	if what == proto.SeekData && res >= size {
		return 0, syscall.ENXIO
	}
	return max(res, off), nil
}

// allocatedBlocks returns what the file's objects hold on their targets, in
// 512-byte units (stat's st_blocks), for a file whose objects may hold
// bytes up to file offset span: it asks every object that may hold any
// (StorageService.Allocated), concurrently. It is reported with WriteDone.
// If a target does not answer it returns proto.NoBlocks (the count on the
// metadata server stays as it was): a flush does not fail for an
// accounting figure.
func (st *inodeState) allocatedBlocks(ctx context.Context, l layout.Layout, span uint64) uint64 {
	if len(l.Targets) == 0 || l.StripeSize == 0 || l.Kind != layout.RAID0 {
		// Copies' and shards' blocks are not counted yet: the metadata
		// server's count stays (the size in blocks).
		return proto.NoBlocks
	}
	// Any capability will do; a file being flushed was written, so the
	// one for writing is normally there.
	want := proto.AccessWrite
	if st.caps.get(want) == nil {
		want = proto.AccessRead
	}
	got := make([]uint64, len(l.Targets))
	err := parallel(len(l.Targets), func(s int) error {
		if l.ObjectSize(span, s) == 0 {
			return nil // no byte of the file maps into this object
		}
		obj := proto.ObjectID{Ino: st.ino, Stripe: uint32(s), Gen: st.gen}
		return st.withCap(ctx, want, func(ctx context.Context) (err error) {
			got[s], err = st.c.storage.Allocated(ctx, l.Targets[s], obj)
			return err
		})
	})
	if err != nil {
		st.c.log.Debug("client: cannot count the blocks of a file", "ino", st.ino, "err", err)
		return proto.NoBlocks
	}
	var total uint64
	for _, n := range got {
		total += n
	}
	return total / 512
}

// protected reports whether the file's layout keeps copies or shards (the
// space calls here know one object per stripe, RAID-0's, only).
func (st *inodeState) protected() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.layout.Kind != layout.RAID0
}
