package client

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/weft-fs/weft/layout"
	"github.com/weft-fs/weft/proto"
)

// copyPar bounds the Copy RPCs of one CopyRange in flight.
const copyPar = 16

// CopyRange is copy_file_range(2): it copies up to n bytes of src from
// srcOff to dst at dstOff, stopping at the end of src, and returns how many
// it copied. The bytes do not pass through this client: the range is cut
// where a stripe unit of either file ends, and each piece is one
// StorageService.Copy to the destination object's server, which reads the
// source object itself (capabilities: dst's for writing, src's for
// reading). This client's accepted writes to src are sent first; writes to
// dst are held back meanwhile, as during a truncate. The copy counts as a
// write to dst (size and mtime recorded at its next flush). Between
// mirrored (or RAID-0) files every fresh copy of the destination is
// written, each from a fresh copy of the source (sourceCopy); a copy that
// fails is marked stale, as a write's would be (if the source copy was at
// fault, the destination copy is repaired by resync needlessly, never
// lost). Between erasure-coded files of one geometry whose offsets lie
// equally far into a row, whole rows are copied shard by shard on the
// storage servers with a new version per row, the partial rows at the ends
// through this client (see ecopy.go); an erasure-coded file with any other
// (a mirror, RAID-0, another geometry, rows that do not line up, no whole
// row in the range) fails with EOPNOTSUPP, and the kernel copies through
// the mount (FUSE falls back on EOPNOTSUPP and EXDEV). Overlapping ranges
// of one file fail with EINVAL; a storage server that cannot copy (ENOSYS
// from an older one, EXDEV without peers) makes a copy between mirrored
// or RAID-0 files fail with EOPNOTSUPP, and the kernel then copies
// through the mount (an EC row is then copied through this client).
func (c *Client) CopyRange(ctx context.Context, src *File, srcOff uint64, dst *File, dstOff, n uint64) (uint64, error) {
	if src.state() == nil || dst.state() == nil {
		return 0, syscall.EINVAL
	}
	if err := src.stale(ctx); err != nil {
		return 0, err
	}
	if err := src.followIfMoved(ctx); err != nil {
		return 0, err
	}
	ss, ds := src.state(), dst.state()
	if err := dst.stale(ctx); err != nil {
		return 0, err
	}
	if err := ds.dropOffered(ctx, dst.gen); err != nil {
		return 0, err
	}
	defer ds.changingAllocation()()
	ss.mu.Lock()
	ss.drainLocked()
	size, sl := ss.size(), ss.layout
	ss.mu.Unlock()
	if srcOff >= size || n == 0 {
		return 0, nil
	}
	n = min(n, size-srcOff)
	if ss == ds && srcOff < dstOff+n && dstOff < srcOff+n {
		return 0, fmt.Errorf("client: copy within ino %d: overlapping ranges: %w", ss.ino, syscall.EINVAL)
	}
	if sl.Kind == layout.EC || ds.kind() == layout.EC {
		return c.ecCopyRange(ctx, ss, sl, srcOff, ds, dstOff, n)
	}
	dl := ds.beginTruncate()
	defer ds.endTruncate()
	if !usable(sl) || !usable(dl) {
		return 0, fmt.Errorf("client: copy ino %d to %d: no usable layout: %w", ss.ino, ds.ino, syscall.EIO)
	}
	srcCap := ss.caps.get(proto.AccessRead)
	if srcCap == nil {
		return 0, fmt.Errorf("client: copy from ino %d: not open for reading: %w", ss.ino, syscall.EBADF)
	}
	type piece struct{ s, d layout.Extent }
	var pieces []piece
	for off := uint64(0); off < n; {
		s, d := srcOff+off, dstOff+off
		k := min(n-off, sl.StripeSize-s%sl.StripeSize, dl.StripeSize-d%dl.StripeSize)
		pieces = append(pieces, piece{sl.Extents(s, k)[0], dl.Extents(d, k)[0]})
		off += k
	}
	rctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	sem := make(chan struct{}, copyPar)
	err := parallel(len(pieces), func(i int) error {
		sem <- struct{}{}
		defer func() { <-sem }()
		p := pieces[i]
		// Every fresh copy of the destination stripe (onStripe: copies
		// that fail are marked stale) reads from a fresh copy of the
		// source stripe: its own number if the layouts have as many
		// copies, so the copies are made side by side.
		return c.onStripe(rctx, ds, dl, p.d.Stripe, "copy", func(ctx context.Context, t proto.TargetID, dobj proto.ObjectID) error {
			from := sourceCopy(c, sl, p.s.Stripe, int(dobj.Stripe)%dl.Width(), dl.Width())
			sobj := ss.objectOf(from)
			return ds.withCap(ctx, proto.AccessWrite, func(ctx context.Context) error {
				return c.storage.Copy(ctx, t, dobj, p.d.ObjOff, sl.Targets[from], sobj, p.s.ObjOff, p.s.Len, srcCap.b)
			})
		})
	})
	if errors.Is(err, syscall.ENOSYS) || errors.Is(err, syscall.EXDEV) {
		return 0, fmt.Errorf("client: copy ino %d to %d on the storage servers: %w (%v)", ss.ino, ds.ino, syscall.EOPNOTSUPP, err)
	}
	if err != nil {
		return 0, fmt.Errorf("client: copy ino %d to %d: %w", ss.ino, ds.ino, err)
	}
	ds.copied(dl, dstOff, n)
	return n, nil
}

// copied records a copy of n bytes to st at off, made with layout l, as a
// write: size and mtime at the next flush, every column synced then.
func (st *inodeState) copied(l layout.Layout, off, n uint64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.end = max(st.end, off+n)
	st.doneEnd = max(st.doneEnd, off+n)
	for col := range l.Columns() {
		st.unsynced[col] = true
	}
	st.dirty = true
	st.seq++
	st.lastWrite = time.Now().UnixNano()
	st.dropRALocked()
}

func usable(l layout.Layout) bool { return len(l.Targets) > 0 && l.StripeSize > 0 }

// sourceCopy returns the slot of src's stripe to copy from into copy j of
// a destination with width copies: copy j when src has as many and it is
// fresh, else the first fresh copy to read from.
func sourceCopy(c *Client, src layout.Layout, stripe, j, width int) int {
	if src.Width() == width && !src.IsStale(src.Slot(stripe, j)) {
		return src.Slot(stripe, j)
	}
	if order := c.readOrder(src, stripe, 0); len(order) > 0 {
		return order[0]
	}
	return src.Slot(stripe, 0)
}

func (st *inodeState) kind() layout.Kind {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.layout.Kind
}
