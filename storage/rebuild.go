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
// peers (as a storage server: no capability). After a RebuildStart the
// object was emptied first, so ranges that read as zeros are left holes;
// RebuildFinish sets the object's length and syncs it. The RPC handler
// lets only metadata servers ask for it.
func (s *Server) RebuildObject(ctx context.Context, r proto.RebuildRequest) (uint64, error) {
	dt, err := s.Target(r.Target)
	if err != nil {
		return 0, err
	}
	if r.Len > MaxRebuildLen {
		return 0, fmt.Errorf("storage: rebuild of %d bytes, over %d: %w", r.Len, MaxRebuildLen, syscall.EINVAL)
	}
	if len(r.Sources) == 0 && r.Len > 0 {
		return 0, fmt.Errorf("storage: rebuild of %s without sources: %w", objName(r.Obj), syscall.EINVAL)
	}
	if r.Flags&proto.RebuildStart != 0 {
		if err := dt.Truncate(ctx, r.Obj, 0); err != nil {
			return 0, err
		}
	}
	var written uint64
	if r.Len > 0 {
		var p []byte
		if r.ECData == 0 {
			p, err = s.rebuildCopy(ctx, r)
		} else {
			p, err = s.rebuildShard(ctx, r)
		}
		if err != nil {
			return 0, err
		}
		// After a start the object is empty: zeros need no write.
		if r.Flags&proto.RebuildStart == 0 || !allZero(p) {
			if _, err := dt.Write(ctx, r.Obj, r.Off, p); err != nil {
				return 0, err
			}
			written = uint64(len(p))
		}
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

// readSource reads the range of one source object into p (bytes past its
// end as zeros).
func (s *Server) readSource(ctx context.Context, src proto.RebuildSource, obj proto.ObjectID, off uint64, p []byte) error {
	id := obj
	id.Stripe = src.Slot
	var n int
	var err error
	if st, terr := s.Target(src.Target); terr == nil {
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

// rebuildShard reads the range of the sources (shards of one EC stripe)
// until K of them answered, and decodes shard r.Shard from them.
func (s *Server) rebuildShard(ctx context.Context, r proto.RebuildRequest) ([]byte, error) {
	k, m := int(r.ECData), int(r.ECParity)
	w := k + m
	if int(r.Shard) >= w {
		return nil, fmt.Errorf("storage: rebuild of shard %d of an ec %d+%d stripe: %w", r.Shard, k, m, syscall.EINVAL)
	}
	enc, err := reedsolomon.New(k, m)
	if err != nil {
		return nil, fmt.Errorf("storage: rebuild: ec %d+%d: %w (%w)", k, m, err, syscall.EINVAL)
	}
	shards := make([][]byte, w)
	have := 0
	type result struct {
		shard int
		buf   []byte
		err   error
	}
	results := make(chan result, len(r.Sources))
	for _, src := range r.Sources {
		if int(src.Shard) >= w || int(src.Shard) == int(r.Shard) {
			return nil, fmt.Errorf("storage: rebuild: source shard %d of an ec %d+%d stripe for shard %d: %w", src.Shard, k, m, r.Shard, syscall.EINVAL)
		}
		go func() {
			buf := make([]byte, r.Len)
			err := s.readSource(ctx, src, r.Obj, r.Off, buf)
			results <- result{int(src.Shard), buf, err}
		}()
	}
	var errs []error
	for range r.Sources {
		res := <-results
		if res.err != nil {
			errs = append(errs, res.err)
			continue
		}
		if shards[res.shard] == nil && have < k {
			shards[res.shard] = res.buf
			have++
		}
	}
	if have < k {
		return nil, fmt.Errorf("storage: rebuild %s: %d of %d shards readable: %w (%w)", objName(r.Obj), have, k, errors.Join(errs...), syscall.EIO)
	}
	if int(r.Shard) < k {
		err = enc.ReconstructData(shards)
	} else {
		err = enc.Reconstruct(shards)
	}
	if err != nil {
		return nil, fmt.Errorf("storage: rebuild %s: decode: %w (%w)", objName(r.Obj), err, syscall.EIO)
	}
	return shards[r.Shard], nil
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
