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
// before (like a truncate, it waits for them and holds new ones back):
// every fresh copy of a mirrored stripe, as writes do (a copy that fails
// is marked stale; the call succeeds when one copy took it), and for an
// EC file every shard of the whole rows in the range, the partial rows at
// its edges being punched or zeroed on their data shards and their parity
// recomputed (ecSpace). A
// size change or a changed range counts as a write: the size and mtime
// are recorded on the metadata server at the next flush or fsync.
func (f *File) Allocate(ctx context.Context, off, n uint64, mode uint32) error {
	st := f.state()
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
	if err := st.dropOffered(ctx, f.gen); err != nil {
		return err
	}
	defer st.changingAllocation()()
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
	l := st.beginTruncate() // waits for the writes in flight, holds new ones back
	defer st.endTruncate()
	st.mu.Lock()
	err := st.takeErrLocked()
	size := st.size()
	st.mu.Unlock()
	if err != nil {
		return err
	}
	if !usable(l) {
		return fmt.Errorf("client: ino %d has no usable layout (%v): %w", st.ino, l, syscall.EIO)
	}
	rctx, cancel := f.c.rpcCtx(ctx)
	defer cancel()
	if l.Kind == layout.EC {
		newSize := size
		if !keep {
			newSize = max(size, end)
		}
		err = f.c.ecSpace(rctx, st, l, sm, off, end, newSize)
	} else {
		// RAID-0: the one object of each stripe; mirror: every fresh copy
		// of it (onStripe marks the copies that fail stale).
		err = parallel(l.Columns(), func(col int) error {
			lo, hi := l.ObjectOffset(col, off), l.ObjectOffset(col, end)
			if hi <= lo {
				return nil
			}
			return f.c.onStripe(rctx, st, l, col, "fallocate", func(ctx context.Context, t proto.TargetID, obj proto.ObjectID) error {
				return st.withCap(ctx, proto.AccessWrite, func(ctx context.Context) error {
					return f.c.storage.Space(ctx, t, obj, sm, lo, hi-lo)
				})
			})
		})
	}
	if err != nil {
		return fmt.Errorf("client: fallocate ino %d [%d,+%d): %w", st.ino, off, n, err)
	}
	reserved := end // objects may hold blocks up to this file offset
	if rb := l.RowBytes(); l.Kind == layout.EC && sm == proto.SpaceAllocate {
		reserved = (end + rb - 1) / rb * rb // whole rows are reserved
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	grows := !keep && end > st.size()
	if sm == proto.SpaceAllocate && !grows {
		// Nothing a reader can see changed, so mtime stays; the blocks
		// reserved are reported at the next flush of a write.
		st.allocEnd = max(st.allocEnd, reserved)
		return nil
	}
	for col := range l.Columns() {
		st.unsynced[col] = true
	}
	if grows {
		st.end = max(st.end, end)
		st.doneEnd = max(st.doneEnd, end)
	}
	if sm != proto.SpacePunch {
		st.allocEnd = max(st.allocEnd, reserved)
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
// data column is asked (seekColumn: one fresh copy of a mirrored stripe,
// the data shard of an EC one) where its next data or hole is,
// concurrently; the answer is the nearest, in file offsets. A stale EC
// data shard counts as data. Past the end
// of the file, or SEEK_DATA with no data after off, fails with ENXIO.
// Ranges reserved by fallocate count as data.
func (f *File) Lseek(ctx context.Context, off uint64, whence int) (uint64, error) {
	if f.state() == nil {
		return 0, syscall.EINVAL
	}
	if err := f.stale(ctx); err != nil {
		return 0, err
	}
	if err := f.followIfMoved(ctx); err != nil {
		return 0, err
	}
	st := f.state()
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
	if !usable(l) {
		// No object yet: the whole file is a hole.
		if what == proto.SeekData {
			return 0, syscall.ENXIO
		}
		return off, nil
	}
	cols := l.Columns()
	found := make([]uint64, cols)
	rctx, cancel := f.c.rpcCtx(ctx)
	defer cancel()
	err := parallel(cols, func(col int) error {
		lo := l.ObjectOffset(col, off)
		r, err := f.c.seekColumn(rctx, st, l, col, lo, what)
		switch {
		case errors.Is(err, errNoCopyToAsk):
			// A stale EC data shard (reads reconstruct it): its bytes
			// count as data, so neither answer skips anything.
			if what == proto.SeekData {
				found[col] = min(l.FileOffset(col, lo), size)
			} else {
				found[col] = size
			}
		case errors.Is(err, syscall.ENXIO):
			found[col] = size // no data in this column from lo on
		case err != nil:
			return fmt.Errorf("client: seek ino %d column %d from %d: %w", st.ino, col, lo, err)
		default:
			found[col] = min(l.FileOffset(col, r), size)
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

// errNoCopyToAsk: a data column has no fresh object to ask (a stale EC
// data shard).
var errNoCopyToAsk = errors.New("client: no fresh object holds this column")

// seekColumn asks the object(s) of data column col where their next data
// or hole at or after lo is (StorageService.Seek): the one object of a
// RAID-0 stripe, a fresh copy of a mirrored one (the next if it fails:
// fresh copies hold the same bytes and the same holes, since every space
// call and write went to each), the data shard of an EC stripe.
func (c *Client) seekColumn(ctx context.Context, st *inodeState, l layout.Layout, col int, lo uint64, what proto.SeekWhat) (uint64, error) {
	var slots []int
	switch l.Kind {
	case layout.Mirror:
		slots = c.readOrder(l, col, 0)
	case layout.EC:
		if slot := l.ColumnSlot(col); !l.IsStale(slot) {
			slots = []int{slot}
		}
	default:
		slots = []int{l.Slot(col, 0)}
	}
	if len(slots) == 0 {
		return 0, errNoCopyToAsk
	}
	var errs []error
	for _, slot := range slots {
		var r uint64
		err := st.withCap(ctx, proto.AccessRead, func(ctx context.Context) (err error) {
			r, err = c.storage.Seek(ctx, l.Targets[slot], st.objectOf(slot), lo, what)
			return err
		})
		if err == nil || errors.Is(err, syscall.ENXIO) {
			return r, err
		}
		c.noteSuspect(l.Targets[slot])
		errs = append(errs, fmt.Errorf("slot %d on target %d: %w", slot, l.Targets[slot], err))
	}
	return 0, errors.Join(errs...)
}

// ecSpace applies mode to [off, end) of an EC file whose size is size
// once the call is done. Reserving (SpaceAllocate) changes no byte, so
// every shard of each row the range touches reserves its share. Punching
// and zeroing whole rows do the same to every shard of those rows: zero
// data has zero parity, so data and parity still agree. The partial rows
// at the edges get the same on their data shards and then new parity
// (ecSpaceEdge), up to size only (past it there is nothing to make zero).
func (c *Client) ecSpace(ctx context.Context, st *inodeState, l layout.Layout, mode proto.SpaceMode, off, end, size uint64) error {
	rb := l.RowBytes()
	if mode == proto.SpaceAllocate {
		return c.ecSpaceRows(ctx, st, l, mode, off/rb, (end+rb-1)/rb)
	}
	q0, q1 := (off+rb-1)/rb, end/rb  // the rows the range covers whole
	edges := [][2]uint64{{off, end}} // within one row
	if q0 <= q1 {
		if err := c.ecSpaceRows(ctx, st, l, mode, q0, q1); err != nil {
			return err
		}
		edges = [][2]uint64{{off, q0 * rb}, {q1 * rb, end}}
	}
	for _, e := range edges {
		a, b := e[0], min(e[1], size)
		if a >= b {
			continue
		}
		if err := c.ecSpaceEdge(ctx, st, mode, a, b, size); err != nil {
			return err
		}
	}
	return nil
}

// ecSpaceEdge punches or zeroes [a, b), within one row of an EC file of
// size bytes: on the data shards themselves (so punched blocks become
// holes there, as SEEK_HOLE and st_blocks show), then the row's parity is
// recomputed from them, under the row's lock. If a shard of the stripe is
// stale, or becomes so, its bytes would be reconstructed from parity that
// never saw the punch: the range is then written with zeros through the EC
// write path instead, which encodes parity for them.
func (c *Client) ecSpaceEdge(ctx context.Context, st *inodeState, mode proto.SpaceMode, a, b, size uint64) error {
	l := st.currentLayout(layout.Layout{})
	rb, s, k := l.RowBytes(), l.StripeSize, int(l.ECData)
	q := a / rb
	g := int(q % uint64(l.StripeCount))
	rowOff, objOff := q*rb, (q/uint64(l.StripeCount))*s
	anyStale := func(l layout.Layout) bool {
		for j := range l.Width() {
			if l.IsStale(l.Slot(g, j)) {
				return true
			}
		}
		return false
	}
	if !anyStale(l) {
		mu := c.rows.lock(st.ino, st.gen, q)
		mu.Lock()
		type span struct{ lo, hi uint64 }
		spans := map[int]span{}
		var slots []int
		for j := range k {
			lo, hi := max(a, rowOff+uint64(j)*s), min(b, rowOff+uint64(j+1)*s)
			if lo < hi {
				slot := l.Slot(g, j)
				slots = append(slots, slot)
				spans[slot] = span{objOff + lo - rowOff - uint64(j)*s, objOff + hi - rowOff - uint64(j)*s}
			}
		}
		err := c.fanOut(ctx, st, l, slots, "fallocate", func(ctx context.Context, slot int) error {
			sp := spans[slot]
			return st.withCap(ctx, proto.AccessWrite, func(ctx context.Context) error {
				return c.storage.Space(ctx, l.Targets[slot], st.objectOf(slot), mode, sp.lo, sp.hi-sp.lo)
			})
		})
		if err == nil && !anyStale(st.currentLayout(l)) {
			err = c.ecUpdateRow(ctx, st, l, q, 0, nil, size, false)
			mu.Unlock()
			return err
		}
		mu.Unlock()
		if err != nil {
			return err
		}
	}
	return c.ecWrite(ctx, st, st.currentLayout(l), a, make([]byte, b-a))
}

// ecSpaceRows applies mode to rows [q0, q1) of every shard, data and
// parity, of an EC file. The rows of one stripe in that range are
// contiguous in its objects.
func (c *Client) ecSpaceRows(ctx context.Context, st *inodeState, l layout.Layout, mode proto.SpaceMode, q0, q1 uint64) error {
	l = st.currentLayout(l)
	if q0 >= q1 {
		return nil
	}
	sc, s := uint64(l.StripeCount), l.StripeSize
	type span struct{ lo, hi uint64 }
	spans := map[int]span{} // slot -> its object range
	var slots []int
	for g := range sc {
		r0 := q0 + (g+sc-q0%sc)%sc // the first row of stripe g at or after q0
		r1 := q1 + (g+sc-q1%sc)%sc
		lo, hi := (r0/sc)*s, (r1/sc)*s
		if hi <= lo {
			continue
		}
		for j := range l.Width() {
			if slot := l.Slot(int(g), j); !l.IsStale(slot) {
				slots = append(slots, slot)
				spans[slot] = span{lo, hi}
			}
		}
	}
	return c.fanOut(ctx, st, l, slots, "fallocate", func(ctx context.Context, slot int) error {
		sp := spans[slot]
		return st.withCap(ctx, proto.AccessWrite, func(ctx context.Context) error {
			return c.storage.Space(ctx, l.Targets[slot], st.objectOf(slot), mode, sp.lo, sp.hi-sp.lo)
		})
	})
}

// currentLayout returns st's layout, with the stale marks made since l
// was taken, or l if st has none (a file handled by path).
func (st *inodeState) currentLayout(l layout.Layout) layout.Layout {
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.layout.Targets) > 0 {
		return st.layout
	}
	return l
}

// allocatedBlocks returns what the file's objects hold on their targets, in
// 512-byte units (stat's st_blocks), for a file whose objects may hold
// bytes up to file offset span: it asks every fresh object that may hold
// any (StorageService.Allocated), concurrently. Every copy of a mirrored
// file and every shard of an EC file, parity included, counts: st_blocks
// (and du) say what the file occupies on the targets, as Lustre counts
// every mirror's objects, so a mirror 2 file of 1 MiB of data counts
// 2 MiB. It is reported with WriteDone.
// If a target does not answer it returns proto.NoBlocks (the count on the
// metadata server stays as it was): a flush does not fail for an
// accounting figure.
func (st *inodeState) allocatedBlocks(ctx context.Context, l layout.Layout, span uint64) uint64 {
	if !usable(l) {
		return proto.NoBlocks
	}
	// Any capability will do; a file being flushed was written, so the
	// one for writing is normally there.
	want := proto.AccessWrite
	if st.caps.get(want) == nil {
		want = proto.AccessRead
	}
	got := make([]uint64, len(l.Targets))
	err := parallel(len(l.Targets), func(slot int) error {
		if l.IsStale(slot) {
			return nil // missed writes: repaired, not counted
		}
		if l.ObjectSize(span, slotColumn(l, slot)) == 0 {
			return nil // no byte of the file maps into this object
		}
		if n, ok := st.knownAllocated(l.Targets[slot], st.objectOf(slot)); ok {
			got[slot] = n // from the reply to this client's last write (allocated.go)
			return nil
		}
		return st.withCap(ctx, want, func(ctx context.Context) (err error) {
			got[slot], err = st.c.storage.Allocated(ctx, l.Targets[slot], st.objectOf(slot))
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

// slotColumn returns the data column whose length bounds the object in
// slot: its stripe's (RAID-0, mirror), its own (an EC data shard) or its
// stripe's first (an EC parity shard, as long as that one).
func slotColumn(l layout.Layout, slot int) int {
	w := l.Width()
	g, j := slot/w, slot%w
	if l.Kind != layout.EC {
		return g
	}
	k := int(l.ECData)
	if j >= k {
		j = 0
	}
	return g*k + j
}
