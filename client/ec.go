package client

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/klauspost/reedsolomon"

	"github.com/weft-fs/weft/layout"
	"github.com/weft-fs/weft/proto"
)

// Erasure-coded files (layout.EC): each stripe has ECData data shards and
// ECParity parity shards, one object each on targets of distinct servers.
// The file's stripe units are dealt over the data shards of all stripes
// (layout.Columns); a row of a stripe is ECData units that are contiguous
// in the file (layout.RowBytes), and parity unit r of a stripe is the
// Reed-Solomon parity (klauspost/reedsolomon) of its data units r.
//
//   - Writes go row by row, under a lock per row held by this client: a
//     write covering a whole row encodes parity from its own bytes; a
//     partial one reads the row's data and versions (reconstructing shards
//     that are stale or fail), merges, encodes, and writes every shard of
//     the row with one new tag, conditionally on the versions read (see
//     "Object versions" in doc.go); a conflict redoes the row. Shards that
//     fail are marked stale; the metadata server refuses a mark that would
//     leave fewer than ECData shards of a stripe fresh, and then the write
//     fails.
//   - Parity of a row is written as long as the row's first data shard
//     reaches (the rest would be parity of zeros, and reads as zeros).
//   - Reads read the data shard; if it is stale, fails, does not answer
//     within MirrorGrace, or is shorter than the file (ObjectsSized), they
//     read the same range of the other shards with their versions and
//     decode it from shards of one version (a target that failed is not
//     asked first again for a while).
//   - Truncate truncates the data shards to their shares and the parity
//     to the first shard's, then recomputes the parity of the row the new
//     end falls in.
//
// Limits: a row a crash left with mixed versions is repaired only by its
// next write or by resync; until then a lost data shard of it decodes to
// the row before the unfinished update (or EIO with fewer than ECData
// shards agreeing).

// rowLocks serializes read-modify-write of one row within this client.
type rowLocks struct {
	seed  maphash.Seed
	locks [512]sync.Mutex
}

func (r *rowLocks) lock(ino proto.Ino, gen, row uint64) *sync.Mutex {
	var h maphash.Hash
	h.SetSeed(r.seed)
	var b [24]byte
	for i := range 8 {
		b[i] = byte(uint64(ino) >> (8 * i))
		b[8+i] = byte(gen >> (8 * i))
		b[16+i] = byte(row >> (8 * i))
	}
	h.Write(b[:])
	return &r.locks[h.Sum64()%uint64(len(r.locks))]
}

// coder returns the Reed-Solomon coder of l.
func (c *Client) coder(l layout.Layout) (reedsolomon.Encoder, error) {
	key := [2]uint8{l.ECData, l.ECParity}
	if e, ok := c.coders.Load(key); ok {
		return e.(reedsolomon.Encoder), nil
	}
	e, err := reedsolomon.New(int(l.ECData), int(l.ECParity))
	if err != nil {
		return nil, fmt.Errorf("client: ec %d+%d: %w", l.ECData, l.ECParity, err)
	}
	c.coders.Store(key, e)
	return e, nil
}

// ecWrite writes data at file offset off, row by row.
func (c *Client) ecWrite(ctx context.Context, st *inodeState, l layout.Layout, off uint64, data []byte) error {
	rb := l.RowBytes()
	n := uint64(len(data))
	first, last := off/rb, (off+n-1)/rb
	return parallel(int(last-first+1), func(i int) error {
		q := first + uint64(i)
		lo, hi := max(off, q*rb), min(off+n, (q+1)*rb)
		mu := c.rows.lock(st.ino, st.gen, q)
		mu.Lock()
		defer mu.Unlock()
		st.mu.Lock()
		end := max(st.size(), hi)
		st.mu.Unlock()
		return c.ecUpdateRow(ctx, st, l, q, lo-q*rb, data[lo-off:hi-off], end, true)
	})
}

// rowVersions returns the storage's versioned access (proto.RowVersioner),
// which EC writes and reconstructions need.
func (c *Client) rowVersions() (proto.RowVersioner, error) {
	rv, ok := c.storage.(proto.RowVersioner)
	if !ok {
		return nil, fmt.Errorf("client: the storage service has no object versions (needed by erasure-coded files): %w", syscall.ENOSYS)
	}
	return rv, nil
}

// newRowTag is the version tag of one attempt at updating a row: random,
// so two writers (or two attempts) never set the same tag.
func newRowTag() uint64 { return rand.Uint64() | 1 }

// maxRowAttempts bounds the retries of a row update that keeps meeting
// other writers' versions (each retry waits a random while longer).
const maxRowAttempts = 200

// ecUpdateRow writes p at offset inRow of row q (the caller holds its
// lock) of a file of size end, and the row's parity. With p empty it
// recomputes the parity from the data (after a truncate, which passes
// checkLen false: the data shards were just cut below the size the
// metadata server still records, and are right).
//
// Every shard of the row is written with the attempt's tag: the changed
// bytes of data shards, all parity, and an empty write (the tag only) to
// the data shards whose bytes did not change. A partial row is read with
// its versions first and each write is conditional on the version read, so
// a write that meets another writer's (or a repair's) tag changes nothing
// on that shard; the attempt is then done again from a fresh read, which
// also repairs what the interrupted attempts left (see "Object versions"
// in doc.go).
func (c *Client) ecUpdateRow(ctx context.Context, st *inodeState, l layout.Layout, q, inRow uint64, p []byte, end uint64, checkLen bool) error {
	rowOff := q * l.RowBytes()
	if end <= rowOff {
		return nil
	}
	for attempt := 0; ; attempt++ {
		conflict, err := c.ecUpdateRowOnce(ctx, st, l, q, inRow, p, end, checkLen)
		if err != nil || !conflict {
			return err
		}
		if attempt+1 >= maxRowAttempts {
			return fmt.Errorf("client: ec write ino %d row %d: %d attempts met other writers' versions: %w", st.ino, q, maxRowAttempts, syscall.EAGAIN)
		}
		// Another writer of the row (another mount) won some shards: wait
		// a random while, growing, so one of the two finishes first.
		wait := time.Duration(rand.Int64N(int64(time.Millisecond) << min(attempt, 6)))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		st.mu.Lock()
		if cur := st.layout; len(cur.Targets) > 0 {
			l = cur // with stale marks made by the attempt
		}
		st.mu.Unlock()
	}
}

// ecUpdateRowOnce is one attempt of ecUpdateRow; conflict reports that a
// conditional write met another version (the attempt must be redone).
func (c *Client) ecUpdateRowOnce(ctx context.Context, st *inodeState, l layout.Layout, q, inRow uint64, p []byte, end uint64, checkLen bool) (conflict bool, err error) {
	enc, err := c.coder(l)
	if err != nil {
		return false, err
	}
	rv, err := c.rowVersions()
	if err != nil {
		return false, err
	}
	k, m, s := int(l.ECData), int(l.ECParity), l.StripeSize
	g := int(q % uint64(l.StripeCount))
	objOff := (q / uint64(l.StripeCount)) * s
	plen := min(s, end-q*l.RowBytes())
	full := inRow == 0 && uint64(len(p)) == l.RowBytes()
	shards := make([][]byte, k+m)
	for i := range shards {
		if full && i < k {
			// A whole row's data shards are p's units themselves: encoded
			// and sent from the caller's buffer, never copied (plen is
			// then s: the file reaches past the row).
			shards[i] = p[uint64(i)*s : uint64(i+1)*s]
			continue
		}
		// Parity is written whole by Encode; a partial row's data
		// shards are filled (or cleared) by ecReadRowShard.
		shards[i] = c.bufs.Get(int(plen))
		defer c.bufs.Put(shards[i])
	}
	vers := make([]proto.RowVersion, k+m)
	known := make([]bool, k+m) // vers[j] was read: write shard j on that condition
	if !full {
		// A partial row: the other bytes come from the data shards, read
		// with every shard's version.
		if err := parallel(k+m, func(j int) error {
			var err error
			vers[j], known[j], err = c.ecReadRowShard(ctx, st, l, g, j, objOff, shards[j], checkLen)
			return err
		}); err != nil {
			return false, err
		}
	}
	for i := 0; !full && i < len(p); {
		pos := inRow + uint64(i)
		j, at := int(pos/s), pos%s
		i += copy(shards[j][at:], p[i:])
	}
	if err := enc.Encode(shards); err != nil {
		return false, fmt.Errorf("client: ec encode ino %d row %d: %w", st.ino, q, err)
	}
	tag := newRowTag()
	writes := map[int]proto.RowWrite{}
	for j := range k + m {
		slot := l.Slot(g, j)
		if l.IsStale(slot) {
			continue
		}
		w := proto.RowWrite{Off: objOff, Unit: s, Cond: known[j], Expect: vers[j], Tag: tag}
		if j >= k {
			w.Data = shards[j]
		} else if a, b := max(inRow, uint64(j)*s), min(inRow+uint64(len(p)), uint64(j+1)*s); a < b {
			w.Off += a - uint64(j)*s
			w.Data = shards[j][a-uint64(j)*s : b-uint64(j)*s]
		} // else: unchanged, the tag only
		writes[slot] = w
	}
	slots := make([]int, 0, len(writes))
	for slot := range writes {
		slots = append(slots, slot)
	}
	var conflicts atomic.Int32
	err = c.fanOut(ctx, st, l, slots, fmt.Sprintf("ec write row %d", q), func(ctx context.Context, slot int) error {
		return st.withCap(ctx, proto.AccessWrite, func(ctx context.Context) error {
			_, err := rv.WriteRow(ctx, l.Targets[slot], st.objectOf(slot), writes[slot])
			if errors.Is(err, syscall.EAGAIN) {
				conflicts.Add(1) // not a failure of the shard: redo the row
				return nil
			}
			return err
		})
	})
	return conflicts.Load() > 0, err
}

// ecReadRowShard reads shard j of stripe g at objOff (data shards into
// dst, zeros where the object has none; of a parity shard only the
// version) and returns the shard's version in that row, and whether it
// was read. A data shard that is stale, fails or (with checkLen) is
// shorter than the file says is reconstructed from the other shards
// instead (its version is then not known).
func (c *Client) ecReadRowShard(ctx context.Context, st *inodeState, l layout.Layout, g, j int, objOff uint64, dst []byte, checkLen bool) (proto.RowVersion, bool, error) {
	slot := l.Slot(g, j)
	data := j < int(l.ECData)
	if c.usable(l, slot) {
		rv, err := c.rowVersions()
		if err != nil {
			return proto.RowVersion{}, false, err
		}
		buf := dst
		if !data {
			buf = nil
		}
		// The other shards can stand in: a server that does not answer
		// (stopped, cut off) is given MirrorGrace, not the RPC timeout.
		gctx, cancel := context.WithTimeout(ctx, c.mirrorGrace())
		var got int
		var v proto.RowVersion
		err = st.withCap(gctx, proto.AccessRead, func(ctx context.Context) (err error) {
			got, v, err = rv.ReadRow(ctx, l.Targets[slot], st.objectOf(slot), objOff, l.StripeSize, buf)
			return err
		})
		cancel()
		if errors.Is(err, syscall.ENOENT) {
			got, err = 0, nil
		}
		if err != nil {
			c.noteSuspect(l.Targets[slot])
		} else if checkLen && data {
			col := g*int(l.ECData) + j
			err = c.checkLength(ctx, st, l, layout.Extent{Stripe: col, ObjOff: objOff, Len: uint64(len(dst))}, got)
		}
		if err == nil {
			clear(buf[got:])
			return v, true, nil
		}
		if errors.Is(err, errMoved) {
			// Every shard was replaced: the other shards would decode
			// zeros. The handle follows (follow.go).
			return proto.RowVersion{}, false, err
		}
		c.log.Warn("ec shard unreadable", "ino", st.ino, "slot", slot, "err", err)
	}
	if !data {
		return proto.RowVersion{}, false, nil // parity is recomputed, not read
	}
	_, err := c.ecReconstructRow(ctx, st, l, g, j, objOff, dst)
	return proto.RowVersion{}, false, err
}

// ecReadShard fills dst with data shard j of stripe g at objOff (zeros
// where the object has none), reconstructing it from the other shards if
// it is stale, fails or (with checkLen) is shorter than the file says.
func (c *Client) ecReadShard(ctx context.Context, st *inodeState, l layout.Layout, g, j int, objOff uint64, dst []byte, checkLen bool) error {
	slot := l.Slot(g, j)
	if c.usable(l, slot) {
		// The other shards can stand in: a server that does not answer
		// (stopped, cut off) is given MirrorGrace, not the RPC timeout.
		gctx, cancel := context.WithTimeout(ctx, c.mirrorGrace())
		got, err := c.readSlot(gctx, st, l, slot, objOff, dst)
		cancel()
		if err != nil {
			c.noteSuspect(l.Targets[slot])
		} else if checkLen {
			col := g*int(l.ECData) + j
			err = c.checkLength(ctx, st, l, layout.Extent{Stripe: col, ObjOff: objOff, Len: uint64(len(dst))}, got)
		}
		if err == nil {
			clear(dst[got:])
			return nil
		}
		if errors.Is(err, errMoved) {
			return err // as in ecReadRowShard
		}
		c.log.Warn("ec shard unreadable, reconstructing it", "ino", st.ino, "slot", slot, "err", err)
	}
	_, err := c.ecReconstructRow(ctx, st, l, g, j, objOff, dst)
	if err != nil {
		c.log.Warn("ec shard could not be reconstructed", "ino", st.ino, "stripe", g, "shard", j, "off", objOff, "err", err)
	}
	return err
}

// readSlot reads the object of slot at off into dst; a missing object
// reads as empty.
func (c *Client) readSlot(ctx context.Context, st *inodeState, l layout.Layout, slot int, off uint64, dst []byte) (got int, err error) {
	err = st.withCap(ctx, proto.AccessRead, func(ctx context.Context) (err error) {
		got, err = c.storage.Read(ctx, l.Targets[slot], st.objectOf(slot), off, dst)
		return err
	})
	if errors.Is(err, syscall.ENOENT) {
		return 0, nil
	}
	return got, err
}

// ecReconstructRow computes shard want (data or parity) of stripe g over
// [objOff, objOff+len(dst)), which lies in one row, from the other fresh
// shards of the stripe, and returns the version it was decoded at. Only
// shards of one version, read clean, are decoded together: after a crash
// or a race between two writers a row's shards may hold different
// versions, and decoding across them would give wrong bytes. The version
// held by most shards is used (it needs ECData of them); with none that
// large the row cannot be decoded and the read fails with EIO.
func (c *Client) ecReconstructRow(ctx context.Context, st *inodeState, l layout.Layout, g, want int, objOff uint64, dst []byte) (proto.RowVersion, error) {
	enc, err := c.coder(l)
	if err != nil {
		return proto.RowVersion{}, err
	}
	rv, err := c.rowVersions()
	if err != nil {
		return proto.RowVersion{}, err
	}
	w := l.Width()
	shards := make([][]byte, w)
	vers := make([]proto.RowVersion, w)
	errs := make([]error, w)
	var wg sync.WaitGroup
	for j := range w {
		slot := l.Slot(g, j)
		if j == want || l.IsStale(slot) {
			continue
		}
		wg.Go(func() {
			buf := make([]byte, len(dst))
			var got int
			err := st.withCap(ctx, proto.AccessRead, func(ctx context.Context) (err error) {
				got, vers[j], err = rv.ReadRow(ctx, l.Targets[slot], st.objectOf(slot), objOff, l.StripeSize, buf)
				return err
			})
			if errors.Is(err, syscall.ENOENT) {
				got, err = 0, nil
			}
			if err != nil {
				errs[j] = err
				c.noteSuspect(l.Targets[slot])
				return
			}
			clear(buf[got:])
			shards[j] = buf
		})
	}
	wg.Wait()
	count := map[proto.RowVersion]int{}
	var best proto.RowVersion
	have := 0
	for j, sh := range shards {
		if sh == nil || vers[j].Dirty {
			continue
		}
		have++
		count[vers[j]]++
		if n := count[vers[j]]; n > count[best] || (n == count[best] && vers[j].Tag < best.Tag) {
			best = vers[j]
		}
	}
	if count[best] < int(l.ECData) || best.Dirty {
		err := fmt.Errorf("client: ino %d stripe %d: %d of %d shards readable, at most %d of one version, %d needed: %w",
			st.ino, g, have, w, count[best], l.ECData, syscall.EIO)
		if joined := errors.Join(errs...); joined != nil {
			err = fmt.Errorf("%w (%w)", err, joined)
		}
		return proto.RowVersion{}, err
	}
	for j := range shards {
		if shards[j] != nil && vers[j] != best {
			shards[j] = nil // another version: not part of best's code word
		}
	}
	if want < int(l.ECData) {
		err = enc.ReconstructData(shards)
	} else {
		err = enc.Reconstruct(shards)
	}
	if err != nil {
		return proto.RowVersion{}, fmt.Errorf("client: ino %d stripe %d: reconstruct: %w (%w)", st.ino, g, err, syscall.EIO)
	}
	copy(dst, shards[want])
	return best, nil
}

// ecSync syncs data column col's shard and its stripe's parity shards.
func (c *Client) ecSync(ctx context.Context, st *inodeState, l layout.Layout, col int) error {
	k := int(l.ECData)
	g := col / k
	var slots []int
	for _, slot := range append([]int{l.ColumnSlot(col)}, parityRange(l, g)...) {
		if !l.IsStale(slot) {
			slots = append(slots, slot)
		}
	}
	return c.fanOut(ctx, st, l, slots, "sync", func(ctx context.Context, slot int) error {
		return st.withCap(ctx, proto.AccessWrite, func(ctx context.Context) error {
			return c.storage.Sync(ctx, l.Targets[slot], st.objectOf(slot))
		})
	})
}

func parityRange(l layout.Layout, g int) []int {
	var out []int
	for j := int(l.ECData); j < l.Width(); j++ {
		out = append(out, l.Slot(g, j))
	}
	return out
}

// ecTruncate sets every data shard to its share of size and every parity
// shard to its stripe's first shard's, then recomputes the parity of the
// row size falls in.
func (c *Client) ecTruncate(ctx context.Context, st *inodeState, l layout.Layout, size uint64) error {
	k := int(l.ECData)
	var slots []int
	lengths := map[int]uint64{}
	for g := range int(l.StripeCount) {
		for j := range l.Width() {
			slot := l.Slot(g, j)
			if l.IsStale(slot) {
				continue
			}
			col := g * k // parity: as long as the stripe's first shard
			if j < k {
				col += j
			}
			slots = append(slots, slot)
			lengths[slot] = l.ObjectSize(size, col)
		}
	}
	err := c.fanOut(ctx, st, l, slots, "truncate", func(ctx context.Context, slot int) error {
		return st.withCap(ctx, proto.AccessWrite, func(ctx context.Context) error {
			return c.storage.Truncate(ctx, l.Targets[slot], st.objectOf(slot), lengths[slot])
		})
	})
	if err != nil {
		return err
	}
	rb := l.RowBytes()
	if size%rb == 0 {
		return nil
	}
	q := size / rb
	mu := c.rows.lock(st.ino, st.gen, q)
	mu.Lock()
	defer mu.Unlock()
	st.mu.Lock()
	if cur := st.layout; len(cur.Targets) > 0 {
		l = cur // with the stale marks made above (a truncate by path has no layout in st)
	}
	st.mu.Unlock()
	return c.ecUpdateRow(ctx, st, l, q, 0, nil, size, false)
}

// ecResyncSlot rebuilds the shard in slot of a file of size bytes, row by
// row, from the other shards of its stripe. It fences the object first
// (proto.RowVersioner.Fence): a write sent to it before it was marked
// stale, delivered only now, is refused and cannot overwrite the rebuilt
// rows. Each rebuilt row gets the version it was decoded at, so it joins
// the other shards of its row.
func (c *Client) ecResyncSlot(ctx context.Context, st *inodeState, l layout.Layout, slot int, size uint64) error {
	rv, err := c.rowVersions()
	if err != nil {
		return err
	}
	w, k, s := l.Width(), int(l.ECData), l.StripeSize
	g, j := slot/w, slot%w
	n := l.ObjectSize(size, g*k) // the stripe's first shard, as long as parity
	if j < k {
		n = l.ObjectSize(size, g*k+j)
	}
	if err := st.withCap(ctx, proto.AccessWrite, func(ctx context.Context) error {
		return rv.Fence(ctx, l.Targets[slot], st.objectOf(slot))
	}); err != nil {
		return fmt.Errorf("client: resync ino %d slot %d: fence on target %d: %w", st.ino, slot, l.Targets[slot], err)
	}
	// Cut first: a truncate gives the row it ends in a fresh version, which
	// the row's rewrite below then replaces.
	if err := st.withCap(ctx, proto.AccessWrite, func(ctx context.Context) error {
		return c.storage.Truncate(ctx, l.Targets[slot], st.objectOf(slot), n)
	}); err != nil {
		return fmt.Errorf("client: resync ino %d slot %d: truncate on target %d: %w", st.ino, slot, l.Targets[slot], err)
	}
	buf := make([]byte, s)
	for off := uint64(0); off < n; off += s {
		p := buf[:min(s, n-off)]
		v, err := c.ecReconstructRow(ctx, st, l, g, j, off, p)
		if err != nil {
			return err
		}
		if err := st.withCap(ctx, proto.AccessWrite, func(ctx context.Context) error {
			_, err := rv.WriteRow(ctx, l.Targets[slot], st.objectOf(slot), proto.RowWrite{Off: off, Unit: s, Data: p, Tag: v.Tag})
			return err
		}); err != nil {
			return fmt.Errorf("client: resync ino %d slot %d: write to target %d: %w", st.ino, slot, l.Targets[slot], err)
		}
	}
	return st.withCap(ctx, proto.AccessWrite, func(ctx context.Context) error {
		return c.storage.Sync(ctx, l.Targets[slot], st.objectOf(slot))
	})
}

// ecRepairRows re-encodes every row of a file of size bytes whose fresh
// shards do not all hold one clean version: rows left so by a writer that
// died between its shard writes (its data shard written, parity not) or by
// a storage server killed in a write. Such a row reads right while its
// data shards are readable, but cannot be reconstructed; the repair
// computes its parity from its data again (conditionally, as any row
// update) and gives every shard one version. It returns the rows repaired.
func (c *Client) ecRepairRows(ctx context.Context, st *inodeState, l layout.Layout, size uint64) (int, error) {
	rv, err := c.rowVersions()
	if err != nil {
		return 0, err
	}
	rb, s, w := l.RowBytes(), l.StripeSize, l.Width()
	repaired := 0
	for q := uint64(0); q*rb < size; q++ {
		g := int(q % uint64(l.StripeCount))
		objOff := (q / uint64(l.StripeCount)) * s
		vers := make([]proto.RowVersion, w)
		ok := make([]bool, w)
		var wg sync.WaitGroup
		for j := range w {
			slot := l.Slot(g, j)
			if l.IsStale(slot) {
				continue
			}
			wg.Go(func() {
				err := st.withCap(ctx, proto.AccessRead, func(ctx context.Context) (err error) {
					_, vers[j], err = rv.ReadRow(ctx, l.Targets[slot], st.objectOf(slot), objOff, s, nil)
					return err
				})
				ok[j] = err == nil
			})
		}
		wg.Wait()
		var first *proto.RowVersion
		agree := true
		for j := range w {
			if !ok[j] {
				continue
			}
			if vers[j].Dirty || (first != nil && vers[j] != *first) {
				agree = false
			}
			if first == nil {
				first = &vers[j]
			}
		}
		if agree {
			continue
		}
		c.log.Warn("ec row versions disagree: re-encoding the row", "ino", st.ino, "row", q, "versions", vers)
		mu := c.rows.lock(st.ino, st.gen, q)
		mu.Lock()
		err := c.ecUpdateRow(ctx, st, l, q, 0, nil, size, true)
		mu.Unlock()
		if err != nil {
			return repaired, fmt.Errorf("client: repair ino %d row %d: %w", st.ino, q, err)
		}
		repaired++
	}
	return repaired, nil
}

// ecReadRange reads [off, off+len(p)) of an EC file, exts being its
// extents. Extents of a row whose data shards are fresh and on targets
// that did not fail recently are read from their data shards as RAID-0's
// are. A row with an extent on a stale or suspect data shard (its server
// is down) is read as a whole: ecReadDegradedRow reads exactly ECData
// shards of it once and decodes the missing ones, where reconstructing
// each such extent on its own reads the row's other shards again beside
// the extents that read its healthy data shards.
func (c *Client) ecReadRange(ctx context.Context, st *inodeState, l layout.Layout, off uint64, p []byte, exts []layout.Extent) error {
	rb := l.RowBytes()
	var rows [][]layout.Extent // exts grouped by row, in order
	for _, e := range exts {
		if n := len(rows); n > 0 && rows[n-1][0].FileOff/rb == e.FileOff/rb {
			rows[n-1] = append(rows[n-1], e)
		} else {
			rows = append(rows, []layout.Extent{e})
		}
	}
	return parallel(len(rows), func(i int) error {
		row := rows[i]
		degraded := false
		for _, e := range row {
			slot := l.ColumnSlot(e.Stripe)
			degraded = degraded || !c.usable(l, slot)
		}
		if degraded {
			done, err := c.ecReadDegradedRow(ctx, st, l, row, off, p)
			if err != nil || done {
				return err
			}
			// A shard failed or the versions disagree: each extent on its
			// own, reconstructing from the shards of one version.
		}
		return c.readExtents(ctx, st, l, off, p, row)
	})
}

// ecReadDegradedRow reads the extents row (of one row, some on a data
// shard that is stale or suspect) into p, which holds the file from off.
// Over the object range the extents span it reads every fresh data shard
// not suspect and as many fresh parity shards as data shards are missing,
// with their versions, and decodes the missing data shards, if all those
// shards hold one clean version. It reports false (and has read nothing
// it stands by) when it could not: a shard failed, was short or the
// versions disagree; the caller then reads extent by extent.
func (c *Client) ecReadDegradedRow(ctx context.Context, st *inodeState, l layout.Layout, row []layout.Extent, off uint64, p []byte) (bool, error) {
	enc, err := c.coder(l)
	if err != nil {
		return false, err
	}
	rv, err := c.rowVersions()
	if err != nil {
		return false, err
	}
	k, w := int(l.ECData), l.Width()
	g := row[0].Stripe / k
	lo, hi := row[0].ObjOff, row[0].ObjOff+row[0].Len
	for _, e := range row {
		lo, hi = min(lo, e.ObjOff), max(hi, e.ObjOff+e.Len)
	}
	n := hi - lo
	// dsts[j]: the part of p that data shard j's extent fills, when it
	// spans the whole range (read or decoded in place, never copied).
	dsts := make([][]byte, k)
	for _, e := range row {
		if e.ObjOff == lo && e.Len == n {
			dsts[e.Stripe%k] = p[e.FileOff-off:][:e.Len]
		}
	}
	usable := func(j int) bool { return c.usable(l, l.Slot(g, j)) }
	shards := make([][]byte, w)
	var read []int // the shards to read
	missing := 0
	for j := range k {
		if usable(j) {
			read = append(read, j)
		} else {
			missing++
		}
	}
	for j := k; j < w && missing > 0; j++ {
		if usable(j) {
			read = append(read, j)
			missing--
		}
	}
	if missing > 0 {
		return false, nil // fewer than ECData usable: the slow path says why
	}
	for j := range k {
		if dsts[j] != nil {
			shards[j] = dsts[j][:0] // decoded in place (ReconstructData uses its capacity)
		}
	}
	var temps [][]byte
	defer func() {
		for _, b := range temps {
			c.bufs.Put(b)
		}
	}()
	buf := func(j int) []byte {
		if j < k && dsts[j] != nil {
			return dsts[j]
		}
		b := c.bufs.Get(int(n))
		temps = append(temps, b)
		return b
	}
	bufs := make([][]byte, w)
	for _, j := range read {
		bufs[j] = buf(j)
	}
	vers := make([]proto.RowVersion, w)
	errs := make([]error, w)
	var wg sync.WaitGroup
	for _, j := range read {
		slot := l.Slot(g, j)
		wg.Go(func() {
			var got int
			err := st.withCap(ctx, proto.AccessRead, func(ctx context.Context) (err error) {
				got, vers[j], err = rv.ReadRow(ctx, l.Targets[slot], st.objectOf(slot), lo, l.StripeSize, bufs[j])
				return err
			})
			if errors.Is(err, syscall.ENOENT) {
				got, err = 0, nil
			}
			if err != nil {
				c.noteSuspect(l.Targets[slot])
			} else if j < k {
				err = c.checkLength(ctx, st, l, layout.Extent{Stripe: g*k + j, ObjOff: lo, Len: n}, got)
			}
			if err != nil {
				errs[j] = err
				return
			}
			clear(bufs[j][got:])
		})
	}
	wg.Wait()
	for _, j := range read {
		if errs[j] != nil || vers[j].Dirty || vers[j] != vers[read[0]] {
			if errs[j] != nil {
				c.log.Warn("ec shard unreadable in a degraded read", "ino", st.ino, "slot", l.Slot(g, j), "err", errs[j])
			}
			return false, nil
		}
		shards[j] = bufs[j]
	}
	for j := range k {
		if shards[j] == nil {
			b := c.bufs.Get(int(n))
			temps = append(temps, b)
			shards[j] = b[:0]
		}
	}
	if err := enc.ReconstructData(shards); err != nil {
		return false, fmt.Errorf("client: ino %d stripe %d: reconstruct: %w (%w)", st.ino, g, err, syscall.EIO)
	}
	for _, e := range row {
		j := e.Stripe % k
		dst := p[e.FileOff-off:][:e.Len]
		if dsts[j] == nil {
			copy(dst, shards[j][e.ObjOff-lo:][:e.Len])
		}
	}
	return true, nil
}
