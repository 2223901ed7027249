package client

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"syscall"

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
//     partial one reads the row's data (reconstructing shards that are
//     stale or fail), merges, encodes, and writes the changed data and all
//     parity. Shards that fail are marked stale; the metadata server
//     refuses a mark that would leave fewer than ECData shards of a stripe
//     fresh, and then the write fails.
//   - Parity of a row is written as long as the row's first data shard
//     reaches (the rest would be parity of zeros, and reads as zeros).
//   - Reads read the data shard; if it is stale, fails, does not answer
//     within MirrorGrace, or is shorter than the file (ObjectsSized), they
//     read the same range of the other shards and reconstruct it (a
//     target that failed is not asked first again for a while).
//   - Truncate truncates the data shards to their shares and the parity
//     to the first shard's, then recomputes the parity of the row the new
//     end falls in.
//
// Limits: the row lock is per client. Partial-row writes from two mounts
// to one row at the same time can leave parity that does not match the
// data (reads stay right while every data shard is readable; a
// reconstruction from that row would be wrong); a crash between a row's
// data and parity writes likewise. Object versions (conditional writes)
// would close both.

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

// ecUpdateRow writes p at offset inRow of row q (the caller holds its
// lock) of a file of size end, and the row's parity. With p empty it
// recomputes the parity from the data (after a truncate, which passes
// checkLen false: the data shards were just cut below the size the
// metadata server still records, and are right).
func (c *Client) ecUpdateRow(ctx context.Context, st *inodeState, l layout.Layout, q, inRow uint64, p []byte, end uint64, checkLen bool) error {
	enc, err := c.coder(l)
	if err != nil {
		return err
	}
	k, m, s := int(l.ECData), int(l.ECParity), l.StripeSize
	g := int(q % uint64(l.StripeCount))
	objOff := (q / uint64(l.StripeCount)) * s
	rowOff := q * l.RowBytes()
	plen := uint64(0)
	if end > rowOff {
		plen = min(s, end-rowOff)
	}
	if plen == 0 {
		return nil
	}
	shards := make([][]byte, k+m)
	for i := range shards {
		shards[i] = make([]byte, plen)
	}
	if !(inRow == 0 && uint64(len(p)) == l.RowBytes()) {
		// A partial row: the other bytes come from the data shards.
		if err := parallel(k, func(j int) error {
			return c.ecReadShard(ctx, st, l, g, j, objOff, shards[j], checkLen)
		}); err != nil {
			return err
		}
	}
	for i := 0; i < len(p); {
		pos := inRow + uint64(i)
		j, at := int(pos/s), pos%s
		i += copy(shards[j][at:], p[i:])
	}
	if err := enc.Encode(shards); err != nil {
		return fmt.Errorf("client: ec encode ino %d row %d: %w", st.ino, q, err)
	}
	type piece struct {
		slot   int
		off    uint64
		data   []byte
		parity bool
	}
	var pieces []piece
	for j := range k {
		a, b := max(inRow, uint64(j)*s), min(inRow+uint64(len(p)), uint64(j+1)*s)
		if a < b {
			pieces = append(pieces, piece{slot: l.Slot(g, j), off: objOff + a - uint64(j)*s, data: shards[j][a-uint64(j)*s : b-uint64(j)*s]})
		}
	}
	for j := k; j < k+m; j++ {
		pieces = append(pieces, piece{slot: l.Slot(g, j), off: objOff, data: shards[j], parity: true})
	}
	var slots []int
	bySlot := map[int]piece{}
	for _, pc := range pieces {
		if !l.IsStale(pc.slot) {
			slots = append(slots, pc.slot)
			bySlot[pc.slot] = pc
		}
	}
	return c.fanOut(ctx, st, l, slots, fmt.Sprintf("ec write row %d", q), func(ctx context.Context, slot int) error {
		pc := bySlot[slot]
		return st.withCap(ctx, proto.AccessWrite, func(ctx context.Context) error {
			_, err := c.storage.Write(ctx, l.Targets[slot], st.objectOf(slot), pc.off, pc.data)
			return err
		})
	})
}

// ecReadShard fills dst with data shard j of stripe g at objOff (zeros
// where the object has none), reconstructing it from the other shards if
// it is stale, fails or (with checkLen) is shorter than the file says.
func (c *Client) ecReadShard(ctx context.Context, st *inodeState, l layout.Layout, g, j int, objOff uint64, dst []byte, checkLen bool) error {
	slot := l.Slot(g, j)
	if !l.IsStale(slot) && !c.suspect(l.Targets[slot]) {
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
		c.log.Warn("ec shard unreadable, reconstructing it", "ino", st.ino, "slot", slot, "err", err)
	}
	return c.ecReconstruct(ctx, st, l, g, j, objOff, dst)
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

// ecReconstruct computes shard want (data or parity) of stripe g over
// [objOff, objOff+len(dst)) from the other fresh shards of the stripe.
func (c *Client) ecReconstruct(ctx context.Context, st *inodeState, l layout.Layout, g, want int, objOff uint64, dst []byte) error {
	enc, err := c.coder(l)
	if err != nil {
		return err
	}
	w := l.Width()
	shards := make([][]byte, w)
	errs := make([]error, w)
	var wg sync.WaitGroup
	for j := range w {
		slot := l.Slot(g, j)
		if j == want || l.IsStale(slot) {
			continue
		}
		wg.Go(func() {
			buf := make([]byte, len(dst))
			got, err := c.readSlot(ctx, st, l, slot, objOff, buf)
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
	have := 0
	for _, sh := range shards {
		if sh != nil {
			have++
		}
	}
	if have < int(l.ECData) {
		return fmt.Errorf("client: ino %d stripe %d: %d of %d shards readable, %d needed: %w (%w)",
			st.ino, g, have, w, l.ECData, syscall.EIO, errors.Join(errs...))
	}
	if want < int(l.ECData) {
		err = enc.ReconstructData(shards)
	} else {
		err = enc.Reconstruct(shards)
	}
	if err != nil {
		return fmt.Errorf("client: ino %d stripe %d: reconstruct: %w (%w)", st.ino, g, err, syscall.EIO)
	}
	copy(dst, shards[want])
	return nil
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
// row, from the other shards of its stripe.
func (c *Client) ecResyncSlot(ctx context.Context, st *inodeState, l layout.Layout, slot int, size uint64) error {
	w, k, s := l.Width(), int(l.ECData), l.StripeSize
	g, j := slot/w, slot%w
	n := l.ObjectSize(size, g*k) // the stripe's first shard, as long as parity
	if j < k {
		n = l.ObjectSize(size, g*k+j)
	}
	buf := make([]byte, s)
	for off := uint64(0); off < n; off += s {
		p := buf[:min(s, n-off)]
		if err := c.ecReconstruct(ctx, st, l, g, j, off, p); err != nil {
			return err
		}
		if err := st.withCap(ctx, proto.AccessWrite, func(ctx context.Context) error {
			_, err := c.storage.Write(ctx, l.Targets[slot], st.objectOf(slot), off, p)
			return err
		}); err != nil {
			return fmt.Errorf("client: resync ino %d slot %d: write to target %d: %w", st.ino, slot, l.Targets[slot], err)
		}
	}
	return st.withCap(ctx, proto.AccessWrite, func(ctx context.Context) error {
		if err := c.storage.Truncate(ctx, l.Targets[slot], st.objectOf(slot), n); err != nil {
			return err
		}
		return c.storage.Sync(ctx, l.Targets[slot], st.objectOf(slot))
	})
}
