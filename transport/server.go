package transport

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/weft-fs/weft/internal/bufpool"
)

// Listen serves h on addr until the listener is closed.
func (t *tcpTransport) Listen(addr string, h Handler) (Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("transport: listen %s: %w", addr, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &tcpListener{
		bodies: newBodyPool(),
		t:      t,
		ln:     ln,
		h:      h,
		log:    t.log,
		ctx:    ctx,
		cancel: cancel,
		conns:  make(map[*serverConn]struct{}),
	}
	l.wg.Add(1)
	go l.acceptLoop()
	return l, nil
}

type tcpListener struct {
	t      *tcpTransport
	ln     net.Listener
	h      Handler
	log    *slog.Logger
	ctx    context.Context // cancelled by Close; parent of every handler's ctx
	cancel context.CancelFunc

	bodies *bufpool.Pool // request bodies handed back with DoneWithRequest

	mu     sync.Mutex
	conns  map[*serverConn]struct{}
	closed bool

	wg        sync.WaitGroup // accept loop and connections
	closeOnce sync.Once
	closeErr  error
}

func (l *tcpListener) Addr() string { return l.ln.Addr().String() }

// Close stops accepting, closes every connection, cancels the handlers'
// contexts and waits until all handlers have returned.
func (l *tcpListener) Close() error {
	l.closeOnce.Do(func() {
		l.mu.Lock()
		l.closed = true
		conns := make([]*serverConn, 0, len(l.conns))
		for sc := range l.conns {
			conns = append(conns, sc)
		}
		l.mu.Unlock()
		l.closeErr = l.ln.Close()
		// Connections first, so handlers that return on cancellation
		// cannot get a response out: Close acts like the server dying.
		for _, sc := range conns {
			_ = sc.nc.Close()
		}
		l.cancel()
		l.wg.Wait()
	})
	return l.closeErr
}

func (l *tcpListener) acceptLoop() {
	defer l.wg.Done()
	var delay time.Duration
	for {
		nc, err := l.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || l.ctx.Err() != nil {
				return
			}
			// Out of descriptors and the like: back off, keep serving.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			l.log.Warn("transport: accept failed", "addr", l.Addr(), "err", err, "retry_in", delay)
			select {
			case <-time.After(delay):
			case <-l.ctx.Done():
				return
			}
			continue
		}
		delay = 0
		setupTCP(nc)
		sc := l.newServerConn(nc)
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			sc.w.stop(errClosed)
			_ = nc.Close()
			<-sc.w.exited
			return
		}
		l.conns[sc] = struct{}{}
		l.wg.Add(1)
		l.mu.Unlock()
		go sc.serve()
	}
}

// serverConn is the server end of one connection: a reader (serve), a
// writer, and one goroutine per request in flight.
type serverConn struct {
	l        *tcpListener
	nc       net.Conn
	remote   string
	w        *frameWriter
	ctx      context.Context // cancelled when the connection ends
	cancel   context.CancelFunc
	sem      chan struct{}
	handlers sync.WaitGroup // one per handler goroutine (workers)

	// work hands a request to an idle worker: the reader sends only when
	// a worker is waiting to receive, else it starts a new worker, up to
	// MaxInflight of them (workers counts them; only the reader starts
	// workers, and a worker that leaves decrements it).
	work    chan request
	workers atomic.Int32
	idle    atomic.Int32 // workers waiting on work (or about to)
}

// request is one request read from the connection, waiting for a worker.
type request struct {
	h    header
	body []byte
}

// maxIdleWorkers bounds the workers a connection keeps waiting for requests
// once a burst is over; the others exit.
const maxIdleWorkers = 16

func (l *tcpListener) newServerConn(nc net.Conn) *serverConn {
	ctx, cancel := context.WithCancel(l.ctx)
	remote := nc.RemoteAddr().String()
	// Every request of the connection carries its peer; unauthenticated
	// (RoleNone) until the transport authenticates connections.
	ctx = WithPeer(ctx, Peer{Addr: remote})
	sc := &serverConn{
		l:      l,
		nc:     nc,
		remote: remote,
		ctx:    ctx,
		cancel: cancel,
		sem:    make(chan struct{}, l.t.maxInflight),
		work:   make(chan request),
	}
	sc.w = newFrameWriter(nc, func(err error) {
		// The reader notices the close and ends the connection.
		_ = nc.Close()
	})
	return sc
}

// protocolError marks a read failure caused by a malformed frame.
type protocolError struct{ err error }

func (e *protocolError) Error() string { return e.err.Error() }
func (e *protocolError) Unwrap() error { return e.err }

func (sc *serverConn) serve() {
	defer sc.l.wg.Done()
	err := sc.readLoop()
	var perr *protocolError
	switch {
	case errors.As(err, &perr):
		sc.l.log.Warn("transport: closing connection after protocol error",
			"remote", sc.remote, "local", sc.l.Addr(), "reason", perr.err)
	case err != nil && sc.ctx.Err() == nil:
		sc.l.log.Debug("transport: connection ended", "remote", sc.remote, "err", err)
	}
	sc.cancel()
	sc.w.stop(errClosed)
	_ = sc.nc.Close()
	sc.handlers.Wait()
	<-sc.w.exited
	sc.l.mu.Lock()
	delete(sc.l.conns, sc)
	sc.l.mu.Unlock()
}

// readLoop reads requests and starts a handler for each until the
// connection ends. It returns nil on a clean close between frames.
func (sc *serverConn) readLoop() error {
	br := bufio.NewReaderSize(sc.nc, bufSize)
	var hb [HeaderSize]byte
	for {
		if _, err := io.ReadFull(br, hb[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return &protocolError{fmt.Errorf("truncated frame header: %w", err)}
			}
			return err
		}
		h, err := decodeHeader(hb[:])
		if err == nil && h.kind != kindRequest {
			err = fmt.Errorf("%w: %d, want a request", errBadKind, h.kind)
		}
		if err != nil {
			return &protocolError{err}
		}
		body := sc.l.bodies.Get(int(h.length))
		if _, err := io.ReadFull(br, body); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return &protocolError{fmt.Errorf("truncated frame: op %d id %d wants %d body bytes: %w", h.op, h.id, h.length, err)}
			}
			return err
		}
		select {
		case sc.sem <- struct{}{}:
		case <-sc.ctx.Done():
			return nil
		}
		if !sc.dispatch(request{h, body}) {
			<-sc.sem
			sc.l.bodies.Put(body)
			return nil
		}
	}
}

// dispatch hands r to an idle worker, or starts a worker for it when none
// is idle and fewer than MaxInflight exist (the reader holds r's slot, so
// at the limit some worker is idle or about to be, and the send waits for
// it). It reports false if the connection ended first.
func (sc *serverConn) dispatch(r request) bool {
	select {
	case sc.work <- r:
		return true
	default:
	}
	if int(sc.workers.Load()) < cap(sc.sem) {
		sc.workers.Add(1)
		sc.handlers.Add(1)
		go sc.worker(r)
		return true
	}
	select {
	case sc.work <- r:
		return true
	case <-sc.ctx.Done():
		return false
	}
}

// worker handles r, then the requests the reader hands it, until the
// connection ends or enough other workers are idle. A long-lived worker
// saves a goroutine start per request and keeps the stack its handler
// grew.
func (sc *serverConn) worker(r request) {
	defer sc.handlers.Done()
	defer sc.workers.Add(-1)
	for {
		sc.handle(r.h, r.body)
		if sc.idle.Add(1) > maxIdleWorkers {
			sc.idle.Add(-1)
			return
		}
		select {
		case r = <-sc.work:
			sc.idle.Add(-1)
		case <-sc.ctx.Done():
			sc.idle.Add(-1)
			return
		}
	}
}

// handle runs one request and writes its response (OpProbe is answered
// here, with an empty ok response, without calling the handler). It holds its semaphore
// slot until the response is written, so a client that does not read its
// responses stops the server from reading its requests.
func (sc *serverConn) handle(h header, req []byte) {
	defer func() { <-sc.sem }()

	rc := &reqCtx{Context: sc.ctx}
	var resp []byte
	var err error
	if h.op == OpProbe {
		// Pool's probe of a suspect server: any answer shows it serves.
		rc.reqDone = true
	} else {
		resp, err = sc.run(rc, h.op, req)
	}
	if rc.reqDone {
		sc.l.bodies.Put(req)
	}
	if err == nil && len(resp) > MaxBody {
		sc.l.log.Error("transport: handler response too large", "op", h.op, "bytes", len(resp))
		err = fmt.Errorf("transport: op %d response of %d bytes over %d: %w", h.op, len(resp), MaxBody, errMsgSize)
	}
	rh := header{kind: kindResponse, op: h.op, id: h.id}
	f := &outFrame{done: make(chan struct{})}
	if err != nil {
		msg := err.Error()
		if len(msg) > maxErrMsg {
			msg = msg[:maxErrMsg]
		}
		rh.status = uint32(errnoOf(err))
		resp = []byte(msg)
	}
	rh.length = uint32(len(resp))
	encodeHeader(f.hdr[:], rh)
	f.parts = [][]byte{resp}
	// Written by this goroutine when the connection is idle, else queued.
	if sc.w.send(f) {
		<-f.done
	}
	for _, fn := range rc.after {
		fn()
	}
}

// reqCtx is the context of one request's handler: the connection's, plus
// the hooks of AfterResponse and DoneWithRequest.
type reqCtx struct {
	context.Context
	after   []func()
	reqDone bool
}

type reqCtxKey struct{}

func (r *reqCtx) Value(k any) any {
	if k == (reqCtxKey{}) {
		return r
	}
	return r.Context.Value(k)
}

// AfterResponse registers f to run once the response of the request
// handled with ctx has been written to the connection (or dropped because
// the connection ended), so a handler can recycle the memory of the
// response it returns. It reports false, without registering f, when ctx is
// not the context of a request served by this transport; the handler must
// then not reuse the response's memory.
func AfterResponse(ctx context.Context, f func()) bool {
	rc, ok := ctx.Value(reqCtxKey{}).(*reqCtx)
	if !ok {
		return false
	}
	rc.after = append(rc.after, f)
	return true
}

// DoneWithRequest tells the transport that the handler running with ctx
// keeps no reference to its request body after it returns, so the memory
// can be reused for later requests. Without it the body is the handler's.
func DoneWithRequest(ctx context.Context) {
	if rc, ok := ctx.Value(reqCtxKey{}).(*reqCtx); ok {
		rc.reqDone = true
	}
}

// run calls the handler, turning a panic into an EIO error.
func (sc *serverConn) run(ctx context.Context, op uint16, req []byte) (resp []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			sc.l.log.Error("transport: handler panicked", "remote", sc.remote, "op", op,
				"panic", r, "stack", string(debug.Stack()))
			resp, err = nil, fmt.Errorf("transport: op %d handler panicked: %v: %w", op, r, syscall.EIO)
		}
	}()
	return sc.l.h(ctx, op, req)
}
