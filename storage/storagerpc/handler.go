package storagerpc

import (
	"context"
	"fmt"
	"log/slog"
	"syscall"

	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/transport"
)

// NewHandler serves the storage RPCs from svc (normally a *storage.Server,
// which routes by target id and answers ESTALE for a target it does not
// serve). A request that does not decode is logged and answered with
// EINVAL; an unknown op with ENOSYS. Errors of svc go back as their errno.
func NewHandler(svc proto.StorageService, log *slog.Logger) transport.Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	bad := func(op uint16, req []byte, err error) ([]byte, error) {
		log.Warn("storagerpc: malformed request", "op", op, "len", len(req), "err", err)
		return nil, fmt.Errorf("%w: %w", err, syscall.EINVAL)
	}
	return func(ctx context.Context, op uint16, req []byte) ([]byte, error) {
		switch op {
		case OpRead:
			r, err := DecodeRead(req)
			if err != nil {
				return bad(op, req, err)
			}
			buf := make([]byte, r.Len)
			n, err := svc.Read(ctx, r.Target, r.Obj, r.Off, buf)
			if err != nil {
				return nil, err
			}
			return buf[:n], nil
		case OpWrite:
			r, err := DecodeWrite(req)
			if err != nil {
				return bad(op, req, err)
			}
			v, err := svc.Write(ctx, r.Target, r.Obj, r.Off, r.Data)
			if err != nil {
				return nil, err
			}
			return EncodeVersion(v), nil
		case OpTruncate:
			r, err := DecodeTruncate(req)
			if err != nil {
				return bad(op, req, err)
			}
			return nil, svc.Truncate(ctx, r.Target, r.Obj, r.Size)
		case OpSync:
			r, err := DecodeSync(req)
			if err != nil {
				return bad(op, req, err)
			}
			return nil, svc.Sync(ctx, r.Target, r.Obj)
		case OpRemove:
			r, err := DecodeRemove(req)
			if err != nil {
				return bad(op, req, err)
			}
			return nil, svc.Remove(ctx, r.Target, r.Obj)
		}
		log.Warn("storagerpc: unknown op", "op", op)
		return nil, fmt.Errorf("storagerpc: unknown op %d: %w", op, syscall.ENOSYS)
	}
}
