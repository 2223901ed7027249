package client

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"

	"github.com/weft-fs/weft/layout"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/storage/storagerpc"
)

// copy_file_range between erasure-coded files (CopyRange).
//
// A shard is not a byte range of the file, but between two EC files of
// one geometry (ECData, ECParity and stripe size equal; stripe counts may
// differ) row q of one and row q' of the other are the same code word
// when they hold the same bytes: shard j of the destination row is shard
// j of the source row. So a range whose source and destination offsets
// lie equally far into a row is copied in three parts:
//
//   - whole rows on the storage servers, shard by shard, parity included:
//     the server of each destination shard reads the source shard itself
//     (proto.RowCopier, storagerpc OpCopyRow). This client first reads
//     the versions of the source row's K+M shards (no data); they must all
//     be fresh and hold one clean version v, and each shard is copied only
//     if it still has v when its server reads it (else EAGAIN, nothing
//     written), so the destination row is one code word. Every destination
//     shard gets one new tag, as a full-row write gives; a shard whose copy
//     fails is marked stale as a failed write's is (fanOut), unless its
//     server could not read the source (EREMOTEIO). A row that cannot be
//     copied so (a source shard stale or unreadable, versions that
//     disagree, the source changed meanwhile, a server without OpCopyRow)
//     is copied through this client instead.
//   - the partial rows at either end (the head up to the first row
//     boundary, the tail after the last whole row) through this client:
//     read as any read of the source (reconstructing shards if need be),
//     written as any write of the destination (ecWrite: the row's parity
//     with it, under the row's lock).
//
// Everything else (an EC file with a mirrored or RAID-0 one, EC files of
// different geometry, offsets at different places in their rows, a range
// with no whole row in it, stripe units over storagerpc.MaxIO, which one
// request cannot carry) fails with EOPNOTSUPP, and the kernel copies
// through the mount (FUSE falls back on EOPNOTSUPP). One call copies at
// most ecCopyMax bytes of whole rows and returns that count (then without
// the tail); the caller asks again for the rest, as copy_file_range's
// callers do.

// ecCopyPar bounds the rows of one EC copy in flight (each moves K+M
// stripe units between servers, or up to ecCopyChunk through this client).
const ecCopyPar = 8

// ecCopyMax bounds the whole rows one call copies; the count returned
// says where it stopped.
const ecCopyMax = 1 << 30

// ecCopyChunk bounds the bytes a copy through this client holds at once.
const ecCopyChunk = 16 << 20

// sameGeometry reports whether rows of a and b are interchangeable code
// words: both EC with the same shards and stripe size.
func sameGeometry(a, b layout.Layout) bool {
	return a.Kind == layout.EC && b.Kind == layout.EC && a.ECData == b.ECData && a.ECParity == b.ECParity && a.StripeSize == b.StripeSize
}

// ecCopyRange is CopyRange when either file is erasure-coded: n (> 0)
// bytes of ss at srcOff, all inside the file, to ds at dstOff. sl is ss's
// layout, taken after its writes were drained.
func (c *Client) ecCopyRange(ctx context.Context, ss *inodeState, sl layout.Layout, srcOff uint64, ds *inodeState, dstOff, n uint64) (uint64, error) {
	unsupported := func(why string) (uint64, error) {
		return 0, fmt.Errorf("client: copy ino %d to %d: erasure-coded, %s: %w", ss.ino, ds.ino, why, syscall.EOPNOTSUPP)
	}
	ds.mu.Lock()
	dl := ds.layout
	ds.mu.Unlock()
	if !sameGeometry(sl, dl) {
		return unsupported(fmt.Sprintf("layouts %v and %v do not share rows", sl, dl))
	}
	if sl.StripeSize > storagerpc.MaxIO {
		return unsupported("stripe units larger than one storage request")
	}
	rb := sl.RowBytes()
	if srcOff%rb != dstOff%rb {
		return unsupported("the rows of the two ranges do not line up")
	}
	head := (rb - srcOff%rb) % rb
	if head >= n || n-head < rb {
		return unsupported("no whole row in the range")
	}
	if _, ok := c.storage.(proto.RowCopier); !ok {
		return unsupported("the storage service cannot copy rows")
	}
	if _, err := c.rowVersions(); err != nil {
		return unsupported(err.Error())
	}
	rows := (n - head) / rb
	tail := n - head - rows*rb
	if rows*rb > ecCopyMax {
		// A short count, true to what was copied: the caller (the
		// kernel, cp) asks again for the rest, each call well within
		// the RPC timeout.
		rows, tail = max(1, ecCopyMax/rb), 0
		n = head + rows*rb
	}
	dl = ds.beginTruncate()
	defer ds.endTruncate()
	if !sameGeometry(sl, dl) || !usable(sl) || !usable(dl) {
		return unsupported(fmt.Sprintf("layouts %v and %v do not share rows", sl, dl))
	}
	if ss.caps.get(proto.AccessRead) == nil {
		return 0, fmt.Errorf("client: copy from ino %d: not open for reading: %w", ss.ino, syscall.EBADF)
	}
	rctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	fail := func(err error) (uint64, error) {
		if errors.Is(err, syscall.ENOSYS) {
			// Never ENOSYS to the kernel (it would turn copy_file_range
			// off for the mount); the kernel copies again on EOPNOTSUPP.
			return 0, fmt.Errorf("client: copy ino %d to %d: %w (%v)", ss.ino, ds.ino, syscall.EOPNOTSUPP, err)
		}
		return 0, fmt.Errorf("client: copy ino %d to %d: %w", ss.ino, ds.ino, err)
	}
	if head > 0 {
		if err := c.ecCopyThrough(rctx, ss, sl, srcOff, ds, dl, dstOff, head); err != nil {
			return fail(err)
		}
	}
	qs0, qd0 := (srcOff+head)/rb, (dstOff+head)/rb
	var onServers, through atomic.Int64
	sem := make(chan struct{}, ecCopyPar)
	err := parallel(int(rows), func(i int) error {
		sem <- struct{}{}
		defer func() { <-sem }()
		qs, qd := qs0+uint64(i), qd0+uint64(i)
		done, err := c.ecCopyRow(rctx, ss, sl, qs, ds, dl, qd)
		if err != nil {
			return err
		}
		if done {
			onServers.Add(1)
			return nil
		}
		through.Add(1)
		return c.ecCopyThrough(rctx, ss, sl, qs*rb, ds, dl, qd*rb, rb)
	})
	if err != nil {
		return fail(err)
	}
	if tail > 0 {
		if err := c.ecCopyThrough(rctx, ss, sl, srcOff+n-tail, ds, dl, dstOff+n-tail, tail); err != nil {
			return fail(err)
		}
	}
	c.log.Debug("ec copy", "src", ss.ino, "dst", ds.ino, "bytes", n, "rows_on_servers", onServers.Load(),
		"rows_through_client", through.Load(), "head", head, "tail", tail)
	ds.copied(dl, dstOff, n)
	return n, nil
}

// ecCopyRow copies source row qs of ss to destination row qd of ds on the
// storage servers (see above), under the destination row's lock. done is
// false when it could not, and nothing it wrote is to be trusted: the
// caller copies the row through this client, which rewrites every shard
// of it with a new tag.
func (c *Client) ecCopyRow(ctx context.Context, ss *inodeState, sl layout.Layout, qs uint64, ds *inodeState, dl layout.Layout, qd uint64) (done bool, err error) {
	rc, ok := c.storage.(proto.RowCopier)
	if !ok {
		return false, nil
	}
	rv, err := c.rowVersions()
	if err != nil {
		return false, nil
	}
	mu := c.rows.lock(ds.ino, ds.gen, qd)
	mu.Lock()
	defer mu.Unlock()
	sl, dl = ss.currentLayout(sl), ds.currentLayout(dl) // with the stale marks made meanwhile
	s, w := sl.StripeSize, sl.Width()
	gs, offS := int(qs%uint64(sl.StripeCount)), (qs/uint64(sl.StripeCount))*s
	gd, offD := int(qd%uint64(dl.StripeCount)), (qd/uint64(dl.StripeCount))*s
	for j := range w {
		if !c.usable(sl, sl.Slot(gs, j)) {
			return false, nil // the client's read reconstructs it
		}
	}
	vers := make([]proto.RowVersion, w)
	// A server that does not answer is given MirrorGrace, not the RPC
	// timeout: the row can still be copied through the client.
	gctx, cancel := context.WithTimeout(ctx, c.mirrorGrace())
	err = parallel(w, func(j int) error {
		slot := sl.Slot(gs, j)
		err := ss.withCap(gctx, proto.AccessRead, func(ctx context.Context) (err error) {
			_, vers[j], err = rv.ReadRow(ctx, sl.Targets[slot], ss.objectOf(slot), offS, s, nil)
			return err
		})
		if err != nil {
			c.noteSuspect(sl.Targets[slot])
		}
		return err
	})
	cancel()
	if err != nil {
		c.log.Warn("ec copy: a source shard's version is unreadable: copying the row through the client", "ino", ss.ino, "row", qs, "err", err)
		return false, nil
	}
	for _, v := range vers {
		if v != vers[0] || v.Dirty {
			c.log.Warn("ec copy: the source row's shards hold different versions: copying the row through the client", "ino", ss.ino, "row", qs, "versions", vers)
			return false, nil
		}
	}
	srcCap := ss.caps.get(proto.AccessRead) // as renewed by the reads above
	if srcCap == nil {
		return false, fmt.Errorf("client: copy from ino %d: not open for reading: %w", ss.ino, syscall.EBADF)
	}
	tag := newRowTag()
	var slots []int
	for j := range w {
		if slot := dl.Slot(gd, j); !dl.IsStale(slot) {
			slots = append(slots, slot)
		}
	}
	var redo atomic.Bool
	err = c.fanOut(ctx, ds, dl, slots, fmt.Sprintf("ec copy row %d to", qd), func(ctx context.Context, slot int) error {
		from := sl.Slot(gs, slot-dl.Slot(gd, 0))
		return ds.withCap(ctx, proto.AccessWrite, func(ctx context.Context) error {
			err := rc.CopyRow(ctx, dl.Targets[slot], ds.objectOf(slot), proto.RowCopy{
				SrcTarget: sl.Targets[from], Src: ss.objectOf(from), SrcOff: offS, SrcCap: srcCap.b, Expect: vers[0],
				Off: offD, Unit: s, Len: s, Tag: tag})
			switch {
			case errors.Is(err, syscall.EAGAIN), // the source changed since its versions were read
				errors.Is(err, syscall.ENOSYS),    // a server without OpCopyRow
				errors.Is(err, syscall.EXDEV),     // a server without peers
				errors.Is(err, syscall.EREMOTEIO), // the source's server failed, not this shard
				errors.Is(err, syscall.EACCES):    // the source's capability, say: not the shard's fault
				c.log.Debug("ec copy: a shard was not copied on its server", "ino", ds.ino, "slot", slot, "err", err)
				redo.Store(true)
				return nil
			}
			return err
		})
	})
	if err != nil {
		return false, err
	}
	return !redo.Load(), nil
}

// ecCopyThrough copies n bytes of ss at srcOff to ds at dstOff through
// this client: read as a read of ss (shards reconstructed if need be),
// written as a write of ds (ecWrite), at most ecCopyChunk and one
// destination row at a time.
func (c *Client) ecCopyThrough(ctx context.Context, ss *inodeState, sl layout.Layout, srcOff uint64, ds *inodeState, dl layout.Layout, dstOff, n uint64) error {
	rb := dl.RowBytes()
	buf := make([]byte, min(n, rb, ecCopyChunk))
	for off := uint64(0); off < n; {
		k := min(n-off, uint64(len(buf)), rb-(dstOff+off)%rb)
		p := buf[:k]
		if err := c.readRange(ctx, ss, ss.currentLayout(sl), srcOff+off, p); err != nil {
			return err
		}
		if err := c.ecWrite(ctx, ds, ds.currentLayout(dl), dstOff+off, p); err != nil {
			return err
		}
		off += k
	}
	return nil
}
