package storagerpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sync/semaphore"

	"github.com/weft-fs/weft/internal/bufpool"
	"github.com/weft-fs/weft/jobstats"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/transport"
)

// Defaults of Options.
const (
	// DefaultReadBytesPerConn bounds the read buffers one connection holds:
	// four MaxIO reads in flight, enough to keep a client's pipe full.
	DefaultReadBytesPerConn = 64 << 20
	// DefaultReadBytesPerServer bounds the read buffers of all connections.
	DefaultReadBytesPerServer = 512 << 20
)

// minReadBuf is the smallest read buffer (the pool's smallest class).
const minReadBuf = 4 << 10

// Handler serves the storage RPCs. Its Serve method is the
// transport.Handler.
type Handler struct {
	svc   proto.StorageService
	log   *slog.Logger
	guard *guard
	bufs  *bufpool.Pool

	perConn int64
	server  *semaphore.Weighted

	mu      sync.Mutex
	conns   map[string]*connBudget // by Peer.Addr (see unref)
	sweepAt int                    // len(conns) at which unused entries are dropped

	held atomic.Int64 // read-buffer bytes taken from the budgets

	jobs *jobstats.Table // where OpJob requests are counted; nil: nowhere

	local LocalInfo // what OpLocalInfo answers
}

// connBudget is one connection's read budget; refs counts the requests
// holding or waiting for it (an entry at 0 may be dropped, see unref).
type connBudget struct {
	sem  *semaphore.Weighted
	refs int
}

// NewHandler serves svc (normally a *storage.Server, which routes by target
// id and answers ESTALE for a target it does not serve) with the default
// read budgets. A request that does not decode is logged and answered with
// EINVAL; an unknown op with ENOSYS. Errors of svc go back as their errno.
//
// Before svc sees a request, the handler authorizes it (see doc.go): a
// client's Read needs a capability granting read on the object's inode,
// its Write, Truncate and Sync one granting write, and its Remove and
// RemoveMany are refused; servers and in-process callers need none. A
// refusal is EACCES, logged at warn (rate-limited).
func NewHandler(svc proto.StorageService, o Options) transport.Handler {
	return New(svc, o).Serve
}

// New is NewHandler returning the Handler itself (for its counters).
func New(svc proto.StorageService, o Options) *Handler {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.ReadBytesPerConn <= 0 {
		o.ReadBytesPerConn = DefaultReadBytesPerConn
	}
	if o.ReadBytesPerServer <= 0 {
		o.ReadBytesPerServer = DefaultReadBytesPerServer
	}
	o.ReadBytesPerConn = max(o.ReadBytesPerConn, MaxIO)
	o.ReadBytesPerServer = max(o.ReadBytesPerServer, o.ReadBytesPerConn)
	return &Handler{
		svc: svc, log: o.Logger, guard: newGuard(o),
		// Read buffers are recycled, so serving reads does not allocate
		// (and zero) a fresh buffer per request.
		bufs:    bufpool.New(minReadBuf, MaxIO),
		perConn: o.ReadBytesPerConn,
		server:  semaphore.NewWeighted(o.ReadBytesPerServer),
		conns:   map[string]*connBudget{},
		sweepAt: minSweep,
		jobs:    o.Jobs,
		local:   o.Local,
	}
}

// ReadBytesHeld returns the read-buffer bytes currently taken from the
// budgets (by reads being served or whose responses are not yet written).
func (h *Handler) ReadBytesHeld() int64 { return h.held.Load() }

// readCost is what a read of n bytes takes from the budgets: the capacity
// of the pool buffer it gets.
func readCost(n uint32) int64 {
	if n <= minReadBuf {
		return minReadBuf
	}
	return 1 << bits.Len32(n-1)
}

// readGrant is what one read holds: its share of the budgets (n bytes of
// cb and the server's; none if cb is nil) and its buffer, given back once
// by release. One allocation per read, where closures and a sync.Once
// took several.
type readGrant struct {
	h        *Handler
	cb       *connBudget
	n        int64
	buf      []byte
	released atomic.Bool
}

// acquire takes n bytes of the connection's and the server's read budgets,
// waiting while they are exhausted, and returns the grant that gives them
// back. It fails when ctx ends first (the connection closed).
func (h *Handler) acquire(ctx context.Context, n int64) (*readGrant, error) {
	p, _ := transport.PeerFrom(ctx) // in-process calls share the key ""
	h.mu.Lock()
	cb := h.conns[p.Addr]
	if cb == nil {
		if len(h.conns) >= h.sweepAt {
			h.sweepLocked()
		}
		cb = &connBudget{sem: semaphore.NewWeighted(h.perConn)}
		h.conns[p.Addr] = cb
	}
	cb.refs++
	h.mu.Unlock()
	// Connection first: a connection waiting on its own budget never
	// holds server budget meanwhile.
	if err := cb.sem.Acquire(ctx, n); err != nil {
		h.unref(cb)
		return nil, ctxErr(err)
	}
	if err := h.server.Acquire(ctx, n); err != nil {
		cb.sem.Release(n)
		h.unref(cb)
		return nil, ctxErr(err)
	}
	h.held.Add(n)
	return &readGrant{h: h, cb: cb, n: n}, nil
}

// unref drops a request's reference on cb. An entry whose count reaches 0
// stays in the map (its semaphore holds nothing), so that the next read of
// the connection finds it instead of allocating a new one; sweepLocked
// drops such entries when the map grows.
func (h *Handler) unref(cb *connBudget) {
	h.mu.Lock()
	cb.refs--
	h.mu.Unlock()
}

// sweepLocked drops the entries no request holds or waits for (of
// connections idle or gone) and sets the size at which to sweep next, so
// sweeping costs O(1) per new entry amortized.
func (h *Handler) sweepLocked() {
	for addr, cb := range h.conns {
		if cb.refs == 0 {
			delete(h.conns, addr)
		}
	}
	h.sweepAt = max(minSweep, 2*len(h.conns))
}

// minSweep is the number of connection budgets kept before unused ones
// are dropped.
const minSweep = 1024

// release gives the grant's budget and buffer back (once; a nil grant is
// nothing).
func (g *readGrant) release() {
	if g == nil || g.released.Swap(true) {
		return
	}
	h := g.h
	if g.buf != nil {
		h.bufs.Put(g.buf)
	}
	if g.cb != nil {
		h.held.Add(-g.n)
		h.server.Release(g.n)
		g.cb.sem.Release(g.n)
		h.unref(g.cb)
	}
}

func ctxErr(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("storagerpc: waiting for read buffer space: %w (%w)", err, syscall.ETIMEDOUT)
	}
	return fmt.Errorf("storagerpc: waiting for read buffer space: %w (%w)", err, syscall.EINTR)
}

func (h *Handler) bad(op uint16, req []byte, err error) ([]byte, error) {
	h.log.Warn("storagerpc: malformed request", "op", op, "len", len(req), "err", err)
	return nil, fmt.Errorf("%w: %w", err, syscall.EINVAL)
}

// Serve is the transport.Handler.
func (h *Handler) Serve(ctx context.Context, op uint16, req []byte) ([]byte, error) {
	switch op {
	case OpJob, OpJobRead, OpJobWrite, OpJobReadSums:
		return h.serveJob(ctx, op, req)
	case OpJobStats:
		return h.serveJobStats(ctx, req)
	}
	return h.serve(ctx, op, req)
}

// serve serves every op but the job ones (jobstats.go).
func (h *Handler) serve(ctx context.Context, op uint16, req []byte) ([]byte, error) {
	svc := h.svc
	switch op {
	case OpRead:
		r, err := DecodeRead(req)
		if err != nil {
			return h.bad(op, req, err)
		}
		if err := h.guard.object(ctx, op, r.Cap, r.Obj, proto.AccessRead); err != nil {
			return nil, err
		}
		var g *readGrant
		if r.Len > 0 {
			if g, err = h.acquire(ctx, readCost(r.Len)); err != nil {
				return nil, err
			}
		} else {
			g = &readGrant{h: h}
		}
		buf := h.bufs.Get(int(r.Len))
		n, err := svc.Read(ctx, r.Target, r.Obj, r.Off, buf)
		if err != nil {
			h.bufs.Put(buf)
			g.release()
			return nil, err
		}
		// The buffer and its budget are held until the response is
		// written (or dropped with the connection). Called directly (not
		// through the transport), the buffer is simply the caller's and
		// the budget goes back now.
		g.buf = buf
		if !transport.AfterResponse(ctx, g.release) {
			g.buf = nil
			g.release()
		}
		return buf[:n], nil
	case OpReadSums:
		return h.serveReadSums(ctx, req)
	case OpLocalInfo:
		return h.serveLocalInfo(ctx, req)
	case OpWrite:
		r, err := DecodeWrite(req)
		if err != nil {
			return h.bad(op, req, err)
		}
		if err := h.guard.object(ctx, op, r.Cap, r.Obj, proto.AccessWrite); err != nil {
			transport.DoneWithRequest(ctx)
			return nil, err
		}
		// The capability goes along: its issue time is checked against
		// the object's fence (storage.Target.Fence).
		v, n, err := proto.WriteCounting(proto.WithCapability(ctx, r.Cap), svc, r.Target, r.Obj, r.Off, r.Data)
		// The service keeps no reference to the data, so the body is
		// never held past the handler (the transport bounds bodies).
		transport.DoneWithRequest(ctx)
		if err != nil {
			return nil, err
		}
		if n == proto.AllocatedUnknown {
			return EncodeVersion(v), nil
		}
		return EncodeWriteReply(v, n), nil
	case OpTruncate:
		r, err := DecodeTruncate(req)
		if err != nil {
			return h.bad(op, req, err)
		}
		if err := h.guard.object(ctx, op, r.Cap, r.Obj, proto.AccessWrite); err != nil {
			return nil, err
		}
		return nil, svc.Truncate(proto.WithCapability(ctx, r.Cap), r.Target, r.Obj, r.Size)
	case OpExtend:
		r, err := DecodeTruncate(req)
		if err != nil {
			return h.bad(op, req, err)
		}
		if err := h.guard.object(ctx, op, r.Cap, r.Obj, proto.AccessWrite); err != nil {
			return nil, err
		}
		x, ok := svc.(proto.ObjectExtender)
		if !ok {
			return nil, fmt.Errorf("storagerpc: this storage cannot extend objects: %w", syscall.ENOSYS)
		}
		return nil, x.Extend(proto.WithCapability(ctx, r.Cap), r.Target, r.Obj, r.Size)
	case OpSync:
		r, err := DecodeSync(req)
		if err != nil {
			return h.bad(op, req, err)
		}
		if err := h.guard.object(ctx, op, r.Cap, r.Obj, proto.AccessWrite); err != nil {
			return nil, err
		}
		return nil, svc.Sync(ctx, r.Target, r.Obj)
	case OpSpace:
		r, err := DecodeSpace(req)
		if err != nil {
			return h.bad(op, req, err)
		}
		if err := h.guard.object(ctx, op, r.Cap, r.Obj, proto.AccessWrite); err != nil {
			return nil, err
		}
		return nil, svc.Space(ctx, r.Target, r.Obj, r.Mode, r.Off, r.Len)
	case OpSeek:
		r, err := DecodeSeek(req)
		if err != nil {
			return h.bad(op, req, err)
		}
		if err := h.guard.object(ctx, op, r.Cap, r.Obj, proto.AccessRead); err != nil {
			return nil, err
		}
		off, err := svc.Seek(ctx, r.Target, r.Obj, r.Off, r.What)
		if err != nil {
			return nil, err
		}
		return EncodeVersion(off), nil
	case OpAllocated: // any capability for the inode: a writer may know the space its file takes
		r, err := DecodeSync(req)
		if err != nil {
			return h.bad(op, req, err)
		}
		if err := h.guard.object(ctx, op, r.Cap, r.Obj, 0); err != nil {
			return nil, err
		}
		n, err := svc.Allocated(ctx, r.Target, r.Obj)
		if err != nil {
			return nil, err
		}
		return EncodeVersion(n), nil
	case OpCopy:
		r, err := DecodeCopy(req)
		if err != nil {
			return h.bad(op, req, err)
		}
		if err := h.guard.object(ctx, op, r.Cap, r.Dst.Obj, proto.AccessWrite); err != nil {
			return nil, err
		}
		if err := h.guard.object(ctx, op, r.SrcCap, r.Src.Obj, proto.AccessRead); err != nil {
			return nil, err
		}
		return nil, svc.Copy(ctx, r.Dst.Target, r.Dst.Obj, r.DstOff, r.Src.Target, r.Src.Obj, r.SrcOff, r.Len, r.SrcCap)
	case OpRemove:
		r, err := DecodeRemove(req)
		if err != nil {
			return h.bad(op, req, err)
		}
		if err := h.guard.serverOnly(ctx, op); err != nil {
			return nil, err
		}
		return nil, svc.Remove(ctx, r.Target, r.Obj)
	case OpRemoveMany:
		r, err := DecodeRemoveMany(req)
		if err != nil {
			return h.bad(op, req, err)
		}
		if err := h.guard.serverOnly(ctx, op); err != nil {
			return nil, err
		}
		return nil, svc.RemoveMany(ctx, r.Target, r.Objs)
	}
	if resp, ok, err := h.serveCopyRow(ctx, op, req); ok {
		return resp, err
	}
	if resp, ok, err := h.serveRow(ctx, op, req); ok {
		return resp, err
	}
	if resp, err, ok := h.serveRebuild(ctx, op, req); ok {
		return resp, err
	}
	if resp, err, ok := h.serveScrub(ctx, op, req); ok {
		return resp, err
	}
	h.log.Warn("storagerpc: unknown op", "op", op)
	return nil, fmt.Errorf("storagerpc: unknown op %d: %w", op, syscall.ENOSYS)
}
