package storagerpc

import (
	"context"
	"fmt"
	"log/slog"
	"syscall"

	"github.com/weft-fs/weft/internal/bufpool"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/transport"
)

// NewHandler serves the storage RPCs from svc (normally a *storage.Server,
// which routes by target id and answers ESTALE for a target it does not
// serve). A request that does not decode is logged and answered with
// EINVAL; an unknown op with ENOSYS. Errors of svc go back as their errno.
//
// Before svc sees a request, the handler authorizes it (see doc.go): a
// client's Read needs a capability granting read on the object's inode,
// its Write, Truncate and Sync one granting write, and its Remove and
// RemoveMany are refused; servers and in-process callers need none. A
// refusal is EACCES, logged at warn (rate-limited).
func NewHandler(svc proto.StorageService, o Options) transport.Handler {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	log := o.Logger
	g := newGuard(o)
	bad := func(op uint16, req []byte, err error) ([]byte, error) {
		log.Warn("storagerpc: malformed request", "op", op, "len", len(req), "err", err)
		return nil, fmt.Errorf("%w: %w", err, syscall.EINVAL)
	}
	// Read buffers are recycled, so serving reads does not allocate (and
	// zero) a fresh buffer per request.
	bufs := bufpool.New(4<<10, MaxIO)
	return func(ctx context.Context, op uint16, req []byte) ([]byte, error) {
		switch op {
		case OpRead:
			r, err := DecodeRead(req)
			if err != nil {
				return bad(op, req, err)
			}
			if err := g.object(ctx, op, r.Cap, r.Obj, proto.AccessRead); err != nil {
				return nil, err
			}
			buf := bufs.Get(int(r.Len))
			n, err := svc.Read(ctx, r.Target, r.Obj, r.Off, buf)
			if err != nil {
				bufs.Put(buf)
				return nil, err
			}
			// Called directly (not through the transport), the buffer
			// is simply the caller's.
			_ = transport.AfterResponse(ctx, func() { bufs.Put(buf) })
			return buf[:n], nil
		case OpWrite:
			r, err := DecodeWrite(req)
			if err != nil {
				return bad(op, req, err)
			}
			if err := g.object(ctx, op, r.Cap, r.Obj, proto.AccessWrite); err != nil {
				transport.DoneWithRequest(ctx)
				return nil, err
			}
			v, err := svc.Write(ctx, r.Target, r.Obj, r.Off, r.Data)
			transport.DoneWithRequest(ctx) // the service keeps no reference to the data
			if err != nil {
				return nil, err
			}
			return EncodeVersion(v), nil
		case OpTruncate:
			r, err := DecodeTruncate(req)
			if err != nil {
				return bad(op, req, err)
			}
			if err := g.object(ctx, op, r.Cap, r.Obj, proto.AccessWrite); err != nil {
				return nil, err
			}
			return nil, svc.Truncate(ctx, r.Target, r.Obj, r.Size)
		case OpSync:
			r, err := DecodeSync(req)
			if err != nil {
				return bad(op, req, err)
			}
			if err := g.object(ctx, op, r.Cap, r.Obj, proto.AccessWrite); err != nil {
				return nil, err
			}
			return nil, svc.Sync(ctx, r.Target, r.Obj)
		case OpRemove:
			r, err := DecodeRemove(req)
			if err != nil {
				return bad(op, req, err)
			}
			if err := g.serverOnly(ctx, op); err != nil {
				return nil, err
			}
			return nil, svc.Remove(ctx, r.Target, r.Obj)
		case OpRemoveMany:
			r, err := DecodeRemoveMany(req)
			if err != nil {
				return bad(op, req, err)
			}
			if err := g.serverOnly(ctx, op); err != nil {
				return nil, err
			}
			return nil, svc.RemoveMany(ctx, r.Target, r.Objs)
		}
		log.Warn("storagerpc: unknown op", "op", op)
		return nil, fmt.Errorf("storagerpc: unknown op %d: %w", op, syscall.ENOSYS)
	}
}
