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

// Protected (mirrored) files: every stripe has Width() copies, one per
// slot of the layout, each on a target of a distinct server.
//
//   - Writes, truncates and syncs go to every fresh copy of the stripe.
//     A stale copy is left alone until Resync repairs it; the metadata
//     server refuses to clear its mark while any client has the file open
//     for writing (a client that opened it before the repair may think it
//     stale), and every open takes the marks afresh (mergeAttr).
//     When at least one fresh copy succeeded and others failed (their
//     server is down, stopped or cut off), the failed copies are marked
//     stale on the metadata server (proto.StaleMarker) before the
//     operation succeeds: a copy that missed a write is never read again
//     until repaired. If no fresh copy succeeded, or the mark fails, the
//     operation fails as a RAID-0 one would.
//   - A copy that has not answered MirrorGrace (or 4 times what the first
//     copy took, if more: on a loaded machine every copy is slow) after
//     another copy of the same request succeeded is given up on (and
//     marked stale), so a stopped server costs a write MirrorGrace, not
//     the RPC timeout.
//   - Reads go to one fresh copy, chosen by the stripe unit so that reads
//     of one file spread over all copies, preferring copies whose target
//     did not fail recently; a copy that fails (or does not answer within
//     MirrorGrace while others remain) is skipped for the next. Reads
//     never go to a stale copy.

// DefaultMirrorGrace is Config.MirrorGrace when it is 0.
const DefaultMirrorGrace = 2 * time.Second

// suspectFor is how long a target that failed a request is tried last.
const suspectFor = 10 * time.Second

// objectOf names the object in slot of st's file.
func (st *inodeState) objectOf(slot int) proto.ObjectID {
	return proto.ObjectID{Ino: st.ino, Stripe: uint32(slot), Gen: st.gen}
}

// copyOp is a storage operation on one object.
type copyOp func(ctx context.Context, target proto.TargetID, obj proto.ObjectID) error

// onStripe runs op on the object(s) of data column col: the one object of
// a RAID-0 stripe, every fresh copy of a mirrored one (see above), the data
// shard of an EC stripe (skipped while stale: reads reconstruct it). what
// names the operation in errors.
func (c *Client) onStripe(ctx context.Context, st *inodeState, l layout.Layout, col int, what string, op copyOp) error {
	var slots []int
	switch l.Kind {
	case layout.Mirror:
		for j := range l.Width() {
			if slot := l.Slot(col, j); !l.IsStale(slot) {
				slots = append(slots, slot)
			}
		}
	case layout.EC:
		if slot := l.ColumnSlot(col); !l.IsStale(slot) {
			slots = append(slots, slot)
		}
	default:
		slot := l.Slot(col, 0)
		if err := op(ctx, l.Targets[slot], st.objectOf(slot)); err != nil {
			return fmt.Errorf("client: %s ino %d stripe %d on target %d: %w", what, st.ino, col, l.Targets[slot], err)
		}
		return nil
	}
	return c.fanOut(ctx, st, l, slots, what, func(ctx context.Context, slot int) error {
		return op(ctx, l.Targets[slot], st.objectOf(slot))
	})
}

// fanOut runs op on the objects of slots (all fresh) concurrently. It
// succeeds when every failed slot was then marked stale (for a mirror, at
// least one copy must have succeeded; for EC, the metadata server refuses
// a mark that leaves fewer than ECData shards of a stripe fresh). Slots
// that have not answered MirrorGrace after another succeeded are given up
// on.
func (c *Client) fanOut(ctx context.Context, st *inodeState, l layout.Layout, slots []int, what string, op func(ctx context.Context, slot int) error) error {
	if len(slots) == 0 {
		return nil
	}
	type result struct {
		slot int
		err  error
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan result, len(slots))
	start := time.Now()
	for _, slot := range slots {
		go func() {
			results <- result{slot, op(cctx, slot)}
		}()
	}
	var (
		ok     int
		failed []uint32
		first  error
		grace  <-chan time.Time
	)
	for got := 0; got < len(slots); {
		select {
		case r := <-results:
			got++
			if r.err == nil {
				ok++
				if grace == nil && got < len(slots) && !st.strict {
					// A loaded machine slows every copy alike: the others
					// get at least 4 times what the first one took.
					t := time.NewTimer(max(c.mirrorGrace(), 4*time.Since(start)))
					defer t.Stop()
					grace = t.C
				}
				continue
			}
			c.noteSuspect(l.Targets[r.slot])
			failed = append(failed, uint32(r.slot))
			if first == nil {
				first = fmt.Errorf("client: %s ino %d slot %d on target %d: %w", what, st.ino, r.slot, l.Targets[r.slot], r.err)
			}
		case <-grace:
			grace = nil
			cancel() // the copies still out are given up on
		}
	}
	if len(failed) == 0 {
		return nil
	}
	if (ok == 0 && l.Kind != layout.EC) || st.strict {
		if ok == 0 {
			// Logged, since the error reaches the caller as a bare errno
			// (ETIMEDOUT, EIO): which copies failed, how, and after how
			// long, for whoever wonders why a mirrored write failed.
			c.log.Warn("no copy of a mirrored stripe succeeded", "op", what, "ino", st.ino, "slots", failed,
				"after", time.Since(start).Round(time.Millisecond), "err", first)
		}
		return first
	}
	c.log.Warn("an object missed a write: marking it stale", "ino", st.ino, "slots", failed, "err", first)
	if err := c.markStale(ctx, st, failed); err != nil {
		return fmt.Errorf("%w (and marking it stale failed: %w)", first, err)
	}
	return nil
}

// markStale records on the metadata server that slots missed a write, and
// in st's layout.
func (c *Client) markStale(ctx context.Context, st *inodeState, slots []uint32) error {
	sm, ok := c.staleMarker()
	if !ok {
		return fmt.Errorf("client: the metadata service cannot mark copies stale: %w", syscall.ENOSYS)
	}
	rctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	defer c.changing(0, "", st.ino)()
	if _, err := sm.MarkStale(rctx, st.ino, st.gen, slots); err != nil {
		return err
	}
	st.mu.Lock()
	if len(st.layout.Targets) > 0 {
		st.layout = st.layout.WithStale(slots...)
	}
	st.mu.Unlock()
	return nil
}

func (c *Client) staleMarker() (proto.StaleMarker, bool) {
	m := c.meta
	if r, ok := m.(releasingMeta); ok {
		m = r.MetaService
	}
	sm, ok := m.(proto.StaleMarker)
	return sm, ok
}

func (c *Client) mirrorGrace() time.Duration {
	if c.cfg.MirrorGrace > 0 {
		return c.cfg.MirrorGrace
	}
	return DefaultMirrorGrace
}

// noteSuspect remembers that target failed a request just now.
func (c *Client) noteSuspect(t proto.TargetID) {
	c.suspects.Store(t, time.Now())
}

// usable reports whether slot of layout l can be read as it is: fresh,
// and its target not failing lately.
func (c *Client) usable(l layout.Layout, slot int) bool {
	return !l.IsStale(slot) && !c.suspect(l.Targets[slot])
}

func (c *Client) suspect(t proto.TargetID) bool {
	v, ok := c.suspects.Load(t)
	if !ok {
		return false
	}
	if time.Since(v.(time.Time)) > suspectFor {
		c.suspects.Delete(t)
		return false
	}
	return true
}

// readOrder returns the fresh copies of stripe to read from, best first:
// starting at a copy chosen by unit (so a file's reads spread over its
// copies), targets that failed recently last.
func (c *Client) readOrder(l layout.Layout, stripe int, unit uint64) []int {
	w := l.Width()
	var good, bad []int
	for k := range w {
		slot := l.Slot(stripe, int((unit+uint64(k))%uint64(w)))
		if l.IsStale(slot) {
			continue
		}
		if c.suspect(l.Targets[slot]) {
			bad = append(bad, slot)
		} else {
			good = append(good, slot)
		}
	}
	return append(good, bad...)
}

// readExtent reads extent e of st's file into dst and returns the bytes
// the object had there (an object missing reads as empty).
func (c *Client) readExtent(ctx context.Context, st *inodeState, l layout.Layout, e layout.Extent, dst []byte) (int, error) {
	read := func(ctx context.Context, slot int) (got int, err error) {
		err = st.withCap(ctx, proto.AccessRead, func(ctx context.Context) (err error) {
			got, err = c.storage.Read(ctx, l.Targets[slot], st.objectOf(slot), e.ObjOff, dst)
			return err
		})
		if errors.Is(err, syscall.ENOENT) {
			return 0, nil // an object never written is a hole
		}
		return got, err
	}
	if l.Kind == layout.EC {
		k := int(l.ECData)
		if err := c.ecReadShard(ctx, st, l, e.Stripe/k, e.Stripe%k, e.ObjOff, dst[:e.Len], true); err != nil {
			return 0, fmt.Errorf("client: read ino %d [%d,+%d): %w", st.ino, e.FileOff, e.Len, err)
		}
		return int(e.Len), nil
	}
	if l.Kind != layout.Mirror {
		slot := l.Slot(e.Stripe, 0)
		got, err := read(ctx, slot)
		if err == nil {
			if err = c.checkLength(ctx, st, l, e, got); err != nil && !errors.Is(err, errMoved) {
				c.log.Error("lost data: an object is shorter than its file", "ino", st.ino, "target", l.Targets[slot], "slot", slot, "err", err)
			}
		}
		if err != nil {
			return 0, fmt.Errorf("client: read ino %d [%d,+%d) from target %d: %w", st.ino, e.FileOff, e.Len, l.Targets[slot], err)
		}
		return got, nil
	}
	order := c.readOrder(l, e.Stripe, e.FileOff/l.StripeSize)
	var errs []error
	var short []uint32 // copies found shorter than the file: lost data
	for i, slot := range order {
		actx, cancel := ctx, context.CancelFunc(func() {})
		if i < len(order)-1 {
			actx, cancel = withLazyDeadline(ctx, c.mirrorGrace())
		}
		got, err := read(actx, slot)
		cancel()
		if err == nil {
			if err = c.checkLength(ctx, st, l, e, got); errors.Is(err, errMoved) {
				return 0, err // every copy was replaced: the handle follows
			} else if err != nil {
				c.log.Error("lost data in a copy: an object is shorter than its file", "ino", st.ino, "target", l.Targets[slot], "slot", slot, "err", err)
				short = append(short, uint32(slot))
			}
		}
		if err == nil {
			if len(short) > 0 {
				// Another copy has the bytes: the short ones are marked
				// stale, repaired by resync, never read again.
				if merr := c.markStale(ctx, st, short); merr != nil {
					c.log.Warn("marking a short copy stale failed", "ino", st.ino, "slots", short, "err", merr)
				}
			}
			return got, nil
		}
		if !errors.Is(err, errShortObject) {
			c.noteSuspect(l.Targets[slot])
		}
		errs = append(errs, fmt.Errorf("copy on target %d: %w", l.Targets[slot], err))
		if i < len(order)-1 {
			c.log.Warn("read from a copy failed, reading another", "ino", st.ino, "stripe", e.Stripe, "target", l.Targets[slot], "err", err)
		}
	}
	if len(errs) == 0 {
		errs = append(errs, syscall.EIO)
	}
	return 0, fmt.Errorf("client: read ino %d [%d,+%d): every copy failed: %w", st.ino, e.FileOff, e.Len, errors.Join(errs...))
}

// resyncChunk is how much of an object Resync copies per request.
const resyncChunk = 1 << 20

// Resync repairs the stale copies of a mirrored or erasure-coded file (and,
// for EC, re-encodes rows whose shards' versions disagree, see
// ecRepairRows): it copies each
// stale object's share of the file from a fresh copy of its stripe
// (holes become zeros), truncates it to its length, syncs it, and then
// clears the stale marks on the metadata server. It returns how many
// copies it repaired (0 for a file with none, or one that is not
// mirrored). The metadata server refuses the clearing (EBUSY) if the file
// is open for writing or was written since the repair began; the copies
// then stay stale and Resync can simply run again. The caller needs read
// and write permission.
func (c *Client) Resync(ctx context.Context, ino proto.Ino) (int, error) {
	sm, ok := c.staleMarker()
	if !ok {
		return 0, fmt.Errorf("client: the metadata service cannot repair copies: %w", syscall.ENOSYS)
	}
	rctx, cancel := c.rpcCtx(ctx)
	a, err := c.meta.GetAttr(rctx, ino)
	cancel()
	if err != nil {
		return 0, err
	}
	if !a.IsRegular() {
		return 0, fmt.Errorf("client: resync of inode %d: not a regular file: %w", ino, syscall.EINVAL)
	}
	l := a.Layout
	if (l.Kind != layout.Mirror || len(l.Stale) == 0) && l.Kind != layout.EC {
		return 0, nil
	}
	st := &inodeState{c: c, ino: ino, gen: a.Gen}
	defer st.stopCaps()
	if _, err := st.renewCap(ctx, proto.AccessReadWrite, nil); err != nil {
		return 0, err
	}
	if l.Kind == layout.EC {
		// Rows a writer left half-updated (it died between its shard
		// writes) are re-encoded first: a stale shard is rebuilt from
		// rows whose fresh shards agree.
		if _, err := c.ecRepairRows(ctx, st, l, a.Size); err != nil {
			return 0, err
		}
		if len(l.Stale) == 0 {
			return 0, nil
		}
	}
	for _, slot := range l.Stale {
		resync := c.resyncSlot
		if l.Kind == layout.EC {
			resync = c.ecResyncSlot
		}
		if err := resync(ctx, st, l, int(slot), a.Size); err != nil {
			return 0, err
		}
	}
	rctx, cancel = c.rpcCtx(ctx)
	defer cancel()
	defer c.changing(0, "", ino)()
	if _, err := sm.ClearStale(rctx, ino, a.Gen, l.Stale, a.Mtime); err != nil {
		return 0, fmt.Errorf("client: resync of inode %d: clear stale marks: %w", ino, err)
	}
	c.log.Info("stale copies repaired", "ino", ino, "slots", l.Stale)
	return len(l.Stale), nil
}

// resyncSlot copies the object in slot (stale) from a fresh copy of its
// stripe, for a file of size bytes.
func (c *Client) resyncSlot(ctx context.Context, st *inodeState, l layout.Layout, slot int, size uint64) error {
	defer st.changingAllocation()()
	w := l.Width()
	stripe := slot / w
	n := l.ObjectSize(size, stripe)
	dst := l.Targets[slot]
	buf := make([]byte, min(n, resyncChunk))
	rctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	// Fence the copy before repairing it: a write sent to it before it was
	// marked stale (its server stopped or cut off), delivered only now,
	// carries an older capability and is refused, so it cannot overwrite
	// the repair.
	rv, err := c.rowVersions()
	if err != nil {
		return err
	}
	if err := st.withCap(rctx, proto.AccessWrite, func(ctx context.Context) error {
		return rv.Fence(ctx, dst, st.objectOf(slot))
	}); err != nil {
		return fmt.Errorf("client: resync ino %d slot %d: fence on target %d: %w", st.ino, slot, dst, err)
	}
	for off := uint64(0); off < n; {
		p := buf[:min(uint64(len(buf)), n-off)]
		e := layout.Extent{Stripe: stripe, FileOff: off, ObjOff: off, Len: uint64(len(p))}
		got, err := c.readExtent(rctx, st, l, e, p)
		if err != nil {
			return fmt.Errorf("client: resync ino %d slot %d: %w", st.ino, slot, err)
		}
		clear(p[got:])
		if err := st.withCap(rctx, proto.AccessWrite, func(ctx context.Context) error {
			_, err := c.storage.Write(ctx, dst, st.objectOf(slot), off, p)
			return err
		}); err != nil {
			return fmt.Errorf("client: resync ino %d slot %d: write to target %d: %w", st.ino, slot, dst, err)
		}
		off += uint64(len(p))
	}
	err = st.withCap(rctx, proto.AccessWrite, func(ctx context.Context) error {
		if err := c.storage.Truncate(ctx, dst, st.objectOf(slot), n); err != nil {
			return err
		}
		return c.storage.Sync(ctx, dst, st.objectOf(slot))
	})
	if err != nil {
		return fmt.Errorf("client: resync ino %d slot %d: truncate and sync on target %d: %w", st.ino, slot, dst, err)
	}
	return nil
}
