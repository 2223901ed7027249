package transport

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/weft-fs/weft/internal/bufpool"
)

// Listen serves h on addr until the listener is closed.
func (t *tcpTransport) Listen(addr string, h Handler) (Listener, error) {
	if t.sec != nil && t.sec.server == nil {
		return nil, fmt.Errorf("transport: listen %s: Security has no ServerTLS: %w", addr, syscall.EINVAL)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("transport: listen %s: %w", addr, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &tcpListener{
		bodies:      newBodyPool(),
		t:           t,
		ln:          ln,
		h:           h,
		log:         t.log,
		ctx:         ctx,
		cancel:      cancel,
		conns:       make(map[net.Conn]struct{}),
		handshaking: make(map[string]int),
		perIP:       make(map[string]int),
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

	mu          sync.Mutex
	conns       map[net.Conn]struct{} // raw TCP connections, in handshake or served
	handshaking map[string]int        // connections in the handshake per remote IP
	perIP       map[string]int        // connections per remote IP
	closed      bool

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
		conns := make([]net.Conn, 0, len(l.conns))
		for nc := range l.conns {
			conns = append(conns, nc)
		}
		l.mu.Unlock()
		l.closeErr = l.ln.Close()
		// Connections first, so handlers that return on cancellation
		// cannot get a response out: Close acts like the server dying.
		for _, nc := range conns {
			_ = nc.Close()
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
		remote := nc.RemoteAddr().String()
		ip, _, _ := net.SplitHostPort(remote)
		secure := l.t.sec != nil
		l.mu.Lock()
		var refuse string
		switch {
		case l.closed:
			l.mu.Unlock()
			_ = nc.Close()
			return
		case l.t.maxConns > 0 && len(l.conns) >= l.t.maxConns:
			refuse = fmt.Sprintf("at the connection limit (%d, TCPOptions.MaxConns)", l.t.maxConns)
		case l.t.maxConnsPerIP > 0 && l.perIP[ip] >= l.t.maxConnsPerIP:
			refuse = fmt.Sprintf("%d connections from this address (TCPOptions.MaxConnsPerIP)", l.perIP[ip])
		case secure && l.t.maxHandshakesPerIP > 0 && l.handshaking[ip] >= l.t.maxHandshakesPerIP:
			refuse = fmt.Sprintf("%d connections from this address still in the handshake (TCPOptions.MaxHandshakesPerIP)", l.handshaking[ip])
		}
		if refuse != "" {
			l.mu.Unlock()
			_ = nc.Close()
			l.t.rlog.Warn("transport: refusing connection", "remote", remote, "local", l.Addr(), "reason", refuse)
			continue
		}
		l.conns[nc] = struct{}{}
		l.perIP[ip]++
		if secure {
			l.handshaking[ip]++
		}
		l.wg.Add(1)
		l.mu.Unlock()
		setupTCP(nc)
		go l.serveConn(nc, remote, ip)
	}
}

// serveConn authenticates a new connection (with Security) and serves it.
func (l *tcpListener) serveConn(raw net.Conn, remote, ip string) {
	defer l.wg.Done()
	defer func() {
		l.mu.Lock()
		delete(l.conns, raw)
		if l.perIP[ip]--; l.perIP[ip] <= 0 {
			delete(l.perIP, ip)
		}
		l.mu.Unlock()
		_ = raw.Close()
	}()
	nc := raw
	peer := Peer{Addr: remote}
	if sec := l.t.sec; sec != nil {
		if l.t.handshakeTimeout > 0 {
			_ = raw.SetDeadline(time.Now().Add(l.t.handshakeTimeout))
		}
		var err error
		nc, peer.Role, peer.Name, err = sec.serverHandshake(l.ctx, raw)
		l.mu.Lock()
		if l.handshaking[ip]--; l.handshaking[ip] <= 0 {
			delete(l.handshaking, ip)
		}
		l.mu.Unlock()
		if err != nil {
			if l.ctx.Err() == nil && errors.Is(err, io.EOF) {
				// Closed before sending anything: a port probe or a
				// readiness check (weft up, testcluster), not an attack.
				l.log.Debug("transport: connection closed before the handshake", "remote", remote, "local", l.Addr())
			} else if l.ctx.Err() == nil {
				if errors.Is(err, os.ErrDeadlineExceeded) {
					err = fmt.Errorf("handshake not finished within %v (TCPOptions.HandshakeTimeout): %w", l.t.handshakeTimeout, err)
				}
				l.t.rlog.Warn("transport: refusing connection", "remote", remote, "local", l.Addr(),
					"role", peer.Role, "name", peer.Name, "reason", err)
			}
			return
		}
		_ = raw.SetDeadline(time.Time{})
	}
	sc := l.newServerConn(nc, raw, peer)
	sc.serve()
}

// serverConn is the server end of one connection: a reader (serve), a
// writer, and one goroutine per request in flight.
type serverConn struct {
	l        *tcpListener
	nc       net.Conn // frames: raw, or the tls.Conn over it when encrypted
	raw      net.Conn // the TCP connection; closing it ends the connection
	remote   string
	w        *frameWriter
	ctx      context.Context // cancelled when the connection ends; carries the Peer
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
	// lastActive is when a request last arrived or a response was last
	// written (monoNow), for IdleTimeout.
	lastActive atomic.Int64
	// The reader's read deadline (zero: none), and whether it is the idle
	// deadline (else a frame's). Only the reader uses them.
	readDeadline time.Time
	idleDeadline bool
}

// request is one request read from the connection, waiting for a worker.
type request struct {
	h    header
	body []byte
}

// maxIdleWorkers bounds the workers a connection keeps waiting for requests
// once a burst is over; the others exit.
const maxIdleWorkers = 16

func (l *tcpListener) newServerConn(nc, raw net.Conn, peer Peer) *serverConn {
	ctx, cancel := context.WithCancel(WithPeer(l.ctx, peer))
	sc := &serverConn{
		l:      l,
		nc:     nc,
		raw:    raw,
		remote: peer.Addr,
		ctx:    ctx,
		cancel: cancel,
		sem:    make(chan struct{}, l.t.maxInflight),
		work:   make(chan request),
	}
	sc.lastActive.Store(monoNow())
	sc.w = newFrameWriter(nc, func(err error) {
		// The reader notices the close and ends the connection.
		if errors.Is(err, os.ErrDeadlineExceeded) {
			l.t.rlog.Warn("transport: closing connection: the client has not read its responses",
				"remote", peer.Addr, "local", l.Addr(), "write_timeout", l.t.writeTimeout)
		}
		_ = raw.Close()
	})
	sc.w.stall = l.t.writeTimeout
	return sc
}

// protocolError marks a read failure caused by a malformed frame.
type protocolError struct{ err error }

func (e *protocolError) Error() string { return e.err.Error() }
func (e *protocolError) Unwrap() error { return e.err }

func (sc *serverConn) serve() {
	err := sc.readLoop()
	var perr *protocolError
	switch {
	case errors.As(err, &perr):
		sc.l.t.rlog.Warn("transport: closing connection after protocol error",
			"remote", sc.remote, "local", sc.l.Addr(), "reason", perr.err)
	case err != nil && sc.ctx.Err() == nil:
		sc.l.log.Debug("transport: connection ended", "remote", sc.remote, "err", err)
	}
	sc.cancel()
	sc.w.stop(errClosed)
	_ = sc.raw.Close()
	sc.handlers.Wait()
	<-sc.w.exited
}

// bodyChunk is the most a request body grows by before its bytes arrived:
// a body takes memory (and MaxBodyBytes budget) as its data comes, so a
// peer announcing a large frame and stalling pins little.
const bodyChunk = 1 << 20

// readLoop reads requests and starts a handler for each until the
// connection ends. It returns nil on a clean close between frames.
func (sc *serverConn) readLoop() error {
	br := bufio.NewReaderSize(sc.nc, bufSize)
	t := sc.l.t
	var hb [HeaderSize]byte
	for {
		if err := sc.awaitFrame(br); err != nil {
			return err
		}
		// A frame already in the buffer is read without blocking: no
		// deadline to set (the common case of small requests).
		var frameDeadline time.Time
		if t.frameTimeout > 0 && !frameBuffered(br) {
			frameDeadline = time.Now().Add(t.frameTimeout)
			_ = sc.nc.SetReadDeadline(frameDeadline)
			sc.readDeadline, sc.idleDeadline = frameDeadline, false
		}
		if _, err := io.ReadFull(br, hb[:]); err != nil {
			if err == io.EOF {
				return nil // closed between frames (ReadFull read nothing)
			}
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return &protocolError{fmt.Errorf("truncated frame header: %w", err)}
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return &protocolError{fmt.Errorf("frame header stalled for %v (TCPOptions.FrameTimeout)", t.frameTimeout)}
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
		sc.lastActive.Store(monoNow())
		body, err := sc.readBody(br, h, frameDeadline)
		if err != nil {
			return err
		}
		select {
		case sc.sem <- struct{}{}:
		case <-sc.ctx.Done():
			sc.releaseBody(body)
			return nil
		}
		if !sc.dispatch(request{h, body}) {
			<-sc.sem
			sc.releaseBody(body)
			return nil
		}
	}
}

// awaitFrame waits for the first byte of the next frame, closing the
// connection (returning an error) once it has been idle for IdleTimeout:
// no request in flight, none arriving, no response written. The idle
// deadline is set only when a frame deadline replaced it; when it passes
// while the connection was in use, it is moved on and the wait goes on.
func (sc *serverConn) awaitFrame(br *bufio.Reader) error {
	if br.Buffered() > 0 {
		return nil
	}
	idle := sc.l.t.idleTimeout
	if idle <= 0 {
		if !sc.readDeadline.IsZero() {
			_ = sc.nc.SetReadDeadline(time.Time{})
			sc.readDeadline = time.Time{}
		}
	} else if !sc.idleDeadline {
		sc.readDeadline = time.Now().Add(idle - time.Duration(monoNow()-sc.lastActive.Load()))
		_ = sc.nc.SetReadDeadline(sc.readDeadline)
		sc.idleDeadline = true
	}
	for {
		_, err := br.Peek(1)
		if err == nil {
			return nil
		}
		if errors.Is(err, io.EOF) {
			return nil // ReadFull sees it again: a clean close
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return err
		}
		if len(sc.sem) > 0 {
			sc.lastActive.Store(monoNow())
		}
		if since := time.Duration(monoNow() - sc.lastActive.Load()); since < idle {
			sc.readDeadline = time.Now().Add(idle - since)
			_ = sc.nc.SetReadDeadline(sc.readDeadline)
			continue
		}
		sc.l.log.Debug("transport: closing idle connection", "remote", sc.remote, "idle_timeout", idle)
		return errIdleServer
	}
}

// frameBuffered reports whether the whole next frame (header and body) is
// in br's buffer. A malformed header counts as buffered: reading it does
// not block either.
func frameBuffered(br *bufio.Reader) bool {
	if br.Buffered() < HeaderSize {
		return false
	}
	hb, _ := br.Peek(HeaderSize)
	h, err := decodeHeader(hb)
	return err != nil || br.Buffered() >= HeaderSize+int(h.length)
}

var errIdleServer = errors.New("transport: connection idle")

// readBody reads h's body, taking memory and budget as the bytes arrive:
// the buffer starts at up to bodyChunk and grows fourfold (to at most the
// announced length) each time it is full.
func (sc *serverConn) readBody(br *bufio.Reader, h header, deadline time.Time) ([]byte, error) {
	n := int(h.length)
	budget := sc.l.t.budget
	size := min(n, bodyChunk)
	if !budget.acquire(int64(size), deadline, sc.l.t.frameTimeout, sc.ctx.Done()) {
		return nil, sc.budgetError(h)
	}
	body := sc.l.bodies.Get(size)
	got := 0
	for {
		m, err := io.ReadFull(br, body[got:])
		got += m
		if err != nil {
			sc.releaseBody(body)
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, &protocolError{fmt.Errorf("truncated frame: op %d id %d wants %d body bytes: %w", h.op, h.id, h.length, err)}
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return nil, &protocolError{fmt.Errorf("frame stalled: op %d id %d sent %d of %d body bytes within %v (TCPOptions.FrameTimeout)",
					h.op, h.id, got, h.length, sc.l.t.frameTimeout)}
			}
			return nil, err
		}
		if got == n {
			return body, nil
		}
		next := min(n, 4*len(body))
		if !budget.acquire(int64(next), deadline, sc.l.t.frameTimeout, sc.ctx.Done()) {
			sc.releaseBody(body)
			return nil, sc.budgetError(h)
		}
		nb := sc.l.bodies.Get(next)
		copy(nb, body[:got])
		sc.releaseBody(body)
		body = nb
	}
}

func (sc *serverConn) budgetError(h header) error {
	return &protocolError{fmt.Errorf("request body budget (TCPOptions.MaxBodyBytes %d) spent by other requests for %v: op %d id %d of %d bytes",
		sc.l.t.budget.total, sc.l.t.frameTimeout, h.op, h.id, h.length)}
}

// releaseBody gives a body's budget back and its memory to the pool.
func (sc *serverConn) releaseBody(b []byte) {
	sc.l.t.budget.release(int64(len(b)))
	sc.l.bodies.Put(b)
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
	_, rc.canSendFile = sc.nc.(*net.TCPConn) // frames in the clear, on TCP
	var resp []byte
	var err error
	if h.op == OpProbe {
		// Pool's probe of a suspect server: any answer shows it serves.
		rc.reqDone = true
	} else {
		resp, err = sc.run(rc, h.op, req)
	}
	sc.l.t.budget.release(int64(len(req)))
	if rc.reqDone {
		sc.l.bodies.Put(req)
	}
	if err == nil && len(resp)+rc.file.n > MaxBody {
		sc.l.log.Error("transport: handler response too large", "op", h.op, "bytes", len(resp)+rc.file.n)
		err = fmt.Errorf("transport: op %d response of %d bytes over %d: %w", h.op, len(resp)+rc.file.n, MaxBody, errMsgSize)
	}
	rh := header{kind: kindResponse, op: h.op, id: h.id}
	f := &outFrame{done: make(chan struct{})}
	if err == nil && rc.file.n > 0 {
		f.file = &rc.file
	}
	if err != nil {
		msg := err.Error()
		if len(msg) > maxErrMsg {
			msg = msg[:maxErrMsg]
		}
		rh.status = uint32(errnoOf(err))
		resp = []byte(msg)
	}
	rh.length = uint32(f.bodyLen(len(resp)))
	encodeHeader(f.hdr[:], rh)
	f.parts = [][]byte{resp}
	// Written by this goroutine when the connection is idle, else queued.
	if sc.w.send(f) {
		<-f.done
	}
	sc.lastActive.Store(monoNow())
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
	// canSendFile: the connection is a plain TCP one, so SendFile may add
	// file bytes to the response (file; n 0: none).
	canSendFile bool
	file        fileSegment
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

// SendFile asks the transport to send, after the body the handler running
// with ctx returns, n bytes of the file src from offset off, straight from
// the kernel's page cache to the connection with sendfile(2): the bytes
// are never copied through this process. The response's length counts
// them; they are sent only with an ok response. The handler must keep the
// file open until the response is written (see AfterResponse). A file
// found shorter than promised (cut meanwhile) is padded with zeros, so the
// frame keeps its length: a handler whose bytes may change under it must
// let its reader check them (storagerpc's OpReadSums sends checksums). It
// reports false, registering nothing, when
// the connection cannot (an encrypted one: the bytes must go through TLS;
// or ctx is not a request's of this transport, or already has a file
// segment): the handler then puts the bytes in its body itself.
func SendFile(ctx context.Context, src syscall.Conn, off int64, n int) bool {
	rc, ok := ctx.Value(reqCtxKey{}).(*reqCtx)
	if !ok || !rc.canSendFile || rc.file.n != 0 || n <= 0 || off < 0 {
		return false
	}
	raw, err := src.SyscallConn()
	if err != nil {
		return false
	}
	rc.file = fileSegment{src: raw, off: off, n: n}
	return true
}

// sendFileBytes is the length of the file segment the request handled
// with ctx sends (SendFile), for the byte counts of Observe.
func sendFileBytes(ctx context.Context) int {
	if rc, ok := ctx.Value(reqCtxKey{}).(*reqCtx); ok {
		return rc.file.n
	}
	return 0
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
