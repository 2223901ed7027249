package meta

import (
	"context"
	"slices"
	"syscall"

	"github.com/weft-fs/weft/proto"
)

// maxPins bounds the entries of one PinOpens request.
const maxPins = 1 << 16

// PinOpens implements proto.LeasePinner: it counts, for the caller's
// session, read-only opens that its client made from its lease cache
// without asking (docs/caching.md, "Opens from the cache"), so that the
// file is kept until their release like any open file's. An entry is
// counted if its inode is a regular file every class may read (as by an
// Open for reading, which any identity would pass; no capability is
// issued) that is not being reclaimed. An unlink that finds another
// session holding a lease on its file leaves the file an orphan
// (UnlinkAt), and the client pins before it acknowledges the unlink's
// break, so a file is never reclaimed under a pin that arrives in time.
// The result says which entries were counted; a retry of the request is
// given the same answer. A malformed request (a write pin, a count of 0 or
// above maxReclaimCount) changes nothing and fails with EINVAL.
func (s *Server) PinOpens(ctx context.Context, pins []proto.OpenHandle) ([]bool, error) {
	cl, err := s.caller(ctx)
	if err != nil {
		return nil, err
	}
	if cl.sess.remote && cl.sess.id == (proto.SessionID{}) {
		return nil, errNoSessionID
	}
	if len(pins) > maxPins {
		return nil, errnof(syscall.EINVAL, "%d pins in one request (at most %d)", len(pins), maxPins)
	}
	for _, p := range pins {
		if p.Write || p.Count == 0 || p.Count > maxReclaimCount {
			return nil, errnof(syscall.EINVAL, "pin of %d handles on inode %d (write %v): only read-only opens, 1 to %d", p.Count, p.Ino, p.Write, maxReclaimCount)
		}
	}
	s.mu.Lock()
	if err := s.checkSessionLocked(cl.sess); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	st := s.sessions[cl.sess]
	if s.seenLocked(cl.sess, cl.seq) {
		// A retry (its reply was lost): the first attempt's answer,
		// once it has one. Reporting a refused entry counted would let
		// the client's release drop another handle's count.
		if st == nil || st.pinSeq != cl.seq {
			s.mu.Unlock()
			return nil, errnof(syscall.EIO, "the answer to pin request %d is no longer known", cl.seq)
		}
		busy := st.pinBusy
		s.mu.Unlock()
		select {
		case <-busy:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if st.pinSeq != cl.seq || len(st.pinDone) != len(pins) {
			return nil, errnof(syscall.EIO, "the answer to pin request %d is no longer known", cl.seq)
		}
		return slices.Clone(st.pinDone), nil
	}
	var busy chan struct{}
	if st != nil && cl.seq != 0 {
		busy = make(chan struct{})
		st.pinSeq, st.pinDone, st.pinBusy = cl.seq, nil, busy
	}
	s.mu.Unlock()
	done := make([]bool, len(pins))
	for i, p := range pins {
		// Counted first, then the inode checked, as Open does: a
		// reclaim that ends between a check and the count would leave
		// a count on an inode that is gone.
		s.mu.Lock()
		if s.reclaiming[p.Ino] {
			s.mu.Unlock()
			continue
		}
		for range p.Count {
			s.countOpenLocked(cl.sess, p.Ino, false)
		}
		s.mu.Unlock()
		n, err := s.readInode(p.Ino)
		if err == nil && n.ReadableByAll() {
			done[i] = true
			continue
		}
		for range p.Count {
			s.releaseOne(cl.sess, p.Ino)
		}
	}
	if busy != nil {
		s.mu.Lock()
		if st.pinBusy == busy {
			st.pinDone = slices.Clone(done)
		}
		s.mu.Unlock()
		close(busy)
	}
	return done, nil
}
