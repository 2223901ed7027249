package meta

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/weft-fs/weft/meta/store"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/transport"
)

// DefaultSessionLease is how long a client session lives without a
// renewal when Options.SessionLease is 0. Clients renew every third of it.
const DefaultSessionLease = 30 * time.Second

// DefaultOrphanGrace is the grace period after a restart when
// Options.OrphanGrace is 0.
const DefaultOrphanGrace = 30 * time.Second

// maxReclaimCount bounds the handle count a client may claim on one inode
// when it re-registers a session (a sanity bound, not policy).
const maxReclaimCount = 1 << 20

// sessionState is what the server keeps of a live session besides its
// open handles (sessOpens).
type sessionState struct {
	expires time.Time // monotonic: the lease ends here unless renewed
	// recent holds the sequence numbers of the session's last Open and
	// Release requests, in slot seq mod MaxPendingRequests, so that a retry
	// of one (its reply lost with the connection) neither counts nor drops
	// a handle twice. Handle counts live in memory, and so does this.
	recent [proto.MaxPendingRequests]uint64
	// appends remembers the session's last Append replies the same way
	// (append.go).
	appends [proto.MaxPendingRequests]appendReply
	// pinSeq and pinDone are the session's last PinOpens request and its
	// answer, given again to a retry of it (pins.go); pinBusy is closed
	// once pinDone is set.
	pinSeq  uint64
	pinDone []bool
	pinBusy chan struct{}
	// For `weft status`: when and where the session was opened here, and
	// the version the client announced.
	opened  time.Time
	addr    string
	version string
}

// seenLocked reports whether request seq of sess, an Open or a Release,
// was seen before, and records it. Requests without a sequence number, and
// sessions that are not registered, are never deduplicated.
func (s *Server) seenLocked(sess session, seq uint64) bool {
	st := s.sessions[sess]
	if seq == 0 || st == nil {
		return false
	}
	slot := &st.recent[seq%proto.MaxPendingRequests]
	if *slot == seq {
		return true
	}
	*slot = seq
	return false
}

// errNoSessionID refuses opens from a remote client that named no session:
// its handles could never expire.
var errNoSessionID = fmt.Errorf("meta: opening a file needs a session (a non-zero session id, registered with OpenSession): %w", syscall.EINVAL)

func staleSession(sess session) error {
	return fmt.Errorf("meta: session %x of %q is unknown here (it expired, or the server restarted and the grace period is over): %w",
		sess.id[:4], sess.name, syscall.ESTALE)
}

// sessionLease returns the lease a session gets.
func (s *Server) sessionLease() time.Duration { return s.opts.SessionLease }

// inGrace reports whether the server is within the grace period after a
// restart, when clients re-register the sessions and handles it forgot.
func (s *Server) inGrace() bool {
	g := s.graceUntil.Load()
	return g != 0 && time.Now().UnixNano() < g
}

// checkSessionLocked decides whether a request may use (take, hold or
// drop) open handles of its session: an in-process caller always may
// (trusted; its sessions have leases only if it opened them); a remote
// caller must name a session (EINVAL) that the server knows (ESTALE: it
// expired, or it predates a restart and was not re-registered in the grace
// period).
func (s *Server) checkSessionLocked(sess session) error {
	if !sess.remote {
		return nil
	}
	if sess.id == (proto.SessionID{}) {
		return errNoSessionID
	}
	if _, ok := s.sessions[sess]; !ok {
		return staleSession(sess)
	}
	return nil
}

// handleSession is checkSessionLocked for requests that act through a
// handle if the session has one (WriteDone, SetAttr with SetHandle): a
// remote request without a session id is not an error there, it just
// holds no handle.
func (s *Server) handleSession(sess session) error {
	if sess.remote && sess.id == (proto.SessionID{}) {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.checkSessionLocked(sess)
}

// OpenSession registers the caller's session (its certificate name and the
// session id of the request header) with a lease of Options.SessionLease,
// which the client keeps alive with RenewSession; it returns the lease.
// Opening a known session renews it. A client re-registering a session the
// server forgot in a restart names the handles it holds (reclaim): they
// are counted again, which is accepted only within the grace period after
// the restart (Options.OrphanGrace) and only if every inode still exists;
// otherwise the answer is ESTALE and nothing is counted, and the client
// must treat those handles as lost and open a new session.
func (s *Server) OpenSession(ctx context.Context, reclaim []proto.OpenHandle) (time.Duration, error) {
	cl, err := s.caller(ctx)
	if err != nil {
		return 0, err
	}
	if cl.sess.id == (proto.SessionID{}) {
		return 0, errnof(syscall.EINVAL, "a session needs a non-zero id")
	}
	lease := s.sessionLease()
	s.mu.Lock()
	if st, ok := s.sessions[cl.sess]; ok {
		st.expires = s.leaseNow().Add(lease)
		s.mu.Unlock()
		return lease, nil
	}
	s.mu.Unlock()
	if len(reclaim) > 0 {
		if !s.inGrace() {
			return 0, fmt.Errorf("meta: session %x of %q: no handles can be reclaimed outside the grace period after a restart: %w",
				cl.sess.id[:4], cl.sess.name, syscall.ESTALE)
		}
		for _, h := range reclaim {
			if h.Count == 0 || h.Count > maxReclaimCount {
				return 0, errnof(syscall.EINVAL, "reclaim of %d handles on inode %d", h.Count, h.Ino)
			}
			// Nothing is reclaimed during the grace period, so an inode
			// a handle was open on before the restart still exists.
			if _, err := s.readInode(h.Ino); err != nil {
				return 0, fmt.Errorf("meta: session %x of %q: reclaimed handle on inode %d: %v: %w",
					cl.sess.id[:4], cl.sess.name, h.Ino, err, syscall.ESTALE)
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, errClosed
	}
	if st, ok := s.sessions[cl.sess]; ok { // a concurrent open of the same session
		st.expires = s.leaseNow().Add(lease)
		return lease, nil
	}
	st := &sessionState{expires: s.leaseNow().Add(lease), opened: time.Now(), version: proto.ClientVersionFrom(ctx)}
	if p, ok := transport.PeerFrom(ctx); ok {
		st.addr = p.Addr
	}
	s.sessions[cl.sess] = st
	for _, h := range reclaim {
		for range h.Count {
			s.countOpenLocked(cl.sess, h.Ino, h.Write)
		}
	}
	if len(reclaim) > 0 {
		s.log.Info("meta: session re-registered after restart", "name", cl.sess.name, "session", fmt.Sprintf("%x", cl.sess.id[:4]), "inodes", len(reclaim))
	}
	return lease, nil
}

// RenewSession extends the lease of the caller's session by
// Options.SessionLease and returns the lease; ESTALE if the server does
// not know the session (expired, or forgotten in a restart: the client
// re-registers it with OpenSession).
func (s *Server) RenewSession(ctx context.Context) (time.Duration, error) {
	cl, err := s.caller(ctx)
	if err != nil {
		return 0, err
	}
	lease := s.sessionLease()
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.sessions[cl.sess]
	if !ok {
		return 0, staleSession(cl.sess)
	}
	st.expires = s.leaseNow().Add(lease)
	return lease, nil
}

// CloseSession ends the caller's session (a clean unmount): its handles
// are dropped as if released and it is forgotten. Closing an unknown
// session is not an error.
func (s *Server) CloseSession(ctx context.Context) error {
	cl, err := s.caller(ctx)
	if err != nil {
		return err
	}
	// A mount that unmounts cleanly has stopped polling (client.Close):
	// no change needs to wait for it to drop its cache.
	s.leases.drop(cl.sess)
	s.mu.Lock()
	_, ok := s.sessions[cl.sess]
	s.mu.Unlock()
	if ok {
		s.dropSession(cl.sess, "closed")
	}
	return nil
}

// Sessions returns the number of live sessions (for tests and tools).
func (s *Server) Sessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sessions)
}

// dropSession forgets sess and drops all its open handles, as Release of
// each would: orphans left without opens are reclaimed.
func (s *Server) dropSession(sess session, why string) {
	s.leases.drop(sess)
	s.mu.Lock()
	d := s.takeSessionLocked(sess)
	s.mu.Unlock()
	s.finishDrop(sess, d, why)
}

// droppedSession is what takeSessionLocked removed.
type droppedSession struct {
	inodes, handles int
	locks           int         // locks it held, released
	last            []proto.Ino // inodes whose last open handle this was
	written         []proto.Ino // inodes it held open for writing
}

// takeSessionLocked forgets sess and its handles in the counts.
func (s *Server) takeSessionLocked(sess session) droppedSession {
	m := s.sessOpens[sess]
	delete(s.sessOpens, sess)
	delete(s.sessions, sess)
	d := droppedSession{inodes: len(m), locks: s.locks.dropSession(sess)}
	for ino, o := range m {
		d.handles += o.n
		if o.write {
			d.written = append(d.written, ino)
			s.dropWriterLocked(ino)
		}
		if c := s.opens[ino] - o.n; c > 0 {
			s.opens[ino] = c
		} else {
			delete(s.opens, ino)
			s.forgetAppendsLocked(ino)
			d.last = append(d.last, ino)
		}
	}
	return d
}

// finishDrop logs a dropped session and reclaims the orphans it held open.
func (s *Server) finishDrop(sess session, d droppedSession, why string) {
	level := s.log.Info
	if why == "expired" {
		level = s.log.Warn
	}
	level("meta: session "+why+"; its open handles are dropped", "name", sess.name,
		"session", fmt.Sprintf("%x", sess.id[:4]), "inodes", d.inodes, "handles", d.handles, "locks", d.locks)
	var orphans []proto.Ino
	for _, ino := range d.last {
		if n, err := s.readInode(ino); err == nil && n.Nlink == 0 {
			orphans = append(orphans, ino)
		} else if err != nil && !errors.Is(err, syscall.ENOENT) {
			s.log.Warn("meta: read inode of a dropped handle", "ino", ino, "err", err)
		}
	}
	s.enqueueReclaim(orphans...)
	// A writer that went away may have written objects after its file's
	// copy was taken and never recorded it (copies.go): the copy goes.
	s.dropWritersCopies(d.written)
	s.forgetReplies(sess)
}

// forgetReplies drops the remembered replies of a session that ended.
func (s *Server) forgetReplies(sess session) {
	if _, err := s.propose(s.ctx, &Command{Op: OpSessionDrop, Now: s.now(), Session: sess.id, SessionName: sess.name}); err != nil && !errors.Is(err, errClosed) {
		s.log.Warn("meta: forget the replies of an ended session", "name", sess.name, "err", err)
	}
}

// sweepReplies forgets the remembered replies of every session that is not
// live: after the grace period of a restart, those of the sessions that
// did not come back.
func (s *Server) sweepReplies() {
	type key struct {
		id   proto.SessionID
		name string
	}
	seen := map[key]bool{}
	err := s.st.Scan([]byte{store.PrefixReply}, []byte{store.PrefixReply + 1}, func(k, _ []byte) bool {
		prefix, _, ok := store.ParseReplyKey(k)
		if !ok {
			return true
		}
		var id proto.SessionID
		copy(id[:], prefix[1:17])
		seen[key{id, string(prefix[19:])}] = true
		return true
	})
	if err != nil {
		s.log.Warn("meta: scan remembered replies", "err", err)
		return
	}
	s.mu.Lock()
	for sess := range s.sessions {
		delete(seen, key{sess.id, sess.name})
	}
	s.mu.Unlock()
	for k := range seen {
		s.forgetReplies(session{id: k.id, name: k.name})
	}
}

// sessionLoop expires sessions whose lease ran out, a few times per lease.
// leaseNow is the clock session leases are measured with.
func (s *Server) leaseNow() time.Time {
	if s.opts.leaseClock != nil {
		return s.opts.leaseClock()
	}
	return time.Now()
}

func (s *Server) sessionLoop() {
	s.every(max(s.sessionLease()/4, time.Millisecond), s.expireSessions)
}

// expireSessions drops every session whose lease ran out.
func (s *Server) expireSessions() {
	if !s.isLeader() {
		// A follower's sessions (from an earlier term as leader) are
		// stale; becameLeader forgets them.
		return
	}
	now := s.leaseNow()
	type drop struct {
		sess session
		d    droppedSession
	}
	var expired []drop
	s.mu.Lock()
	for sess, st := range s.sessions {
		if now.After(st.expires) {
			expired = append(expired, drop{sess, s.takeSessionLocked(sess)})
		}
	}
	s.mu.Unlock()
	for _, e := range expired {
		s.finishDrop(e.sess, e.d, "expired")
	}
}
