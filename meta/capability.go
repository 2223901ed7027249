package meta

import (
	"context"
	"syscall"
	"time"

	"github.com/weft-fs/weft/capability"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/transport"
)

// DefaultCapabilityLifetime is how long a capability issued by Open,
// CreateOpen or Capability is valid unless Options.CapabilityLifetime says
// otherwise. Clients renew the capabilities of files that stay open, so
// it bounds how long a capability taken from a client stays useful, and
// how long a client keeps access after the file's mode changes.
const DefaultCapabilityLifetime = 10 * time.Minute

// accessBits maps a proto.Access to permitted's access(2) bits.
func accessBits(want proto.Access) uint32 {
	var b uint32
	if want&proto.AccessRead != 0 {
		b |= accessRead
	}
	if want&proto.AccessWrite != 0 {
		b |= accessWrite
	}
	if want&proto.AccessExec != 0 {
		b |= accessExec
	}
	return b
}

// checkAccess reports EACCES unless the caller (as Server.caller decided
// it: root squash applied; none is a trusted in-process caller, root) may
// access a as want asks.
func checkAccess(cl caller, a *proto.Attr, want proto.Access) error {
	if want&^(proto.AccessReadWrite|proto.AccessExec) != 0 {
		return errnof(syscall.EINVAL, "unknown access mode %#x", uint8(want))
	}
	c := proto.RootCred
	if cl.cred != nil {
		c = *cl.cred
	}
	if !permitted(c, a, accessBits(want)) {
		return errnof(syscall.EACCES, "uid %d may not open inode %d (mode %o) for %v", c.Uid, a.Ino, a.Mode&0o7777, want)
	}
	return nil
}

// issue returns a capability granting want (want.Grants()) on a's objects, bound to the
// requesting client's certificate name when it authenticated. Only regular
// files have objects: for anything else, and on a server without a
// capability key, it is nil.
func (s *Server) issue(ctx context.Context, a *proto.Attr, want proto.Access) ([]byte, error) {
	return s.issueAt(ctx, a, want, s.opts.Now())
}

// issueAt is issue with the issue time given (a fence is that time).
func (s *Server) issueAt(ctx context.Context, a *proto.Attr, want proto.Access, now time.Time) ([]byte, error) {
	if s.capKey == nil || !a.IsRegular() || want == 0 {
		return nil, nil
	}
	var holder string
	if p, ok := transport.PeerFrom(ctx); ok && p.Role == transport.RoleClient {
		holder = p.Name
	}
	b, err := s.capKey.Sign(capability.Capability{Ino: a.Ino, Gen: a.Gen, Rights: want.Grants(), Issued: now,
		Expiry: now.Add(s.opts.CapabilityLifetime), Holder: holder})
	if err != nil {
		return nil, errnof(syscall.EIO, "capability for inode %d: %v", a.Ino, err)
	}
	return b, nil
}

// Capability implements proto.MetaService: a capability for ino with the
// rights want, after the same permission check as Open, for renewing the
// capability of a file that stays open and for truncating by path.
func (s *Server) Capability(ctx context.Context, ino proto.Ino, want proto.Access) ([]byte, error) {
	_, cap, err := s.capabilityOf(ctx, ino, want, nil)
	return cap, err
}

// capabilityOf issues a capability for want on regular file ino to the
// caller, after its permission check, if accept (when not nil) accepts the
// inode first; it returns the inode's attributes with it.
func (s *Server) capabilityOf(ctx context.Context, ino proto.Ino, want proto.Access, accept func(*inode) error) (proto.Attr, []byte, error) {
	cl, err := s.caller(ctx)
	if err != nil {
		return proto.Attr{}, nil, err
	}
	n, err := s.readInode(ino)
	if err != nil {
		return proto.Attr{}, nil, err
	}
	if !n.Attr.IsRegular() {
		return proto.Attr{}, nil, errnof(syscall.EINVAL, "inode %d is not a regular file", ino)
	}
	if accept != nil {
		if err := accept(n); err != nil {
			return proto.Attr{}, nil, err
		}
	}
	if err := checkAccess(cl, &n.Attr, want); err != nil {
		return proto.Attr{}, nil, err
	}
	cap, err := s.issue(ctx, &n.Attr, want)
	if err != nil {
		return proto.Attr{}, nil, err
	}
	return n.Attr, cap, nil
}
