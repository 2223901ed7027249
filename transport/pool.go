package transport

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// PoolOptions configures a Pool. Zero fields take their defaults.
type PoolOptions struct {
	// DialTimeout bounds one connection attempt. Default 5s.
	DialTimeout time.Duration
	// IdleTimeout: a pooled connection with no call for this long is
	// closed and redialled when next needed, so the server's own
	// IdleTimeout (TCPOptions, default 10 min) never closes one under a
	// call. Default 5 min (half the server's default); negative = never.
	IdleTimeout time.Duration
	// ConnsPerAddr is how many connections the pool keeps to each address
	// and spreads calls over. Default 2.
	ConnsPerAddr int
}

const (
	defaultDialTimeout  = 5 * time.Second
	defaultConnsPerAddr = 2
	// probeRetry is how long a probe waits before dialing again after its
	// connection failed or could not be made.
	probeRetry = 200 * time.Millisecond
)

// OpProbe is the operation a Pool sends to a suspect address to learn
// whether it answers again. The TCP transport's server answers it itself
// with an empty ok response; handlers never see it. (A Pool still takes any
// answer, even an error, as a sign of life.)
const OpProbe uint16 = 0

var errPoolClosed = fmt.Errorf("transport: pool closed: %w", syscall.EIO)

// Pool keeps connections to many addresses and is what services use to call
// each other. It dials lazily, spreads calls round-robin over ConnsPerAddr
// connections per address, and drops a connection once it breaks, so the
// next call redials: a client recovers by itself when a server comes back.
// It is safe for concurrent use.
//
// An address whose server took longer than a caller's deadline to answer a
// call is suspect: the server may be frozen (SIGSTOP, swapping, a hung
// disk), which no connection error reveals. Calls to a suspect address fail
// at once with ETIMEDOUT instead of each waiting out its own deadline, so
// that a caller that retries (the kernel re-reads a page after a failed
// read-ahead) still fails within one timeout. Meanwhile one background
// probe per suspect address sends OpProbe on a connection of its own and
// waits for any answer, redialing every probeRetry while the connection
// fails; the first answer clears the suspicion, so calls work again as soon
// as the server does.
//
// A call that failed before its request was written (the connection was
// found broken) is retried once on a fresh connection; a call that may have
// reached the server is never retried, since operations need not be
// idempotent.
type Pool struct {
	t           Transport
	dialTimeout time.Duration
	idle        time.Duration
	n           int
	ctx         context.Context // parent of dials and probes; cancelled by Close
	cancel      context.CancelFunc
	dials       sync.WaitGroup // dials and probes in progress

	mu     sync.Mutex
	addrs  map[string]*addrConns
	closed bool
}

type addrConns struct {
	next  atomic.Uint64
	slots []slot

	mu      sync.Mutex
	suspect time.Time // when a call first went unanswered; zero if not suspect
	// refused is the error of the last dial the server refused
	// (authentication, protocol version), returned at once by calls until
	// refusedUntil: redialling in a tight loop would only repeat it.
	refused      error
	refusedUntil time.Time
}

// refuseFor is how long calls to an address whose server refused our
// handshake fail at once with that refusal before the pool dials again.
const refuseFor = time.Second

func (a *addrConns) refuse(err error) {
	a.mu.Lock()
	a.refused, a.refusedUntil = err, time.Now().Add(refuseFor)
	a.mu.Unlock()
}

func (a *addrConns) refusal() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.refused != nil && time.Now().Before(a.refusedUntil) {
		return a.refused
	}
	a.refused = nil
	return nil
}

// slot holds one connection to an address, or the dial that will make it.
type slot struct {
	mu   sync.Mutex
	conn Conn
	dial *dialing // non-nil while a dial is in progress
}

// dialing is one dial attempt shared by every call that waits for the slot.
type dialing struct {
	done chan struct{}
	conn Conn
	err  error
}

// NewPool returns a pool that makes connections with t.
func NewPool(t Transport, opts PoolOptions) *Pool {
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = defaultDialTimeout
	}
	if opts.ConnsPerAddr <= 0 {
		opts.ConnsPerAddr = defaultConnsPerAddr
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Pool{
		t:           t,
		dialTimeout: opts.DialTimeout,
		idle:        orDefault(opts.IdleTimeout, DefaultIdleTimeout/2),
		n:           opts.ConnsPerAddr,
		ctx:         ctx,
		cancel:      cancel,
		addrs:       make(map[string]*addrConns),
	}
}

// Call sends a request to addr and returns the response; see Conn.Call for
// the errors. A failure to connect matches syscall.EIO and names addr, or
// syscall.ETIMEDOUT (EINTR) if ctx expired (was cancelled) first.
// While addr is suspect (see Pool), Call fails at once with ETIMEDOUT.
func (p *Pool) Call(ctx context.Context, addr string, op uint16, parts ...[]byte) ([]byte, error) {
	a, s, err := p.slot(addr)
	if err != nil {
		return nil, err
	}
	if since := a.suspectSince(); !since.IsZero() {
		return nil, fmt.Errorf("transport: %s op %d: server has not answered since %s: %w",
			addr, op, since.Format("15:04:05.000"), syscall.ETIMEDOUT)
	}
	if err := a.refusal(); err != nil {
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		c, err := p.get(ctx, addr, s)
		if err != nil {
			// A dial that got no answer in time (a partitioned host
			// drops the SYN) is as telling as an unanswered call:
			// without this, every retry, such as the kernel's re-read
			// after a failed read-ahead, would wait out its own timeout.
			if (unanswered(err) || errors.Is(err, errDialTimeout)) && !stoppedMeanwhile(ctx) {
				p.suspect(addr, a)
			}
			if errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPROTO) {
				a.refuse(err)
			}
			return nil, err
		}
		resp, err := c.Call(ctx, op, parts...)
		if err != nil && connFailed(err) {
			s.drop(c)
			if attempt == 0 && errors.Is(err, errNotSent) {
				continue
			}
		}
		if err != nil && unanswered(err) && !stoppedMeanwhile(ctx) {
			p.suspect(addr, a)
		}
		return resp, err
	}
}

// errDialTimeout marks a dial that the pool's own DialTimeout cut short.
var errDialTimeout = errors.New("dial timed out")

// unanswered reports whether err says the server did not answer a call
// before the caller's deadline (not a handler's ETIMEDOUT, not a cancel).
func unanswered(err error) bool {
	var re *RemoteError
	return !errors.As(err, &re) && errors.Is(err, syscall.ETIMEDOUT) && errors.Is(err, context.DeadlineExceeded)
}

// lateDeadline is how long after a call's deadline its expiry may be
// noticed before the lateness says that this process was not running.
const lateDeadline = time.Second

// stoppedMeanwhile reports whether ctx's deadline passed well before this
// process noticed: the process itself was stopped (SIGSTOP, a paused VM,
// a host starved of CPU) while the call was out, so the server's silence
// is no evidence against it. Marking it suspect would fail every call
// after the process resumes until a probe gets through.
func stoppedMeanwhile(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ok && time.Since(dl) > lateDeadline
}

func (a *addrConns) suspectSince() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.suspect
}

// startBackground counts a dial or probe goroutine about to start, so that
// Close waits for it, unless the pool is closed (then it reports false and
// the goroutine must not start).
func (p *Pool) startBackground() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.dials.Add(1)
	return true
}

// suspect marks addr suspect and starts its probe, unless it is already.
func (p *Pool) suspect(addr string, a *addrConns) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.suspect.IsZero() {
		return
	}
	if !p.startBackground() {
		return
	}
	a.suspect = time.Now()
	go p.probe(addr, a)
}

// probe waits until addr answers OpProbe, then clears its suspicion. It
// gives up only when the pool closes.
func (p *Pool) probe(addr string, a *addrConns) {
	defer p.dials.Done()
	for {
		if p.probeOnce(addr) {
			a.mu.Lock()
			a.suspect = time.Time{}
			a.mu.Unlock()
			return
		}
		select {
		case <-p.ctx.Done():
			return
		case <-time.After(probeRetry):
		}
	}
}

// probeOnce dials addr and waits for an answer to OpProbe on that
// connection, and reports whether one came. It waits as long as the
// connection holds: a frozen server's kernel keeps it open.
func (p *Pool) probeOnce(addr string) bool {
	ctx, cancel := context.WithTimeout(p.ctx, p.dialTimeout)
	c, err := p.t.Dial(ctx, addr)
	cancel()
	if err != nil {
		return false
	}
	defer c.Close()
	_, err = c.Call(p.ctx, OpProbe)
	var re *RemoteError
	return err == nil || errors.As(err, &re)
}

// connFailed reports whether err says the connection (not the handler)
// failed.
func connFailed(err error) bool {
	var re *RemoteError
	return !errors.As(err, &re) && errors.Is(err, syscall.EIO)
}

// slot picks the next slot for addr, round-robin.
func (p *Pool) slot(addr string) (*addrConns, *slot, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, nil, errPoolClosed
	}
	a := p.addrs[addr]
	if a == nil {
		a = &addrConns{slots: make([]slot, p.n)}
		p.addrs[addr] = a
	}
	p.mu.Unlock()
	return a, &a.slots[a.next.Add(1)%uint64(len(a.slots))], nil
}

// get returns the slot's connection, dialing if it has none or a broken one.
func (p *Pool) get(ctx context.Context, addr string, s *slot) (Conn, error) {
	s.mu.Lock()
	if c := s.conn; c != nil && p.idle > 0 {
		// Retire a connection idle for half the server's IdleTimeout
		// before the server closes it under a call.
		if r, ok := c.(interface{ retireIfIdle(time.Duration) bool }); ok {
			r.retireIfIdle(p.idle)
		}
	}
	if c := s.conn; c != nil {
		if b, ok := c.(interface{ isBroken() bool }); !ok || !b.isBroken() {
			s.mu.Unlock()
			return c, nil
		}
		s.conn = nil
		s.mu.Unlock()
		_ = c.Close()
		s.mu.Lock()
	}
	d := s.dial
	if d == nil && s.conn != nil { // another call redialled meanwhile
		c := s.conn
		s.mu.Unlock()
		return c, nil
	}
	if d == nil {
		if !p.startBackground() {
			s.mu.Unlock()
			return nil, errPoolClosed
		}
		d = &dialing{done: make(chan struct{})}
		s.dial = d
		go p.dial(addr, s, d)
	}
	s.mu.Unlock()

	select {
	case <-d.done:
		return d.conn, d.err
	case <-ctx.Done():
		return nil, fmt.Errorf("transport: dial %s: %w (%w)", addr, ctxErrno(ctx), ctx.Err())
	}
}

// dial makes the slot's connection. It runs apart from any caller so that
// one caller giving up does not fail the others waiting for the same dial.
func (p *Pool) dial(addr string, s *slot, d *dialing) {
	defer p.dials.Done()
	ctx, cancel := context.WithTimeout(p.ctx, p.dialTimeout)
	c, err := p.t.Dial(ctx, addr)
	timedOut := errors.Is(ctx.Err(), context.DeadlineExceeded) // before cancel, which sets ctx.Err too
	cancel()
	switch {
	case err == nil:
	case p.ctx.Err() != nil:
		err = errPoolClosed
	case timedOut:
		err = fmt.Errorf("transport: dial %s: no connection after %v: %w (%w)", addr, p.dialTimeout, syscall.EIO, errDialTimeout)
	case errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPROTO):
		// Authentication or version: not a sign of a frozen server,
		// and no use redialling at once (see Call).
	case !errors.Is(err, syscall.EIO):
		err = fmt.Errorf("transport: dial %s: %w: %v", addr, syscall.EIO, err)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	s.dial = nil
	if err == nil {
		p.mu.Lock()
		closed := p.closed
		p.mu.Unlock()
		if closed {
			_ = c.Close()
			c, err = nil, errPoolClosed
		} else {
			s.conn = c
		}
	}
	d.conn, d.err = c, err
	close(d.done)
}

// drop forgets c if it is still the slot's connection, and closes it.
func (s *slot) drop(c Conn) {
	s.mu.Lock()
	mine := s.conn == c
	if mine {
		s.conn = nil
	}
	s.mu.Unlock()
	if mine {
		_ = c.Close()
	}
}

// Close closes every connection and waits for dials and probes in progress. Calls in
// flight fail with EIO; later calls fail with EIO too.
func (p *Pool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	addrs := p.addrs
	p.addrs = nil
	p.mu.Unlock()

	p.cancel()
	for _, a := range addrs {
		for i := range a.slots {
			s := &a.slots[i]
			s.mu.Lock()
			c := s.conn
			s.conn = nil
			s.mu.Unlock()
			if c != nil {
				_ = c.Close()
			}
		}
	}
	p.dials.Wait()
	return nil
}
