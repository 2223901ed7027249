package meta

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"syscall"
	"time"

	"github.com/weft-fs/weft/meta/store"
	"github.com/weft-fs/weft/proto"
)

// Open implements proto.MetaService: it checks that the caller may access
// the inode as want asks (EACCES if not), returns a capability for it, and
// counts an open handle of the caller's session, so that an unlinked file
// is kept until its last Release, and returns fresh attributes.
func (s *Server) Open(ctx context.Context, ino proto.Ino, want proto.Access) (proto.Attr, []byte, error) {
	n, cap, err := s.open(ctx, ino, want)
	if err != nil {
		return proto.Attr{}, nil, err
	}
	return n.Attr, cap, nil
}

// open is Open returning the inode: for an open for writing, as it is
// after its copy was dropped (copies.go).
func (s *Server) open(ctx context.Context, ino proto.Ino, want proto.Access) (*inode, []byte, error) {
	cl, err := s.caller(ctx)
	if err != nil {
		return nil, nil, err
	}
	write := want.Has(proto.AccessWrite)
	s.mu.Lock()
	for {
		if err := s.checkSessionLocked(cl.sess); err != nil {
			s.mu.Unlock()
			return nil, nil, err
		}
		if s.reclaiming[ino] {
			s.mu.Unlock()
			return nil, nil, errnof(syscall.ENOENT, "inode %d is being removed", ino)
		}
		// A writer must not get the layout a restripe is replacing, nor
		// miss a copy of the file's bytes being taken (it drops it). Each
		// wait lets go of s.mu, so everything is looked at again after
		// one, until nothing is to be waited for.
		ch := s.migrating[ino]
		if ch == nil {
			ch = s.copying[ino]
		}
		if !write || ch == nil {
			break
		}
		s.mu.Unlock()
		<-ch
		s.mu.Lock()
	}
	unsure := write && s.takeUnsureLocked(ino)
	// A retry of an Open the server saw (its reply was lost) must not
	// count a second handle: the first attempt counted it, or released it
	// again when it failed.
	dup := s.seenLocked(cl.sess, cl.seq)
	if !dup {
		s.countOpenLocked(cl.sess, ino, want.Has(proto.AccessWrite))
	}
	s.mu.Unlock()
	n, err := s.readInode(ino)
	if err == nil {
		err = checkAccess(cl, &n.Attr, want)
	}
	if err == nil && write {
		var dropped bool
		if dropped, err = s.dropCopyFor(ctx, n, unsure); dropped && err == nil {
			n, err = s.readInode(ino)
		}
	}
	var cap []byte
	if err == nil {
		cap, err = s.issue(ctx, &n.Attr, want)
	}
	if err != nil {
		if !dup {
			// As Release: if the count just taken was the last on an
			// orphan (its other handles closed meanwhile), reclaim it.
			s.releaseOne(cl.sess, ino)
		}
		return nil, nil, err
	}
	return n, cap, nil
}

// Release implements proto.MetaService. Releasing a handle the caller's
// session does not hold (another session's) is not an error and changes
// nothing; a release in a session the server does not know (expired, or
// forgotten in a restart and not re-registered) fails with ESTALE.
func (s *Server) Release(ctx context.Context, ino proto.Ino) error {
	return s.ReleaseMany(ctx, []proto.Ino{ino})
}

// releaseSession checks that sess may drop handles: ESTALE for a remote
// session the server does not know; a remote request without a session id
// holds no handles and drops nothing (ok false).
func (s *Server) releaseSession(sess session) (ok bool, err error) {
	if sess.remote && sess.id == (proto.SessionID{}) {
		return false, nil
	}
	return true, s.handleSession(sess)
}

func (s *Server) releaseOne(sess session, ino proto.Ino) {
	if s.release(sess, ino) {
		n, err := s.readInode(ino)
		if err == nil && n.Nlink == 0 {
			s.enqueueReclaim(ino)
		}
	}
}

// ReleaseMany is Release for several handles (a client batches the
// releases of handles closed at about the same time into one call).
func (s *Server) ReleaseMany(ctx context.Context, inos []proto.Ino) error {
	cl, err := s.caller(ctx)
	if err != nil {
		return err
	}
	if ok, err := s.releaseSession(cl.sess); !ok || err != nil {
		return err
	}
	s.mu.Lock()
	dup := s.seenLocked(cl.sess, cl.seq)
	s.mu.Unlock()
	if dup {
		return nil // a retry: the first attempt dropped the handles
	}
	for _, ino := range inos {
		s.releaseOne(cl.sess, ino)
	}
	return nil
}

// sessionOpens is what one session holds open on one inode: its handle
// count, and whether any of them was opened for writing while the count
// stayed above 0 (a handle's mode is not known at Release, so the flag
// lasts until the session's last handle on the inode is released).
type sessionOpens struct {
	n     int
	write bool
}

// countOpenLocked counts one open handle of sess on ino, opened for
// writing if write.
func (s *Server) countOpenLocked(sess session, ino proto.Ino, write bool) {
	s.opens[ino]++
	m := s.sessOpens[sess]
	if m == nil {
		m = map[proto.Ino]sessionOpens{}
		s.sessOpens[sess] = m
	}
	o := m[ino]
	o.n++
	if write && !o.write {
		o.write = true
		s.writers[ino]++
	}
	m[ino] = o
}

// dropWriterLocked forgets that a session held ino open for writing (its
// entry in sessOpens, whose write flag was set, is gone).
func (s *Server) dropWriterLocked(ino proto.Ino) {
	if c := s.writers[ino]; c > 1 {
		s.writers[ino] = c - 1
	} else {
		delete(s.writers, ino)
	}
}

// holdsWriteOpen reports whether sess has a handle open on ino that was
// opened for writing: what lets ftruncate and writes through a handle go
// on after the file's mode stopped allowing them, as POSIX says.
func (s *Server) holdsWriteOpen(sess session, ino proto.Ino) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.sessOpens[sess][ino]
	return o.n > 0 && o.write
}

// anyWriteOpen reports whether any session holds ino open for writing.
func (s *Server) anyWriteOpen(ino proto.Ino) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.anyWriteOpenLocked(ino)
}

// anyWriteOpenLocked is anyWriteOpen with s.mu held.
func (s *Server) anyWriteOpenLocked(ino proto.Ino) bool { return s.writers[ino] > 0 }

// release drops one open count of sess on ino, if sess has one, and
// reports whether it was the last of all sessions.
func (s *Server) release(sess session, ino proto.Ino) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.sessOpens[sess]
	o := m[ino]
	if o.n == 0 {
		return false
	}
	if o.n == 1 {
		delete(m, ino)
		if o.write {
			s.dropWriterLocked(ino)
		}
		if len(m) == 0 {
			delete(s.sessOpens, sess)
		}
		// Locks are taken through handles: with the session's last
		// handle on the inode gone, none of its locks there can be
		// released by it any more (the client releases them itself at
		// close; this covers a client that did not).
		s.locks.dropSessionInode(sess, ino)
	} else {
		o.n--
		m[ino] = o
	}
	c := s.opens[ino]
	if c <= 1 {
		delete(s.opens, ino)
		s.forgetAppendsLocked(ino)
		return true
	}
	s.opens[ino] = c - 1
	return false
}

// OpenCount returns the number of open handles on ino (for tests).
func (s *Server) OpenCount(ino proto.Ino) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opens[ino]
}

// enqueueReclaim schedules orphans without open handles for reclaim. From
// here until the reclaim is applied, Open of them fails with ENOENT, so no
// handle can appear on an inode being deleted.
func (s *Server) enqueueReclaim(inos ...proto.Ino) {
	if len(inos) == 0 || s.inGrace() {
		// In the grace period clients may not have re-registered their
		// handles yet; the orphan loop reclaims what nobody holds at its
		// end.
		return
	}
	s.reclaimUnopened(inos)
}

// reclaimUnopened is enqueueReclaim without the grace period check.
func (s *Server) reclaimUnopened(inos []proto.Ino) {
	s.mu.Lock()
	added := false
	for _, ino := range inos {
		if s.opens[ino] > 0 || s.reclaiming[ino] {
			continue
		}
		s.reclaiming[ino] = true
		s.pending = append(s.pending, ino)
		added = true
	}
	s.mu.Unlock()
	if added {
		kick(s.kickReclaim)
	}
}

const maxReclaimBatch = 1024

// reclaimLoop turns pending orphans into Reclaim commands, many inodes per
// command, so that a burst of unlinks costs a few commands.
func (s *Server) reclaimLoop() {
	defer s.bg.Done()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.kickReclaim:
		}
		for {
			s.mu.Lock()
			n := min(len(s.pending), maxReclaimBatch)
			batch := append([]proto.Ino(nil), s.pending[:n]...)
			s.pending = s.pending[n:]
			s.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			_, err := s.propose(s.ctx, &Command{Op: OpReclaim, Now: s.now(), Inos: batch})
			s.mu.Lock()
			for _, ino := range batch {
				delete(s.reclaiming, ino)
			}
			s.mu.Unlock()
			if err != nil {
				// Left as orphans: the next startup reclaims them.
				s.log.Warn("meta: reclaim failed", "inodes", len(batch), "err", err)
				break
			}
		}
	}
}

// orphanLoop reclaims, after the grace period, the orphans that a previous
// run left behind (open counts are not persisted) or that were left during
// the grace period, and that no client holds open (re-registered).
func (s *Server) orphanLoop() {
	defer s.bg.Done()
	t := time.NewTimer(s.opts.OrphanGrace)
	defer t.Stop()
	select {
	case <-s.ctx.Done():
		return
	case <-t.C:
	}
	if s.replica != nil {
		return // a replicated member sweeps when it becomes leader (becameLeader)
	}
	s.orphanSweep()
}

// orphanSweep, at the end of a grace period, forgets the replies of the
// sessions that did not come back and reclaims the orphans that no client
// re-registered.
func (s *Server) orphanSweep() {
	s.sweepReplies()
	inos, err := s.Orphans()
	if err != nil {
		s.log.Error("meta: scan orphans", "err", err)
		return
	}
	if len(inos) > 0 {
		s.log.Info("meta: reclaiming orphans from before the restart and the grace period", "count", len(inos))
		s.reclaimUnopened(inos)
	}
}

// gcLoop removes queued objects from the storage targets and drops them
// from the queue once removed; objects on unreachable targets stay queued
// and are retried every GCInterval.
func (s *Server) gcLoop() {
	defer s.bg.Done()
	if s.opts.Storage == nil {
		return
	}
	t := time.NewTicker(s.opts.GCInterval)
	defer t.Stop()
	for {
		// Targets that failed a removal are skipped for the rest of this
		// round, so one down target does not hold up the others.
		down := map[proto.TargetID]bool{}
		// Only the leader removes objects: it is the one that can
		// record their removal (OpGCDone).
		for s.isLeader() && s.gcOnce(s.ctx, down) {
		}
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		case <-s.kickGC:
			// Let a burst of reclaims collect before removing.
			select {
			case <-s.ctx.Done():
				return
			case <-time.After(s.opts.GCDelay):
			}
		}
	}
}

const gcBatch = 512

// gcOnce removes up to gcBatch queued objects of targets not in down, adds
// the targets that fail to down, and reports whether it made progress on a
// full batch (so the caller goes on at once).
func (s *Server) gcOnce(ctx context.Context, down map[proto.TargetID]bool) bool {
	objs, err := s.scanGC(gcBatch, down)
	if err != nil || len(objs) == 0 {
		return false
	}
	// One RemoveMany per target: a burst of unlinks costs a few round
	// trips, not one per stripe object.
	byTarget := map[proto.TargetID][]proto.ObjectID{}
	for _, o := range objs {
		byTarget[o.Target] = append(byTarget[o.Target], o.Obj)
	}
	var (
		mu   sync.Mutex
		done []GCObject
		wg   sync.WaitGroup
		sem  = make(chan struct{}, 16)
	)
	for tg, list := range byTarget {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := s.opts.Storage.RemoveMany(cctx, tg, list)
			cancel()
			mu.Lock()
			defer mu.Unlock()
			if err == nil || errors.Is(err, syscall.ENOENT) {
				for _, o := range list {
					done = append(done, GCObject{Target: tg, Obj: o})
				}
			} else {
				down[tg] = true
				s.log.Debug("meta: object removal failed; will retry", "target", tg, "objects", len(list), "err", err)
			}
		}()
	}
	wg.Wait()
	if len(done) > 0 {
		if _, err := s.propose(ctx, &Command{Op: OpGCDone, Now: s.now(), Objects: done}); err != nil {
			return false
		}
	}
	return len(objs) == gcBatch && ctx.Err() == nil
}

// GCQueue returns the objects waiting for removal (for tests and tools).
func (s *Server) GCQueue() ([]GCObject, error) { return s.scanGC(0, nil) }

// scanGC returns up to limit (0: all) queued objects of targets not in skip.
func (s *Server) scanGC(limit int, skip map[proto.TargetID]bool) ([]GCObject, error) {
	var objs []GCObject
	now := uint64(s.opts.Now().UnixNano())
	err := s.st.Scan([]byte{store.PrefixGC}, []byte{store.PrefixGC + 1}, func(k, v []byte) bool {
		tg, ino, stripe, gen, ok := store.ParseGCKey(k)
		// A value holds the time (unix ns) before which the object is
		// kept: an object moved off a target that still serves it
		// (meta.moveSlot), for readers with the old layout.
		if ok && len(v) == 8 && binary.BigEndian.Uint64(v) > now {
			ok = false
		}
		if ok && !skip[proto.TargetID(tg)] {
			objs = append(objs, GCObject{Target: proto.TargetID(tg), Obj: proto.ObjectID{Ino: proto.Ino(ino), Stripe: stripe, Gen: gen}})
		}
		return limit == 0 || len(objs) < limit
	})
	return objs, err
}

// Orphans returns the inodes with nlink 0 that are still kept.
func (s *Server) Orphans() ([]proto.Ino, error) {
	var inos []proto.Ino
	err := s.st.Scan([]byte{store.PrefixOrphan}, []byte{store.PrefixOrphan + 1}, func(k, _ []byte) bool {
		if ino, ok := store.ParseU64Suffix(k); ok {
			inos = append(inos, proto.Ino(ino))
		}
		return true
	})
	return inos, err
}
