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
	"sync"
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
}

const (
	bufSize            = 256 << 10
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
	maxInflight int
}

// NewTCP returns the TCP transport with default options.
func NewTCP() Transport { return NewTCPWith(TCPOptions{}) }

// NewTCPWith returns the TCP transport configured by opts.
func NewTCPWith(opts TCPOptions) Transport {
	t := &tcpTransport{log: opts.Logger, maxInflight: opts.MaxInflight}
	if t.log == nil {
		t.log = slog.Default()
	}
	if t.maxInflight <= 0 {
		t.maxInflight = defaultMaxInflight
	}
	return t
}

func setupTCP(nc net.Conn) {
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
		_ = tc.SetKeepAliveConfig(keepAlive)
	}
}

// Dial connects to addr. Failure matches syscall.ETIMEDOUT if ctx expired
// (EINTR if it was cancelled) and syscall.EIO otherwise.
func (t *tcpTransport) Dial(ctx context.Context, addr string) (Conn, error) {
	d := net.Dialer{KeepAliveConfig: keepAlive}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("transport: dial %s: %w (%w)", addr, ctxErrno(ctx), ctx.Err())
		}
		return nil, fmt.Errorf("transport: dial %s: %w: %w", addr, syscall.EIO, err)
	}
	setupTCP(nc)
	c := &tcpConn{
		addr:    addr,
		nc:      nc,
		log:     t.log,
		pending: make(map[uint64]*call),
	}
	c.rr.br = bufio.NewReaderSize(nc, bufSize)
	if sc, ok := nc.(syscall.Conn); ok {
		c.raw, _ = sc.SyscallConn()
	}
	c.w = newFrameWriter(nc, c.fail)
	return c, nil
}

// tcpConn is the client end of a connection. It has no reader goroutine:
// the callers waiting for responses take turns reading it (leader/follower).
// A caller that finds nobody reading takes the reader role and reads
// frames, completing the calls they answer (a wake-up for each of those
// callers), until its own response is in; then it hands the role to
// another waiting caller, if any, and returns. So a caller alone on a
// connection is woken by the netpoller itself, without a hand-off from a
// reader goroutine.
type tcpConn struct {
	addr string
	nc   net.Conn
	raw  syscall.RawConn // to peek at an idle connection; nil if unavailable
	w    *frameWriter
	log  *slog.Logger

	// rr is used only by the caller holding the reader role.
	rr respReader

	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]*call // calls waiting for a response; nil once failed
	err     error            // why the connection is unusable; set once
	reading bool             // the reader role is held, or handed to reader
	reader  *call            // the call holding the role (nil: a caller that gave up on it)
	waiters []*call          // callers that wait for their response without reading
	// claimed is the call whose response body the reader is reading into
	// its caller's buffer (WithResponseBuffer); it is out of pending. If
	// the reader leaves the role mid-body, the next reader resumes reading
	// into the buffer, so the call is only completed (or failed) by a
	// reader, or by fail while nobody reads.
	claimed *call
}

// respReader is the state of the response frame being read. It lives in
// the connection, not in a reader's stack, because a reader whose ctx ends
// leaves the role in the middle of a frame and the next one resumes it.
type respReader struct {
	br   *bufio.Reader
	hb   [HeaderSize]byte
	hn   int    // header bytes read
	h    header // the header, once hn == HeaderSize
	to   *call  // the call the body is for; nil: skip it
	body []byte // where the body goes
	bn   int    // body bytes read or skipped
}

// call is one request in flight. resp and err are written once, by
// whoever removed the call from pending (or cleared claimed), before done
// is closed.
type call struct {
	out  outFrame
	op   uint16
	dst  []byte // where to read an ok response body that fits (WithResponseBuffer)
	resp []byte
	err  error
	done chan struct{}
	// lead (capacity 1, made when the call first waits) is signalled when
	// the reader role is handed to the call; widx is its index in waiters,
	// -1 when not waiting. Both guarded by tcpConn.mu.
	lead chan struct{}
	widx int
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
	cl := &call{op: op, done: make(chan struct{}), widx: -1}
	cl.out.parts = parts
	cl.dst, _ = ctx.Value(respBufKey{}).([]byte)

	c.mu.Lock()
	if c.err == nil && !c.reading && len(c.pending) == 0 {
		// Nobody has read the connection since the last call: make sure
		// the server did not close it meanwhile, so that the call fails
		// unsent (and the Pool redials) rather than after sending.
		c.mu.Unlock()
		if err := c.peek(); err != nil {
			c.fail(err)
		}
		c.mu.Lock()
	}
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, brokenError(c.addr, op, err, true)
	}
	c.nextID++
	id := c.nextID
	c.pending[id] = cl
	c.mu.Unlock()

	encodeHeader(cl.out.hdr[:], header{kind: kindRequest, op: op, id: id, length: uint32(n)})
	// On an idle connection send writes the request from this goroutine
	// and may block there (backpressure, a frozen server), and the caller
	// holding the reader role blocks in a read: when ctx ends, the
	// watchdog abandons the call, closing the connection if its write is
	// still stuck writeAbortGrace later, and wakes the caller from its
	// read with a past read deadline (await then hands the role on).
	var stop func() bool
	if ctx.Done() != nil {
		stop = context.AfterFunc(ctx, func() {
			c.mu.Lock()
			if c.reader == cl {
				_ = c.nc.SetReadDeadline(aLongTimeAgo)
			}
			c.mu.Unlock()
			if c.abandon(id, cl) {
				c.release(&cl.out)
			}
		})
	}
	// If the writer has stopped, the connection is failing and fail
	// completes cl (it was registered before c.err was set).
	c.w.send(&cl.out)
	resp, err := c.await(ctx, id, cl)
	if stop != nil {
		stop()
	}
	return resp, err
}

// aLongTimeAgo is a read deadline that makes a blocked read return at once.
var aLongTimeAgo = time.Unix(1, 0)

// await returns cl's outcome once it is completed, or a ctx error once ctx
// has ended and cl is abandoned. Whenever nobody reads the connection, the
// caller reads it itself (lead); otherwise it waits to be completed or
// handed the reader role.
func (c *tcpConn) await(ctx context.Context, id uint64, cl *call) ([]byte, error) {
	ctxDone := ctx.Done()
	gaveUp := false // ctx has ended
	c.mu.Lock()
	for {
		if cl.widx >= 0 {
			c.removeWaiter(cl)
		}
		if cl.abandoned {
			if c.reader == cl {
				c.handOff()
			}
			c.mu.Unlock()
			c.release(&cl.out)
			return nil, ctxError(ctx, c.addr, cl.op)
		}
		if c.pending[id] != cl && c.claimed != cl {
			// Completed, or being completed right now.
			if c.reader == cl {
				c.handOff()
			}
			c.mu.Unlock()
			<-cl.done
			return c.finish(cl)
		}
		if gaveUp && c.pending[id] == cl {
			// ctx ended: give up on cl while it is not claimed.
			delete(c.pending, id)
			cl.abandoned = true
			continue
		}
		if c.reader == cl || !c.reading {
			c.reading, c.reader = true, cl
			c.mu.Unlock()
			gaveUp = c.lead(ctx, id, cl) || gaveUp
			c.mu.Lock()
			continue
		}
		if cl.lead == nil {
			cl.lead = make(chan struct{}, 1)
		}
		cl.widx = len(c.waiters)
		c.waiters = append(c.waiters, cl)
		c.mu.Unlock()
		select {
		case <-cl.done:
		case <-cl.lead:
		case <-ctxDone:
			// A claimed call is not abandoned: its body is being read
			// into the caller's buffer. Wait for that (or for the role,
			// to skip the rest of the body).
			ctxDone, gaveUp = nil, true
		}
		c.mu.Lock()
	}
}

// lead reads frames as the connection's reader until cl is completed, or
// until ctx has ended (a read interrupted by the watchdog's deadline), and
// then hands the reader role on; it reports whether ctx ended. A frame
// interrupted halfway is left in rr for the next reader; if it is cl's own
// body, read into the caller's buffer, the rest of it is skipped, so the
// buffer is not written once Call returns.
func (c *tcpConn) lead(ctx context.Context, id uint64, cl *call) (ctxEnded bool) {
	rr := &c.rr
	if ctx.Err() != nil {
		// The watchdog has run already: interrupt the reads here.
		_ = c.nc.SetReadDeadline(aLongTimeAgo)
	}
	for {
		x, err := c.readFrame()
		if err == nil {
			if x == cl {
				break
			}
			if x == nil && ctx.Err() != nil { // cl may be abandoned
				ctxEnded = true
				break
			}
			continue
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			_ = c.nc.SetReadDeadline(time.Time{})
			if ctx.Err() == nil {
				continue // the deadline was meant for an earlier reader
			}
			ctxEnded = true
			c.mu.Lock()
			if c.claimed == cl {
				c.claimed = nil
				rr.to, rr.body = nil, nil
				cl.abandoned = true
			} else if c.pending[id] == cl {
				delete(c.pending, id)
				cl.abandoned = true
			}
			c.mu.Unlock()
			break
		}
		// The connection failed; handOff completes the claimed call.
		c.fail(err)
		break
	}
	c.mu.Lock()
	if c.reader == cl {
		c.handOff()
	}
	c.mu.Unlock()
	return ctxEnded
}

// readFrame reads the rest of the response frame in progress, or a new
// one, and delivers it. It returns the call it completed, nil if the frame
// was for an abandoned call. A read error leaves the frame in progress (a
// deadline only interrupts a reader); any other error means the connection
// is unusable.
func (c *tcpConn) readFrame() (*call, error) {
	rr := &c.rr
	if rr.hn < HeaderSize {
		n, err := io.ReadFull(rr.br, rr.hb[rr.hn:])
		rr.hn += n
		if err != nil {
			if rr.hn == 0 && errors.Is(err, io.EOF) {
				err = errServerClosed
			}
			return nil, err
		}
		if err := c.startFrame(); err != nil {
			c.log.Warn("transport: bad frame from server", "addr", c.addr, "err", err)
			return nil, err
		}
	}
	if rr.to == nil {
		n, err := rr.br.Discard(int(rr.h.length) - rr.bn)
		rr.bn += n
		if err != nil {
			return nil, fmt.Errorf("transport: reading response body: %w", err)
		}
		rr.hn, rr.bn = 0, 0
		return nil, nil
	}
	n, err := io.ReadFull(rr.br, rr.body[rr.bn:])
	rr.bn += n
	if err != nil {
		return nil, fmt.Errorf("transport: reading response body: %w", err)
	}
	return c.deliver(), nil
}

var errServerClosed = errors.New("transport: connection closed by server")

// startFrame checks the header just read and decides where its body goes:
// into the buffer of the call's caller (the call is claimed: taken out of
// pending first, so that an abandoned Call waits for the read to end), into
// fresh memory, or nowhere if the call was abandoned.
func (c *tcpConn) startFrame() error {
	rr := &c.rr
	h, err := decodeHeader(rr.hb[:])
	if err == nil && h.kind != kindResponse {
		err = fmt.Errorf("%w: %d, want a response", errBadKind, h.kind)
	}
	if err != nil {
		return err
	}
	c.mu.Lock()
	x := c.pending[h.id]
	if x != nil && x.op != h.op {
		c.mu.Unlock()
		return fmt.Errorf("transport: response for request %d has op %d, want %d", h.id, h.op, x.op)
	}
	claim := x != nil && h.status == 0 && x.dst != nil && int(h.length) <= len(x.dst)
	if claim {
		delete(c.pending, h.id)
		c.claimed = x
	}
	c.mu.Unlock()
	rr.h, rr.to, rr.bn = h, x, 0
	switch {
	case claim:
		rr.body = x.dst[:h.length]
	case x != nil:
		rr.body = make([]byte, h.length)
	default:
		rr.body = nil
	}
	return nil
}

// deliver completes the call whose body rr has read, unless it was
// abandoned meanwhile, and returns it (nil if abandoned).
func (c *tcpConn) deliver() *call {
	rr := &c.rr
	x, h, body := rr.to, rr.h, rr.body
	rr.hn, rr.bn, rr.to, rr.body = 0, 0, nil, nil
	c.mu.Lock()
	switch {
	case c.claimed == x:
		c.claimed = nil
	case c.pending[h.id] == x:
		delete(c.pending, h.id)
	default:
		x = nil // abandoned meanwhile
	}
	c.mu.Unlock()
	if x == nil {
		return nil
	}
	if h.status != 0 {
		if len(body) > maxErrMsg {
			body = body[:maxErrMsg]
		}
		x.err = &RemoteError{Addr: c.addr, Op: h.op, Errno: syscall.Errno(h.status), Msg: string(body)}
	} else {
		x.resp = body
	}
	close(x.done)
	return x
}

// handOff passes the reader role, which the caller holds (or gives up),
// to a waiting call, or leaves it free when none waits. On a failed
// connection nobody reads: the role is left free and the claimed call, if
// any, fails. Called with mu held.
func (c *tcpConn) handOff() {
	if c.err != nil {
		c.failClaimed()
		c.reading, c.reader = false, nil
		return
	}
	if n := len(c.waiters); n > 0 {
		w := c.waiters[n-1]
		c.removeWaiter(w)
		c.reader = w
		select {
		case w.lead <- struct{}{}:
		default: // a stale signal is pending: it wakes w as well
		}
		return
	}
	c.reading, c.reader = false, nil
}

// failClaimed completes the claimed call with the connection's error.
// Called with mu held, by a reader leaving the role or by fail while
// nobody reads.
func (c *tcpConn) failClaimed() {
	if x := c.claimed; x != nil {
		c.claimed = nil
		x.err = brokenError(c.addr, x.op, c.err, false)
		close(x.done)
	}
}

func (c *tcpConn) removeWaiter(cl *call) {
	i, n := cl.widx, len(c.waiters)-1
	c.waiters[i] = c.waiters[n]
	c.waiters[i].widx = i
	c.waiters[n] = nil
	c.waiters = c.waiters[:n]
	cl.widx = -1
}

// peek reports an error if the connection is closed or broken, looking at
// the socket without taking bytes from it or waiting. It uses Control, not
// Read: a caller may have become the reader meanwhile and hold the read
// lock while it waits for data, and a stale past read deadline (left by a
// reader's watchdog) must not count as an error.
func (c *tcpConn) peek() error {
	if c.raw == nil {
		return nil
	}
	var buf [1]byte
	var n int
	var serr error
	if err := c.raw.Control(func(fd uintptr) {
		n, _, serr = syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	}); err != nil {
		return err
	}
	switch {
	case serr == syscall.EAGAIN || serr == syscall.EINTR:
		return nil
	case serr != nil:
		return serr
	case n == 0:
		return errServerClosed
	}
	return nil
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
	if !c.reading {
		c.failClaimed()
	}
	c.mu.Unlock()

	c.w.stop(cause)
	_ = c.nc.Close()
	for _, cl := range pending {
		cl.err = brokenError(c.addr, cl.op, cause, !c.w.wasSent(&cl.out))
		close(cl.done)
	}
}

func (c *tcpConn) isBroken() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err != nil
}

// Close fails the calls in flight with EIO and waits for the connection's
// writer goroutine to exit. A caller reading the connection returns at once
// with its error.
func (c *tcpConn) Close() error {
	c.fail(errClosed)
	<-c.w.exited
	return nil
}
