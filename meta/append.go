package meta

import (
	"context"
	"syscall"

	"github.com/weft-fs/weft/proto"
)

// maxAppend bounds one append reservation (a FUSE write is at most 1 MiB;
// this only keeps a bad request from pushing the end to the limit).
const maxAppend = 1 << 30

// appendReply is the remembered answer to one Append of a session (slot
// seq mod MaxPendingRequests), so that a retry after a lost reply gets the
// same range instead of a second one.
type appendReply struct{ seq, end uint64 }

// Append implements proto.LockService: it reserves n bytes at the end of
// regular file ino for the caller, in memory: the end is the larger of
// the file's recorded size and the end of the last reservation (see
// doc.go, "Atomic append"). The reply is the file's attributes with Size
// the end of the caller's range.
func (s *Server) Append(ctx context.Context, ino proto.Ino, n uint64) (proto.Attr, error) {
	cl, err := s.reader(ctx) // on a replicated server, only the leader reserves
	if err != nil {
		return proto.Attr{}, err
	}
	if n == 0 || n > maxAppend {
		return proto.Attr{}, errnof(syscall.EINVAL, "append of %d bytes", n)
	}
	nd, err := s.readInode(ino)
	if err != nil {
		return proto.Attr{}, err
	}
	if !nd.IsRegular() {
		return proto.Attr{}, errnof(syscall.EINVAL, "append to inode %d, not a regular file", ino)
	}
	a := nd.Attr
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkSessionLocked(cl.sess); err != nil {
		return proto.Attr{}, err
	}
	if cl.sess.remote && !s.sessOpens[cl.sess][ino].write {
		return proto.Attr{}, errnof(syscall.EBADF, "append to inode %d without a write handle", ino)
	}
	st := s.sessions[cl.sess]
	var slot *appendReply
	if st != nil && cl.seq != 0 {
		slot = &st.appends[cl.seq%proto.MaxPendingRequests]
		if slot.seq == cl.seq {
			a.Size = slot.end // a retry: the range it already got
			return a, nil
		}
	}
	if s.inGrace() {
		// Ranges reserved before the restart may not be reclaimed yet.
		return proto.Attr{}, errnof(syscall.EAGAIN, "inode %d: no appends in the grace period after a restart, while clients reclaim their ranges", ino)
	}
	base := max(s.appendEnd[ino], a.Size)
	if base+n < base {
		return proto.Attr{}, errnof(syscall.EFBIG, "append of %d bytes to inode %d at %d", n, ino, base)
	}
	s.appendEnd[ino] = base + n
	if slot != nil {
		*slot = appendReply{seq: cl.seq, end: base + n}
	}
	a.Size = base + n
	return a, nil
}

// ReclaimAppend implements proto.LockService: in the grace period after a
// restart, a client that re-registered its session names how far its
// reservations on ino reached, and later appends start beyond.
func (s *Server) ReclaimAppend(ctx context.Context, ino proto.Ino, end uint64) error {
	cl, err := s.reader(ctx)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkSessionLocked(cl.sess); err != nil {
		return err
	}
	if cl.sess.remote && !s.sessOpens[cl.sess][ino].write {
		return errnof(syscall.EBADF, "append reclaim on inode %d without a write handle", ino)
	}
	if !s.inGrace() {
		return errnof(syscall.ESTALE, "inode %d: append ranges can be reclaimed only in the grace period after a restart", ino)
	}
	s.appendEnd[ino] = max(s.appendEnd[ino], end)
	return nil
}

// forgetAppendsLocked drops ino's reservation end: nobody has the file
// open any more (the writers' WriteDone recorded what they wrote), or its
// size was set.
func (s *Server) forgetAppendsLocked(ino proto.Ino) { delete(s.appendEnd, ino) }
