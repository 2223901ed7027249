package storagerpc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/weft-fs/weft/internal/bufpool"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/transport"
)

// Client implements proto.StorageService over the transport. It is safe for
// concurrent use.
type Client struct {
	pool    *transport.Pool
	resolve func(ctx context.Context, t proto.TargetID) (string, error)
	limit   inflight // requests outstanding per server (inflight.go)
	// outstanding counts the requests under way per server address
	// (*atomic.Int64), bound or not: what a mount's metrics show.
	outstanding sync.Map
	// bufs holds the response buffers of ReadRow, whose version comes
	// before the data: without them every shard read of a degraded EC
	// read allocated (and the runtime zeroed) a fresh buffer.
	bufs *bufpool.Pool
	// noSums holds the targets whose server does not know OpReadSums
	// (ENOSYS): they are read with OpRead.
	noSums sync.Map
}

var _ proto.StorageService = (*Client)(nil)

// NewClient returns a client that sends each request to the address resolve
// gives for its target.
func NewClient(pool *transport.Pool, resolve func(ctx context.Context, t proto.TargetID) (addr string, err error)) *Client {
	return &Client{pool: pool, resolve: resolve, bufs: bufpool.New(4<<10, 2*MaxIO)}
}

func (c *Client) call(ctx context.Context, t proto.TargetID, op uint16, parts ...[]byte) ([]byte, error) {
	// The lookup may call the metadata service: not into this call's
	// response buffers.
	addr, err := c.resolve(transport.WithoutResponseBuffers(ctx), t)
	if err != nil {
		return nil, fmt.Errorf("storagerpc: target %d: %w", t, err)
	}
	if held, err := c.limit.acquire(ctx, addr); err != nil {
		return nil, fmt.Errorf("storagerpc: target %d: waiting for a request slot: %w", t, err)
	} else if held {
		defer c.limit.release(addr)
	}
	n, ok := c.outstanding.Load(addr)
	if !ok {
		n, _ = c.outstanding.LoadOrStore(addr, new(atomic.Int64))
	}
	n.(*atomic.Int64).Add(1)
	defer n.(*atomic.Int64).Add(-1)
	if job := proto.JobFrom(ctx); job != "" {
		// Counted for the job by the server (OpJob).
		return c.pool.Call(ctx, addr, jobOp(op), append([][]byte{jobEnvelope(op, job)}, parts...)...)
	}
	return c.pool.Call(ctx, addr, op, parts...)
}

// lacksSums reports whether target t's server answered OpReadSums with
// ENOSYS (an older weft).
func (c *Client) lacksSums(t proto.TargetID) bool {
	_, old := c.noSums.Load(t)
	return old
}

// Read reads into p, in requests of at most MaxIO bytes, and stops at the
// end of the object. A read of whole blocks, of at least MinReadSums
// bytes, goes as OpReadSums (the server sends the bytes without copying
// them, this client checks them: readsums.go); a smaller one, one whose
// bytes do not match, or one to a server without the op, as OpRead, which
// the server checks.
func (c *Client) Read(ctx context.Context, t proto.TargetID, obj proto.ObjectID, off uint64, p []byte) (int, error) {
	if off%SumBlock == 0 && len(p)%SumBlock == 0 && len(p) >= MinReadSums && !c.lacksSums(t) {
		n, err := c.readSums(ctx, t, obj, off, p)
		switch {
		case err == nil:
			return n, nil
		case errors.Is(err, ErrChecksum):
			// Read again, checked by the server: it reports a corrupt
			// object and fails with EIO, or the bytes raced with a write.
		case errors.Is(err, syscall.ENOSYS):
			c.noSums.Store(t, true)
		default:
			return n, err
		}
	}
	done := 0
	for done < len(p) {
		want := min(len(p)-done, MaxIO)
		req := ReadReq{Cap: proto.CapabilityFrom(ctx), ObjectReq: ObjectReq{Target: t, Obj: obj}, Off: off + uint64(done), Len: uint32(want)}
		dst := p[done : done+want]
		resp, err := c.call(transport.WithResponseBuffer(ctx, dst), t, OpRead, req.Encode())
		if err != nil {
			return done, err
		}
		if len(resp) > want {
			return done, fmt.Errorf("storagerpc: read answered %d bytes for %d: %w", len(resp), want, syscall.EIO)
		}
		if len(resp) > 0 && &resp[0] != &dst[0] {
			copy(dst, resp)
		}
		done += len(resp)
		if len(resp) < want {
			break
		}
	}
	return done, nil
}

// Write writes data, in requests of at most MaxIO bytes, and returns the
// version the last of them produced.
func (c *Client) Write(ctx context.Context, t proto.TargetID, obj proto.ObjectID, off uint64, data []byte) (uint64, error) {
	v, _, err := c.WriteCounting(ctx, t, obj, off, data)
	return v, err
}

// WriteCounting implements proto.CountingWriter: the allocated bytes are
// the server's answer to the last piece of the write
// (proto.AllocatedUnknown if it did not count).
func (c *Client) WriteCounting(ctx context.Context, t proto.TargetID, obj proto.ObjectID, off uint64, data []byte) (version, allocated uint64, err error) {
	for done := 0; ; {
		chunk := data[done:min(len(data), done+MaxIO)]
		req := WriteReq{Cap: proto.CapabilityFrom(ctx), ObjectReq: ObjectReq{Target: t, Obj: obj}, Off: off + uint64(done), Data: chunk}
		resp, err := c.call(ctx, t, OpWrite, req.EncodeHeader(), chunk)
		if err != nil {
			return 0, 0, err
		}
		version, allocated, err := DecodeWriteReply(resp)
		if err != nil {
			return 0, 0, fmt.Errorf("%w: %w", err, syscall.EIO)
		}
		if done += len(chunk); done >= len(data) {
			return version, allocated, nil
		}
	}
}

func (c *Client) Truncate(ctx context.Context, t proto.TargetID, obj proto.ObjectID, size uint64) error {
	req := TruncateReq{Cap: proto.CapabilityFrom(ctx), ObjectReq: ObjectReq{Target: t, Obj: obj}, Size: size}
	_, err := c.call(ctx, t, OpTruncate, req.Encode())
	return err
}

// Extend implements proto.ObjectExtender.
func (c *Client) Extend(ctx context.Context, t proto.TargetID, obj proto.ObjectID, size uint64) error {
	req := TruncateReq{Cap: proto.CapabilityFrom(ctx), ObjectReq: ObjectReq{Target: t, Obj: obj}, Size: size}
	_, err := c.call(ctx, t, OpExtend, req.Encode())
	return err
}

func (c *Client) Sync(ctx context.Context, t proto.TargetID, obj proto.ObjectID) error {
	_, err := c.call(ctx, t, OpSync, SyncReq{Cap: proto.CapabilityFrom(ctx), ObjectReq: ObjectReq{Target: t, Obj: obj}}.Encode())
	return err
}

func (c *Client) Space(ctx context.Context, t proto.TargetID, obj proto.ObjectID, mode proto.SpaceMode, off, n uint64) error {
	req := SpaceReq{Cap: proto.CapabilityFrom(ctx), ObjectReq: ObjectReq{Target: t, Obj: obj}, Mode: mode, Off: off, Len: n}
	_, err := c.call(ctx, t, OpSpace, req.Encode())
	return err
}

func (c *Client) Seek(ctx context.Context, t proto.TargetID, obj proto.ObjectID, off uint64, what proto.SeekWhat) (uint64, error) {
	req := SeekReq{Cap: proto.CapabilityFrom(ctx), ObjectReq: ObjectReq{Target: t, Obj: obj}, Off: off, What: what}
	resp, err := c.call(ctx, t, OpSeek, req.Encode())
	if err != nil {
		return 0, err
	}
	res, err := DecodeVersion(resp) // one u64, as a write's version
	if err != nil {
		return 0, fmt.Errorf("%w: %w", err, syscall.EIO)
	}
	return res, nil
}

func (c *Client) Allocated(ctx context.Context, t proto.TargetID, obj proto.ObjectID) (uint64, error) {
	resp, err := c.call(ctx, t, OpAllocated, SyncReq{Cap: proto.CapabilityFrom(ctx), ObjectReq: ObjectReq{Target: t, Obj: obj}}.Encode())
	if err != nil {
		return 0, err
	}
	n, err := DecodeVersion(resp) // one u64
	if err != nil {
		return 0, fmt.Errorf("%w: %w", err, syscall.EIO)
	}
	return n, nil
}

// Copy sends the copy to dst's server, in requests of at most MaxCopy.
func (c *Client) Copy(ctx context.Context, t proto.TargetID, dst proto.ObjectID, dstOff uint64, srcT proto.TargetID, src proto.ObjectID, srcOff, n uint64, srcCap []byte) error {
	for done := uint64(0); done < n; {
		k := min(n-done, MaxCopy)
		req := CopyReq{Cap: proto.CapabilityFrom(ctx), Dst: ObjectReq{Target: t, Obj: dst}, DstOff: dstOff + done,
			SrcCap: srcCap, Src: ObjectReq{Target: srcT, Obj: src}, SrcOff: srcOff + done, Len: k}
		if _, err := c.call(ctx, t, OpCopy, req.Encode()); err != nil {
			return err
		}
		done += k
	}
	return nil
}

func (c *Client) Remove(ctx context.Context, t proto.TargetID, obj proto.ObjectID) error {
	_, err := c.call(ctx, t, OpRemove, ObjectReq{Target: t, Obj: obj}.Encode())
	return err
}

// RemoveMany sends the objects in RPCs of at most MaxRemoveMany. A server
// that predates OpRemoveMany (ENOSYS) gets one Remove per object instead.
func (c *Client) RemoveMany(ctx context.Context, t proto.TargetID, objs []proto.ObjectID) error {
	for len(objs) > 0 {
		n := min(len(objs), MaxRemoveMany)
		_, err := c.call(ctx, t, OpRemoveMany, RemoveManyReq{Target: t, Objs: objs[:n]}.Encode())
		if errors.Is(err, syscall.ENOSYS) {
			for _, o := range objs {
				if err := c.Remove(ctx, t, o); err != nil {
					return err
				}
			}
			return nil
		}
		if err != nil {
			return err
		}
		objs = objs[n:]
	}
	return nil
}
