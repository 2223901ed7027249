package storage

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/klauspost/reedsolomon"

	"github.com/weft-fs/weft/proto"
)

// MaxRebuildLen bounds the range of one rebuild request (the metadata
// service sends 4 MiB).
const MaxRebuildLen = 64 << 20

// RebuildObject implements proto.ObjectRebuilder: it writes the range of
// the object r names on its target of this server, read from a copy (the
// first source that answers) or decoded from K shards of its EC stripe.
// Sources on this server's targets are read directly, others through the
// peers (as a storage server: no capability). The whole range is read
// before the object is changed, so a request whose sources fail changes
// nothing. A RebuildStart empties the object first, so ranges that read
// as zeros are left holes; RebuildFinish sets the object's length and
// syncs it. A fenced request (r.Fence) changes the object only while no
// later fence was set on it. The RPC handler lets only metadata servers
// ask for it.
func (s *Server) RebuildObject(ctx context.Context, r proto.RebuildRequest) (uint64, error) {
	dt, err := s.target(ctx, r.Target)
	if err != nil {
		return 0, err
	}
	if r.Len > MaxRebuildLen {
		return 0, fmt.Errorf("storage: rebuild of %d bytes, over %d: %w", r.Len, MaxRebuildLen, syscall.EINVAL)
	}
	if len(r.Sources) == 0 && r.Len > 0 {
		return 0, fmt.Errorf("storage: rebuild of %s without sources: %w", objName(r.Obj), syscall.EINVAL)
	}
	if r.Unit == 0 && r.ECData > 0 && r.Len > 0 {
		return 0, fmt.Errorf("storage: rebuild of an ec shard of %s without its unit: %w", objName(r.Obj), syscall.EINVAL)
	}
	var rows []proto.RowWrite
	if r.Len > 0 {
		if rows, err = s.rebuildRead(ctx, r); err != nil {
			return 0, err
		}
	}
	// Every change below is refused once the object was fenced after the
	// metadata service fenced it for this rebuild: a repair finished
	// meanwhile (this request arrived, or ran on, after the service gave
	// up on it) stays as it is.
	ctx = withRebuildFence(ctx, r.Fence)
	start := r.Flags&proto.RebuildStart != 0
	if start {
		err := dt.Truncate(ctx, r.Obj, 0)
		if errors.Is(err, ErrCorrupt) {
			// An unreadable sidecar or version file (found by the
			// scrub): the object is replaced whole.
			err = dt.Remove(ctx, r.Obj)
		}
		if err != nil {
			return 0, err
		}
	}
	var written uint64
	for _, w := range rows {
		if start && allZero(w.Data) {
			w.Data = nil // after a start the object is empty: zeros need no write
		}
		switch {
		case r.Unit == 0 && w.Data != nil:
			_, err = dt.Write(ctx, r.Obj, w.Off, w.Data)
		case r.Unit > 0 && (w.Data != nil || w.Tag != 0):
			_, err = dt.WriteRow(ctx, r.Obj, w)
		default:
			continue
		}
		if err != nil {
			return written, err
		}
		written += uint64(len(w.Data))
	}
	if r.Flags&proto.RebuildFinish != 0 {
		if err := dt.Truncate(ctx, r.Obj, r.Size); err != nil {
			return written, err
		}
		if err := dt.Sync(ctx, r.Obj); err != nil {
			return written, err
		}
	}
	return written, nil
}

// rebuildRead reads the request's range from its sources: one write of
// the whole range for a mirror copy (Unit 0), else one per row (unit).
func (s *Server) rebuildRead(ctx context.Context, r proto.RebuildRequest) ([]proto.RowWrite, error) {
	if r.Unit == 0 {
		p, err := s.rebuildCopy(ctx, r)
		if err != nil {
			return nil, err
		}
		return []proto.RowWrite{{Off: r.Off, Data: p}}, nil
	}
	return s.rebuildRows(ctx, r)
}

// readSource reads the range of one source object into p (bytes past its
// end as zeros).
func (s *Server) readSource(ctx context.Context, src proto.RebuildSource, obj proto.ObjectID, off uint64, p []byte) error {
	id := obj
	id.Stripe = src.Slot
	var n int
	var err error
	if st, terr := s.target(ctx, src.Target); terr == nil {
		n, err = st.Read(ctx, id, off, p)
	} else {
		s.mu.Lock()
		peers := s.peers
		s.mu.Unlock()
		if peers == nil {
			return fmt.Errorf("storage: rebuild from target %d, which this server does not serve, without peers: %w", src.Target, syscall.EXDEV)
		}
		n, err = peers.Read(ctx, src.Target, id, off, p)
	}
	if err != nil {
		return fmt.Errorf("storage: rebuild: read target %d object %s at %d: %w", src.Target, objName(id), off, err)
	}
	clear(p[n:])
	return nil
}

// rebuildCopy reads the range from the first source that answers.
func (s *Server) rebuildCopy(ctx context.Context, r proto.RebuildRequest) ([]byte, error) {
	p := make([]byte, r.Len)
	var errs []error
	for _, src := range r.Sources {
		err := s.readSource(ctx, src, r.Obj, r.Off, p)
		if err == nil {
			return p, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("storage: rebuild %s: no copy readable: %w (%w)", objName(r.Obj), errors.Join(errs...), syscall.EIO)
}

// rebuildRows reads the range of an EC shard row by row (unit by unit),
// its bytes up to r.Size (the range may run past it, to the end of the
// stripe's rows), each row with its version: a shard written without them
// would have version 0 in every row and never count in a reconstruction
// again (client/ec.go decodes only from shards of one version). A copy off
// a draining target takes each row's version from the source (a dirty
// row, whose interrupted write left its bytes undetermined, gets version
// 0, so the other shards decide it); a decoded shard takes the version
// that at least K of the sources' rows share, and a row for which no K
// agree fails the rebuild (EIO): `weft resync` re-encodes such a row
// first.
func (s *Server) rebuildRows(ctx context.Context, r proto.RebuildRequest) ([]proto.RowWrite, error) {
	var rows []proto.RowWrite
	for off, end := r.Off, r.Off+r.Len; off < end; {
		n := min(end, (off/r.Unit+1)*r.Unit) - off
		var p []byte
		var tag uint64
		var err error
		if r.ECData == 0 {
			p, tag, err = s.rebuildCopyRow(ctx, r, off, n)
		} else {
			p, tag, err = s.rebuildShardRow(ctx, r, off, n)
		}
		if err != nil {
			return nil, err
		}
		// Bytes only up to the object's length (a shard shorter than its
		// stripe's rows), the version for every row of the range.
		p = p[:min(uint64(len(p)), r.Size-min(r.Size, off))]
		w := proto.RowWrite{Off: off, Unit: r.Unit, Data: p, Tag: tag}
		if len(p) == 0 {
			w.Data = nil
		}
		rows = append(rows, w)
		off += n
	}
	return rows, nil
}

// readSourceRow reads n bytes of one source object at off (in one unit)
// with the unit's version; bytes past its end read as zeros.
func (s *Server) readSourceRow(ctx context.Context, src proto.RebuildSource, r proto.RebuildRequest, off uint64, p []byte) (proto.RowVersion, error) {
	id := r.Obj
	id.Stripe = src.Slot
	return s.readRowAt(ctx, src.Target, id, off, r.Unit, p)
}

// rebuildCopyRow reads one row's range from the first source that
// answers, with the version the copy gets.
func (s *Server) rebuildCopyRow(ctx context.Context, r proto.RebuildRequest, off, n uint64) ([]byte, uint64, error) {
	p := make([]byte, n)
	var errs []error
	for _, src := range r.Sources {
		v, err := s.readSourceRow(ctx, src, r, off, p)
		if err == nil {
			if v.Dirty {
				return p, 0, nil
			}
			return p, v.Tag, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, 0, fmt.Errorf("storage: rebuild %s: no copy readable: %w (%w)", objName(r.Obj), errors.Join(errs...), syscall.EIO)
}

// rebuildShardRow reads one row's range of every source shard with its
// version and decodes shard r.Shard from K shards of one version.
func (s *Server) rebuildShardRow(ctx context.Context, r proto.RebuildRequest, off, n uint64) ([]byte, uint64, error) {
	k, m := int(r.ECData), int(r.ECParity)
	w := k + m
	if int(r.Shard) >= w {
		return nil, 0, fmt.Errorf("storage: rebuild of shard %d of an ec %d+%d stripe: %w", r.Shard, k, m, syscall.EINVAL)
	}
	enc, err := reedsolomon.New(k, m)
	if err != nil {
		return nil, 0, fmt.Errorf("storage: rebuild: ec %d+%d: %w (%w)", k, m, err, syscall.EINVAL)
	}
	type result struct {
		shard int
		buf   []byte
		ver   proto.RowVersion
		err   error
	}
	results := make(chan result, len(r.Sources))
	for _, src := range r.Sources {
		if int(src.Shard) >= w || int(src.Shard) == int(r.Shard) {
			return nil, 0, fmt.Errorf("storage: rebuild: source shard %d of an ec %d+%d stripe for shard %d: %w", src.Shard, k, m, r.Shard, syscall.EINVAL)
		}
		go func() {
			buf := make([]byte, n)
			v, err := s.readSourceRow(ctx, src, r, off, buf)
			results <- result{int(src.Shard), buf, v, err}
		}()
	}
	var got []result
	var errs []error
	count := map[uint64]int{}
	for range r.Sources {
		res := <-results
		if res.err != nil {
			errs = append(errs, res.err)
			continue
		}
		got = append(got, res)
		if !res.ver.Dirty {
			count[res.ver.Tag]++
		}
	}
	tag, best := uint64(0), 0
	for t, c := range count {
		if c > best || (c == best && t > tag) {
			tag, best = t, c
		}
	}
	if best < k {
		return nil, 0, fmt.Errorf("storage: rebuild %s at %d: %d of %d readable shards share a row version, %d needed (run weft resync on the file): %w (%w)",
			objName(r.Obj), off, best, len(got), k, errors.Join(errs...), syscall.EIO)
	}
	shards := make([][]byte, w)
	have := 0
	for _, res := range got {
		if !res.ver.Dirty && res.ver.Tag == tag && shards[res.shard] == nil && have < k {
			shards[res.shard] = res.buf
			have++
		}
	}
	if int(r.Shard) < k {
		err = enc.ReconstructData(shards)
	} else {
		err = enc.Reconstruct(shards)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("storage: rebuild %s: decode: %w (%w)", objName(r.Obj), err, syscall.EIO)
	}
	return shards[r.Shard], tag, nil
}

func allZero(p []byte) bool {
	for _, b := range p {
		if b != 0 {
			return false
		}
	}
	return true
}

var _ proto.ObjectRebuilder = (*Server)(nil)
