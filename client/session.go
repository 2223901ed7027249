package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/weft-fs/weft/meta/metarpc"
	"github.com/weft-fs/weft/proto"
)

// sessionService is a metadata service with sessions whose id the client
// chooses (metarpc.Client).
type sessionService interface {
	metarpc.SessionService
	Session() proto.SessionID
	SetSession(id proto.SessionID)
}

// minRenewRetry bounds how often a failed renewal is retried.
const minRenewRetry = 200 * time.Millisecond

// closeTimeout bounds how long Close waits to end the session.
const closeTimeout = 5 * time.Second

// session keeps this client's session with the metadata server alive: it
// registers it, renews it every third of its lease, and when the server
// answers ESTALE (it forgot the session) re-registers it with the handles
// open here. If the server refuses them (the lease expired: this process
// was stopped or cut off for longer than the lease, and the server dropped
// the handles), it starts a new session: every handle of the old one is
// stale from then on and fails with ESTALE, never touching a file the
// server may have reclaimed.
type session struct {
	c   *Client
	svc sessionService
	// gen counts the sessions this client had; a File remembers the gen
	// it was opened in and is stale once gen moved on.
	gen atomic.Uint64

	mu         sync.Mutex // serializes registration; guards the rest
	registered bool
	lease      time.Duration
	handles    map[proto.Ino]*proto.OpenHandle // what this session holds open
	local      map[proto.Ino]*localOpens       // handles opened from the lease cache, not pinned (cached.go)

	// base and renewed: when the server last confirmed the session, as
	// monotonic ns since base; leaseNs is the lease. Atomics, so that the
	// check on every read and write (validate) takes no lock.
	base    time.Time
	renewed atomic.Int64
	leaseNs atomic.Int64

	renewMu sync.Mutex // one synchronous renewal at a time (validate)

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

func newSession(c *Client, svc sessionService) *session {
	s := &session{c: c, svc: svc, handles: map[proto.Ino]*proto.OpenHandle{}, local: map[proto.Ino]*localOpens{},
		stop: make(chan struct{}), done: make(chan struct{}), base: time.Now()}
	if svc.Session() == (proto.SessionID{}) {
		svc.SetSession(proto.NewSessionID())
	}
	go s.run()
	return s
}

func (s *session) staleErr(ino proto.Ino) error {
	return fmt.Errorf("client: ino %d: the handle belongs to a metadata session that expired (open the file again): %w", ino, syscall.ESTALE)
}

// run registers and renews the session until close.
func (s *session) run() {
	defer close(s.done)
	wait := time.Duration(0)
	for {
		select {
		case <-s.stop:
			return
		case <-time.After(wait):
		}
		wait = s.tick()
	}
}

// tick registers or renews the session once and returns when to do it next.
func (s *session) tick() time.Duration {
	s.mu.Lock()
	registered, lease := s.registered, s.lease
	s.mu.Unlock()
	// A renewal that takes longer than a third of the lease is late
	// anyway: give up and try again rather than wait out the RPC timeout.
	timeout := s.c.cfg.Timeout
	if lease > 0 {
		timeout = min(timeout, max(lease/3, time.Second))
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var err error
	if !registered {
		err = s.ensure(ctx)
	} else {
		var l time.Duration
		gen := s.gen.Load()
		l, err = s.svc.RenewSession(ctx)
		if errors.Is(err, syscall.ESTALE) {
			err = s.recover(ctx, gen)
		} else if err == nil && l > 0 {
			s.mu.Lock()
			s.confirmedLocked(l)
			s.mu.Unlock()
		}
	}
	if err == nil {
		s.c.applyParams(ctx) // run-time parameters ride on the renewals
	}
	s.mu.Lock()
	lease = s.lease
	s.mu.Unlock()
	if err != nil {
		s.c.log.Warn("metadata session renewal failed; retrying", "err", err)
		if lease <= 0 {
			return time.Second
		}
		return max(lease/10, minRenewRetry)
	}
	return max(lease/3, time.Millisecond)
}

// ensure registers the session if it is not yet.
func (s *session) ensure(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.registered {
		return nil
	}
	return s.registerLocked(ctx)
}

func (s *session) registerLocked(ctx context.Context) error {
	lease, err := s.svc.OpenSession(ctx, nil)
	if err != nil {
		return err
	}
	s.registered = true
	s.confirmedLocked(lease)
	return nil
}

// recover handles the server's ESTALE for the session of generation gen:
// it re-registers the session with the handles held here (accepted in the
// grace period after a server restart), or else starts a new session,
// which makes every handle of the old one stale. Nothing is done if
// another caller already recovered gen.
func (s *session) recover(ctx context.Context, gen uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gen.Load() != gen {
		return nil
	}
	if !s.registered {
		return s.registerLocked(ctx)
	}
	held := make([]proto.OpenHandle, 0, len(s.handles))
	for _, h := range s.handles {
		held = append(held, *h)
	}
	lease, err := s.svc.OpenSession(ctx, held)
	if err == nil {
		s.confirmedLocked(lease)
		// Handles opened from the lease cache are pinned with the
		// server that forgot the session (a new leader knows none of
		// this client's leases), each on its own: OpenSession takes its
		// list whole or not at all, and one of them may be of a file
		// removed while this client could not be asked (cached.go).
		if s.c.pinner != nil && len(s.local) > 0 {
			if perr := s.pinLocked(ctx, s.c.pinner, nil); perr != nil {
				s.c.log.Warn("registering opens made from the metadata cache with the re-registered session failed", "err", perr)
			}
		}
		if len(held) > 0 {
			s.c.log.Warn("metadata server had forgotten this mount's session (restarted?); re-registered its open files",
				"files", len(held))
			s.c.reclaimLocks(ctx) // locks are taken through open files
			s.c.reclaimAppends(ctx)
		}
		return nil
	}
	if !errors.Is(err, syscall.ESTALE) {
		return err
	}
	// The server dropped the session's handles: they are gone for good.
	old := s.svc.Session()
	s.svc.SetSession(proto.NewSessionID())
	s.gen.Add(1)
	s.handles = map[proto.Ino]*proto.OpenHandle{}
	s.local = map[proto.Ino]*localOpens{}
	s.registered = false
	s.c.rel.dropQueued()
	s.c.locks.reset() // the server dropped the old session's locks
	s.c.log.Error("metadata session expired (this mount was stopped or cut off for longer than the lease): "+
		"its open files are stale and fail with ESTALE until opened again",
		"session", fmt.Sprintf("%x", old[:4]), "stale_files", len(held), "err", err)
	return s.registerLocked(ctx)
}

// validate makes sure, before a handle is used, that the server confirmed
// the session within the lease. After this process was stopped (SIGSTOP,
// a suspended VM) or cut off from the metadata server for that long, the
// server may have dropped the session and reclaimed its files: the session
// is renewed first (recovered if the server forgot it, which makes the
// handles of a dropped session stale before any byte goes through them),
// and if that fails too, the handle may not be used (EIO) until a renewal
// succeeds, as an NFSv4 client stops using state whose lease ran out.
func (s *session) validate(ctx context.Context) error {
	if s.fresh() {
		return nil
	}
	s.renewMu.Lock()
	defer s.renewMu.Unlock()
	if s.fresh() {
		return nil // renewed meanwhile
	}
	lease := time.Duration(s.leaseNs.Load())
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(s.c.cfg.Timeout, max(lease/3, time.Second)))
	defer cancel()
	gen := s.gen.Load()
	l, err := s.svc.RenewSession(ctx)
	if errors.Is(err, syscall.ESTALE) {
		err = s.recover(ctx, gen)
	} else if err == nil {
		s.mu.Lock()
		s.confirmedLocked(l)
		s.mu.Unlock()
	}
	if err != nil {
		return fmt.Errorf("client: the metadata session was not renewed for longer than its lease (%v), so open files cannot be used: %v: %w",
			lease, err, syscall.EIO)
	}
	return nil
}

// fresh reports whether the server confirmed the session within the lease
// (or it was never registered: nothing to check yet).
func (s *session) fresh() bool {
	lease := s.leaseNs.Load()
	return lease <= 0 || int64(time.Since(s.base))-s.renewed.Load() < lease
}

// confirmedLocked records that the server confirmed the session with lease.
func (s *session) confirmedLocked(lease time.Duration) {
	s.lease = lease
	s.renewed.Store(int64(time.Since(s.base)))
	s.leaseNs.Store(int64(lease))
}

// opened records a handle opened in generation gen (if that is still the
// session's).
func (s *session) opened(ino proto.Ino, gen uint64, write bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gen.Load() != gen {
		return
	}
	s.countLocked(ino, 1, write)
}

// countLocked counts n handles of ino the server counted (write: one of
// them is open for writing), for re-registration.
func (s *session) countLocked(ino proto.Ino, n uint32, write bool) {
	h := s.handles[ino]
	if h == nil {
		h = &proto.OpenHandle{Ino: ino}
		s.handles[ino] = h
	}
	h.Count += n
	h.Write = h.Write || write
}

// released forgets a handle of generation gen and reports whether the
// server should be told (false: the handle is stale, or local: opened from
// the lease cache, in group local, and not pinned, or its pin got no
// answer; cached.go).
func (s *session) released(ino proto.Ino, gen uint64, local *localOpens) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gen.Load() != gen {
		return false
	}
	if local != nil && !local.pinned {
		if !local.uncertain && local.n > 0 {
			if local.n--; local.n == 0 && s.local[ino] == local {
				delete(s.local, ino)
			}
		}
		return false
	}
	if h := s.handles[ino]; h != nil {
		if h.Count--; h.Count == 0 {
			delete(s.handles, ino)
		}
	}
	return true
}

// close stops the renewals and ends the session on the server, which
// drops whatever handles it still has.
func (s *session) close() error {
	stopped := false
	s.closeOnce.Do(func() { close(s.stop); stopped = true })
	if !stopped {
		return nil
	}
	<-s.done
	s.mu.Lock()
	registered := s.registered
	s.mu.Unlock()
	if !registered {
		return nil
	}
	// The lease ends the session anyway: an unmount does not wait long
	// for a server that does not answer.
	ctx, cancel := context.WithTimeout(context.Background(), min(s.c.cfg.Timeout, closeTimeout))
	defer cancel()
	return s.svc.CloseSession(ctx)
}

// sessGen returns the current session generation (0 without sessions).
func (c *Client) sessGen() uint64 {
	if c.sess == nil {
		return 0
	}
	return c.sess.gen.Load()
}

// withSession runs an RPC that opens a handle (Open, CreateOpen): the
// session is registered first, and if the server says it does not know
// it, the session is recovered and the RPC tried once more. It returns the
// generation the handle was opened in.
func (c *Client) withSession(ctx context.Context, rpc func() error) (uint64, error) {
	if c.sess == nil {
		return 0, rpc()
	}
	if err := c.sess.ensure(ctx); err != nil {
		return 0, err
	}
	gen := c.sess.gen.Load()
	err := rpc()
	if !errors.Is(err, syscall.ESTALE) {
		return gen, err
	}
	if rerr := c.sess.recover(ctx, gen); rerr != nil {
		return 0, errors.Join(err, rerr)
	}
	gen = c.sess.gen.Load()
	return gen, rpc()
}

// handleCall runs an RPC that acts through a handle of generation gen
// (WriteDone, a truncate through a handle): ESTALE at once if the handle
// is stale; if the server answers ESTALE, the session is recovered and,
// when the handle survived (re-registered after a server restart), the
// RPC is tried once more.
func (c *Client) handleCall(ctx context.Context, ino proto.Ino, gen uint64, rpc func() error) error {
	if c.sess == nil {
		return rpc()
	}
	if c.sess.gen.Load() != gen {
		return c.sess.staleErr(ino)
	}
	err := rpc()
	if !errors.Is(err, syscall.ESTALE) {
		return err
	}
	if rerr := c.sess.recover(ctx, gen); rerr != nil {
		return errors.Join(err, rerr)
	}
	if c.sess.gen.Load() != gen {
		return c.sess.staleErr(ino)
	}
	return rpc()
}
