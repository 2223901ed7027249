package meta

import (
	"context"
	"syscall"

	"github.com/weft-fs/weft/proto"
)

// maxPins bounds the entries of one PinOpens request.
const maxPins = 1 << 16

// PinOpens implements proto.LeasePinner: it counts, for the caller's
// session, read-only opens that its client made from its lease cache
// without asking (docs/caching.md, "Opens from the cache"), so that the
// file is kept until their release like any open file's. An entry is
// counted only if the session is listed under the inode in the lease table
// (it was granted a lease there: it could have opened it so), or in the
// grace period after a restart or a change of leader (when every client
// re-registers what it holds), and if the inode is a regular file that is
// not being reclaimed. An unlink that finds another session listed under
// its file leaves the file an orphan (UnlinkAt), and the client pins
// before it acknowledges the unlink's break, so a file is never reclaimed
// under a pin that arrives in time. The result says which entries were
// counted; a malformed request (a write pin, a count of 0 or above
// maxReclaimCount) changes nothing and fails with EINVAL.
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
	done := make([]bool, len(pins))
	s.mu.Lock()
	if err := s.checkSessionLocked(cl.sess); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	dup := s.seenLocked(cl.sess, cl.seq)
	s.mu.Unlock()
	if dup {
		// A retry: the first attempt counted what it could. Reporting
		// every entry counted is safe: a release of a handle the
		// session does not hold changes nothing.
		for i := range done {
			done[i] = true
		}
		return done, nil
	}
	grace := s.inGrace()
	for i, p := range pins {
		if !grace && !s.leases.listed(p.Ino, cl.sess) {
			continue
		}
		n, err := s.readInode(p.Ino)
		if err != nil || !n.IsRegular() {
			continue
		}
		s.mu.Lock()
		if !s.reclaiming[p.Ino] {
			for range p.Count {
				s.countOpenLocked(cl.sess, p.Ino, false)
			}
			done[i] = true
		}
		s.mu.Unlock()
	}
	return done, nil
}
