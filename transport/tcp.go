package transport

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// TCPOptions configures NewTCPWith. The zero value gives the defaults.
type TCPOptions struct {
	// Logger receives protocol errors, handler panics and connection
	// events. Default: slog.Default() at the time NewTCPWith is called.
	Logger *slog.Logger
	// MaxInflight bounds the requests one server connection handles at
	// once; the server stops reading that connection while it is reached.
	// Default 256.
	MaxInflight int

	// Security, if set, makes every connection mutually authenticated
	// (TLS 1.3, see Security) and puts the peer's role and name in each
	// request's ctx. Nil (unit tests): no authentication, peers have
	// RoleNone.
	Security *Security

	// Resource bounds of listeners (see doc.go). Zero = the default,
	// negative = no bound.

	// MaxConns bounds the connections of one listener, authenticated or
	// not; a connection over it is accepted and closed at once. Default
	// 4096.
	MaxConns int
	// MaxConnsPerIP bounds the connections of one listener from one remote
	// IP, so that one host (one stolen key) cannot take all of MaxConns
	// and lock every other client out. Default 512: a mount keeps a few
	// connections per server, a bench host a few per rank.
	MaxConnsPerIP int
	// MaxHandshakesPerIP bounds the connections from one remote IP that
	// are still in the TLS handshake and hello. Default 32.
	MaxHandshakesPerIP int
	// HandshakeTimeout bounds the TLS handshake and hello of a new
	// connection, on both ends. Default 10s.
	HandshakeTimeout time.Duration
	// FrameTimeout bounds how long the rest of a request frame (header
	// and body) may take once its first byte arrived; a stalled frame
	// closes the connection. Default 30s (a 72 MiB body at 2.5 MB/s).
	FrameTimeout time.Duration
	// MaxBodyBytes bounds the request-body bytes a transport's listeners
	// hold at once (bodies being read and bodies of requests being
	// handled). Bodies take memory as their bytes arrive; a reader that
	// finds the budget spent waits, at most until its FrameTimeout.
	// Default 1 GiB.
	MaxBodyBytes int64
	// WriteTimeout bounds a single write of responses to a connection; a
	// client that stops reading its responses for longer is disconnected,
	// freeing what its handlers hold. The deadline is moved on at most
	// every WriteTimeout/8 (a deadline per write costs), so a stalled
	// write fails after 7/8 to all of it. Default 60s.
	WriteTimeout time.Duration
	// IdleTimeout closes a server connection that has had no request in
	// flight and none arriving for that long. Default 10 min. A Pool
	// closes its own idle connections after half of DefaultIdleTimeout
	// (PoolOptions.IdleTimeout), so honest clients never see it.
	IdleTimeout time.Duration
}

// Defaults of TCPOptions' bounds.
const (
	DefaultMaxConns           = 4096
	DefaultMaxConnsPerIP      = 512
	DefaultMaxHandshakesPerIP = 32
	DefaultHandshakeTimeout   = 10 * time.Second
	DefaultFrameTimeout       = 30 * time.Second
	DefaultMaxBodyBytes       = 1 << 30
	DefaultWriteTimeout       = 60 * time.Second
	DefaultIdleTimeout        = 10 * time.Minute
)

const (
	bufSize = 256 << 10
	// respBufSize is the read buffer of a client connection. Large
	// response bodies (reads of 1 MiB) are read straight into their
	// destination, but what the buffer already took past a header is
	// copied out of it: 16 KiB keeps that copy under 2 % of a 1 MiB body
	// (with bufSize it was up to a quarter, 6 % of a mount's CPU in
	// sequential reads), and still takes several small responses per
	// read(2).
	respBufSize        = 16 << 10
	defaultMaxInflight = 256
	// writeAbortGrace is how long a call abandoned (ctx ended) while its
	// request is being written waits for the write to finish before it
	// closes the connection, so that Call never returns while the
	// connection still reads the caller's buffers.
	writeAbortGrace = time.Second
)

// keepAlive detects a peer that vanished without a FIN or RST (power loss,
// partition) in about 25 s, so pooled connections to it are dropped.
var keepAlive = net.KeepAliveConfig{Enable: true, Idle: 10 * time.Second, Interval: 5 * time.Second, Count: 3}

var errClosed = errors.New("transport: connection closed")

type tcpTransport struct {
	log         *slog.Logger
	rlog        *rateLog // refusals and stalls a flood could repeat
	maxInflight int
	sec         *secured
	budget      *byteBudget

	maxConns, maxConnsPerIP, maxHandshakesPerIP int
	handshakeTimeout                            time.Duration
	frameTimeout                                time.Duration
	writeTimeout                                time.Duration
	idleTimeout                                 time.Duration
}

// NewTCP returns the TCP transport with default options.
func NewTCP() Transport { return NewTCPWith(TCPOptions{}) }

// NewTCPWith returns the TCP transport configured by opts.
func NewTCPWith(opts TCPOptions) Transport {
	t := &tcpTransport{log: opts.Logger, maxInflight: opts.MaxInflight, sec: newSecured(opts.Security)}
	if t.log == nil {
		t.log = slog.Default()
	}
	t.rlog = &rateLog{log: t.log}
	if t.maxInflight <= 0 {
		t.maxInflight = defaultMaxInflight
	}
	t.maxConns = orDefault(opts.MaxConns, DefaultMaxConns)
	t.maxConnsPerIP = orDefault(opts.MaxConnsPerIP, DefaultMaxConnsPerIP)
	t.maxHandshakesPerIP = orDefault(opts.MaxHandshakesPerIP, DefaultMaxHandshakesPerIP)
	t.handshakeTimeout = orDefault(opts.HandshakeTimeout, DefaultHandshakeTimeout)
	t.frameTimeout = orDefault(opts.FrameTimeout, DefaultFrameTimeout)
	t.writeTimeout = orDefault(opts.WriteTimeout, DefaultWriteTimeout)
	t.idleTimeout = orDefault(opts.IdleTimeout, DefaultIdleTimeout)
	t.budget = newByteBudget(orDefault(opts.MaxBodyBytes, DefaultMaxBodyBytes))
	return t
}

// epoch is the origin of monoNow.
var epoch = time.Now()

// monoNow is the monotonic clock in nanoseconds since epoch: for the
// activity stamps taken on every call and request, half the cost of
// time.Now (which reads the wall clock too).
func monoNow() int64 { return int64(time.Since(epoch)) }

// orDefault is v, def if v is zero, and 0 (no bound) if v is negative.
func orDefault[T int | int64 | time.Duration](v, def T) T {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

func setupTCP(nc net.Conn) {
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
		_ = tc.SetKeepAliveConfig(keepAlive)
	}
}

// Dial connects to addr (and, with Security, authenticates both ends).
// Failure matches syscall.ETIMEDOUT if ctx expired (EINTR if it was
// cancelled), syscall.EACCES (and ErrAuth) if authentication failed,
// syscall.EPROTO if the server speaks another protocol version, and
// syscall.EIO otherwise.
func (t *tcpTransport) Dial(ctx context.Context, addr string) (Conn, error) {
	d := net.Dialer{KeepAliveConfig: keepAlive}
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("transport: dial %s: %w (%w)", addr, ctxErrno(ctx), ctx.Err())
		}
		return nil, fmt.Errorf("transport: dial %s: %w: %w", addr, syscall.EIO, err)
	}
	setupTCP(raw)
	nc := raw
	if t.sec != nil {
		if t.sec.client == nil {
			_ = raw.Close()
			return nil, fmt.Errorf("transport: dial %s: Security has no ClientTLS: %w", addr, syscall.EINVAL)
		}
		timeout := t.handshakeTimeout
		if timeout <= 0 {
			timeout = DefaultHandshakeTimeout
		}
		nc, _, err = t.sec.clientHandshake(ctx, raw, addr, timeout)
		if err != nil {
			_ = raw.Close()
			return nil, err
		}
	}
	c := &tcpConn{
		addr:       addr,
		nc:         nc,
		raw:        raw,
		log:        t.log,
		pending:    make(map[uint64]*call),
		readerDone: make(chan struct{}),
	}
	c.lastUsed.Store(monoNow())
	c.w = newFrameWriter(nc, c.fail)
	go c.readLoop()
	return c, nil
}

// tcpConn is the client end of a connection.
type tcpConn struct {
	addr       string
	nc         net.Conn // frames: raw, or the tls.Conn over it when encrypted
	raw        net.Conn // the TCP connection; closing it ends the connection
	w          *frameWriter
	log        *slog.Logger
	readerDone chan struct{}

	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]*call // calls waiting for a response; nil once failed
	err     error            // why the connection is unusable; set once
	// lastUsed is when a call last started or ended (monoNow; see
	// retireIfIdle). Stored under mu, loaded without it.
	lastUsed atomic.Int64
}

// call is one request in flight. resp and err are written once, by
// whoever removed the call from pending, before done is closed.
type call struct {
	out outFrame
	op  uint16
	dst []byte // where to read an ok response body that fits (WithResponseBuffer)
	// rb, when the call was made WithResponseBuffers: the body's first
	// len(rb.Head) bytes go to rb.Head, the rest to dst (rb.Body).
	rb   *ResponseBuffers
	resp []byte
	err  error
	done chan struct{}
	// abandoned is set, under tcpConn.mu, when the caller gave up on the
	// call (ctx ended) and took it out of pending.
	abandoned bool
}

type respBufKey struct{}

// WithResponseBuffer returns a context that asks the TCP transport to read
// the body of a successful response to a call made with it straight into
// buf, when it fits: the body Call returns then aliases buf (check with
// &resp[0] == &buf[0]), and no buffer is allocated or copied. Error
// responses and bodies longer than buf are returned in fresh memory as
// usual. Call does not return before the transport is done writing into
// buf, even when ctx ends. Other transports may ignore it.
func WithResponseBuffer(ctx context.Context, buf []byte) context.Context {
	return context.WithValue(ctx, respBufKey{}, buf)
}

// ResponseBuffers is where WithResponseBuffers asks for a response body to
// go: its first len(Head) bytes into Head, the rest into Body, when the
// body has at least len(Head) and at most len(Head)+len(Body) bytes. Fit
// tells, once Call returned, whether it did: the body Call returned is
// then Body's first bytes (maybe none), else the whole body in fresh
// memory.
type ResponseBuffers struct {
	Head, Body []byte
	Fit        bool
}

type respBufsKey struct{}

// WithResponseBuffers is WithResponseBuffer for a body made of a head of a
// known size and the rest (a reply's fixed-size prefix and its data): see
// ResponseBuffers. Call does not return before the transport is done
// writing into rb's buffers, even when ctx ends. Other transports may
// ignore it (rb.Fit stays false).
func WithResponseBuffers(ctx context.Context, rb *ResponseBuffers) context.Context {
	rb.Fit = false
	return context.WithValue(ctx, respBufsKey{}, rb)
}

// WithoutResponseBuffers returns ctx without the response buffers
// WithResponseBuffer or WithResponseBuffers put in it, for other calls made
// with it on the way (a lookup of the server's address): only the call
// the buffers were meant for may read into them.
func WithoutResponseBuffers(ctx context.Context) context.Context {
	if ctx.Value(respBufsKey{}) == nil && ctx.Value(respBufKey{}) == nil {
		return ctx
	}
	return context.WithValue(context.WithValue(ctx, respBufsKey{}, (*ResponseBuffers)(nil)), respBufKey{}, []byte(nil))
}

// fits reports whether an ok body of n bytes is read into the caller's
// buffers.
func (cl *call) fits(n uint32) bool {
	if cl.rb != nil {
		return int(n) >= len(cl.rb.Head) && int(n)-len(cl.rb.Head) <= len(cl.dst)
	}
	return cl.dst != nil && int(n) <= len(cl.dst)
}

func (c *tcpConn) Call(ctx context.Context, op uint16, parts ...[]byte) ([]byte, error) {
	if ctx.Err() != nil {
		return nil, ctxError(ctx, c.addr, op)
	}
	n := 0
	for _, p := range parts {
		n += len(p)
		if n > MaxBody {
			return nil, fmt.Errorf("transport: %s op %d: request body over %d bytes: %w", c.addr, op, MaxBody, errMsgSize)
		}
	}
	cl := &call{op: op, done: make(chan struct{})}
	cl.out.parts = parts
	if rb, ok := ctx.Value(respBufsKey{}).(*ResponseBuffers); ok && rb != nil {
		cl.rb, cl.dst = rb, rb.Body
	} else {
		cl.dst, _ = ctx.Value(respBufKey{}).([]byte)
	}

	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, brokenError(c.addr, op, err, true)
	}
	c.nextID++
	id := c.nextID
	c.pending[id] = cl
	c.lastUsed.Store(monoNow())
	c.mu.Unlock()

	encodeHeader(cl.out.hdr[:], header{kind: kindRequest, op: op, id: id, length: uint32(n)})
	// On an idle connection send writes the request from this goroutine
	// and may block there (backpressure, a frozen server); a watchdog then
	// abandons the call when ctx ends, exactly as the select below does
	// for a queued request, closing the connection if the write is still
	// stuck writeAbortGrace later.
	var stop func() bool
	if ctx.Done() != nil {
		stop = context.AfterFunc(ctx, func() {
			if c.abandon(id, cl) {
				c.release(&cl.out)
			}
		})
	}
	// If the writer has stopped, the connection is failing and fail
	// completes cl (it was registered before c.err was set).
	c.w.send(&cl.out)
	if stop != nil {
		stop()
	}

	select {
	case <-cl.done:
		return c.finish(cl)
	case <-ctx.Done():
	}
	if !c.abandon(id, cl) { // a response or a failure is being delivered right now
		<-cl.done
		return c.finish(cl)
	}
	c.release(&cl.out)
	return nil, ctxError(ctx, c.addr, op)
}

// abandon takes cl out of pending, so that no response or failure is
// delivered to it, and reports whether cl is abandoned (by this or an
// earlier abandon). False means it was completed, or is being completed.
func (c *tcpConn) abandon(id uint64, cl *call) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !cl.abandoned && c.pending[id] == cl {
		delete(c.pending, id)
		cl.abandoned = true
	}
	return cl.abandoned
}

// finish returns the outcome of a completed call. A failed call may have
// been written when the connection broke; wait until the writer lets go of
// its parts (prompt: the connection is closed by then).
func (c *tcpConn) finish(cl *call) ([]byte, error) {
	if cl.err != nil {
		var re *RemoteError
		if !errors.As(cl.err, &re) {
			c.release(&cl.out)
		}
	}
	return cl.resp, cl.err
}

// release returns once the writer no longer reads f's parts. If the write
// does not finish within writeAbortGrace, the connection is closed.
func (c *tcpConn) release(f *outFrame) {
	ch := c.w.withdraw(f)
	if ch == nil {
		return
	}
	t := time.NewTimer(writeAbortGrace)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
		c.fail(errors.New("transport: write stalled after a call was abandoned"))
		<-ch
	}
}

// fail makes the connection unusable and completes every pending call with
// an EIO error naming the address. The first cause wins.
func (c *tcpConn) fail(cause error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = cause
	pending := c.pending
	c.pending = nil
	c.mu.Unlock()

	c.w.stop(cause)
	_ = c.raw.Close()
	for _, cl := range pending {
		cl.err = brokenError(c.addr, cl.op, cause, !c.w.wasSent(&cl.out))
		close(cl.done)
	}
}

var errIdle = errors.New("transport: connection closed by the client after being idle")

// retireIfIdle fails the connection and reports true if no call is in
// flight and none started or ended for d. The check and the failure are
// one step under mu, so a call either registered before (and the
// connection stays) or finds it failed before sending anything (and is
// retried by Pool on a new connection).
func (c *tcpConn) retireIfIdle(d time.Duration) bool {
	// Pool asks before every call: the common answer (used recently)
	// takes no lock.
	if monoNow()-c.lastUsed.Load() < int64(d) {
		return false
	}
	c.mu.Lock()
	if c.err != nil || len(c.pending) > 0 || monoNow()-c.lastUsed.Load() < int64(d) {
		c.mu.Unlock()
		return false
	}
	c.err = errIdle
	c.pending = nil
	c.mu.Unlock()
	c.w.stop(errIdle)
	_ = c.raw.Close()
	return true
}

func (c *tcpConn) isBroken() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err != nil
}

// Close fails the calls in flight with EIO and waits for the connection's
// goroutines to exit.
func (c *tcpConn) Close() error {
	c.fail(errClosed)
	<-c.readerDone
	<-c.w.exited
	return nil
}

func (c *tcpConn) readLoop() {
	defer close(c.readerDone)
	br := bufio.NewReaderSize(c.nc, respBufSize)
	var hb [HeaderSize]byte
	for {
		if _, err := io.ReadFull(br, hb[:]); err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("transport: connection closed by server")
			}
			c.fail(err)
			return
		}
		h, err := decodeHeader(hb[:])
		if err == nil && h.kind != kindResponse {
			err = fmt.Errorf("%w: %d, want a response", errBadKind, h.kind)
		}
		c.mu.Lock()
		cl := c.pending[h.id]
		c.mu.Unlock()
		if err == nil && cl != nil && cl.op != h.op {
			err = fmt.Errorf("transport: response for request %d has op %d, want %d", h.id, h.op, cl.op)
		}
		if err != nil {
			c.log.Warn("transport: bad frame from server", "addr", c.addr, "err", err)
			c.fail(err)
			return
		}
		if cl == nil { // abandoned call: skip its body
			if _, err := io.CopyN(io.Discard, br, int64(h.length)); err != nil {
				c.fail(fmt.Errorf("transport: reading response body: %w", err))
				return
			}
			continue
		}
		if h.status == 0 && cl.fits(h.length) {
			// Claim the call before reading into the caller's buffer, so
			// that an abandoned Call waits for the read to end (see Call).
			c.mu.Lock()
			if c.pending[h.id] == cl {
				delete(c.pending, h.id)
				c.lastUsed.Store(monoNow())
			} else {
				cl = nil
			}
			c.mu.Unlock()
			if cl == nil {
				if _, err := io.CopyN(io.Discard, br, int64(h.length)); err != nil {
					c.fail(fmt.Errorf("transport: reading response body: %w", err))
					return
				}
				continue
			}
			n := int(h.length)
			var err error
			if cl.rb != nil && len(cl.rb.Head) > 0 {
				_, err = io.ReadFull(br, cl.rb.Head)
				n -= len(cl.rb.Head)
			}
			body := cl.dst[:n]
			if err == nil {
				_, err = io.ReadFull(br, body)
			}
			if err != nil {
				err = fmt.Errorf("transport: reading response body: %w", err)
				cl.err = brokenError(c.addr, cl.op, err, false)
				close(cl.done)
				c.fail(err)
				return
			}
			cl.resp = body
			if cl.rb != nil {
				cl.rb.Fit = true
			}
			close(cl.done)
			continue
		}
		body := make([]byte, h.length)
		if _, err := io.ReadFull(br, body); err != nil {
			c.fail(fmt.Errorf("transport: reading response body: %w", err))
			return
		}
		c.mu.Lock()
		if c.pending[h.id] == cl {
			delete(c.pending, h.id)
			c.lastUsed.Store(monoNow())
		} else {
			cl = nil // abandoned meanwhile
		}
		c.mu.Unlock()
		if cl == nil {
			continue
		}
		if h.status != 0 {
			if len(body) > maxErrMsg {
				body = body[:maxErrMsg]
			}
			cl.err = &RemoteError{Addr: c.addr, Op: h.op, Errno: syscall.Errno(h.status), Msg: string(body)}
		} else {
			cl.resp = body
		}
		close(cl.done)
	}
}
