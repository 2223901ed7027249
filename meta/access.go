package meta

import (
	"context"
	"fmt"
	"net/netip"
	"syscall"

	"github.com/weft-fs/weft/internal/checks"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/transport"
)

// Access says which clients may use the server and as whom their root
// acts. The zero value admits clients from any network without squashing.
type Access struct {
	// RootSquash maps requests from clients made as uid 0 to SquashUid and
	// SquashGid (no supplementary groups), like Lustre's root_squash and
	// NFS's root_squash. Servers (meta, storage roles) are never squashed.
	RootSquash bool
	// SquashUid and SquashGid are what a squashed root becomes; 0 means
	// 65534 (nobody/nogroup): squashing root to root would be no squash.
	SquashUid, SquashGid uint32
	// RootSquashExempt are client networks whose root is not squashed
	// (admin nodes).
	RootSquashExempt []netip.Prefix
	// ClientNetworks, if not empty, are the only networks clients may
	// connect from; a client elsewhere is refused with EACCES (the
	// allow-list of Lustre's nodemap). Empty: any network.
	ClientNetworks []netip.Prefix
}

// DefaultSquashID is the uid and gid a squashed root becomes by default.
const DefaultSquashID = 65534

func (a Access) squashIDs() (uid, gid uint32) {
	uid, gid = a.SquashUid, a.SquashGid
	if uid == 0 {
		uid = DefaultSquashID
	}
	if gid == 0 {
		gid = DefaultSquashID
	}
	return uid, gid
}

// ParsePrefixes parses a list of CIDR prefixes ("10.0.0.0/8") or single
// addresses (a host: /32 or /128).
func ParsePrefixes(ss []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range ss {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return nil, fmt.Errorf("meta: %q is not a network (CIDR) or an address", s)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// session names the holder of open handles: the peer's certificate name
// and the session id from the request header. In-process callers (no peer)
// form sessions of their own, told apart only by the id in ctx.
type session struct {
	remote bool
	name   string
	id     proto.SessionID
}

// caller is who a request acts for, as the server decided it from ctx.
type caller struct {
	// cred is nil for a trusted in-process caller that named no
	// credentials: it acts as root, nothing is checked, and the uid and
	// gid fields of its requests name the owner of new inodes.
	cred *proto.Cred
	sess session
	seq  uint64 // the request's sequence number in its session (dedupe.go)
}

// isRoot reports whether the caller has root's privileges.
func (c caller) isRoot() bool { return c.cred == nil || c.cred.Uid == 0 }

// caller authorizes the request served with ctx and returns who it acts
// for (see docs/security.md "Permissions"):
//   - no peer in ctx: an in-process call, trusted; it acts as the Cred in
//     ctx if any, else as root;
//   - a peer that did not authenticate (RoleNone) is refused with EACCES
//     unless Options.AllowUnauthenticated; it is then treated as a client;
//   - a client peer must come from Access.ClientNetworks (if set), must
//     carry credentials, and its root is squashed if Access.RootSquash;
//   - a server peer (meta, storage) acts as the Cred it sent, or root.
//
// On a replicated server every request is first refused (EAGAIN, naming
// the leader) unless this member is the leader and ready (leader.go):
// clients find the leader, proposals are never forwarded.
func (s *Server) caller(ctx context.Context) (caller, error) {
	if s.replica != nil {
		if err := s.leading(); err != nil {
			return caller{}, err
		}
	}
	return s.authorize(ctx)
}

// authorize is caller without the leader check (requests any member
// answers: Members).
func (s *Server) authorize(ctx context.Context) (caller, error) {
	var c caller
	c.cred = proto.CredPtr(ctx) // shared with ctx: never modified, only replaced
	c.sess = sessionOf(ctx)
	c.seq = proto.SeqFrom(ctx)
	p, ok := transport.PeerFrom(ctx)
	if !ok {
		return c, nil
	}
	if p.Role.IsServer() {
		if c.cred == nil {
			c.cred = &proto.Cred{}
		}
		return c, nil
	}
	if p.Role == transport.RoleNone && !s.opts.AllowUnauthenticated {
		s.refuse(p, "unauthenticated peer")
		return caller{}, errnof(syscall.EACCES, "peer %s did not authenticate", p.Addr)
	}
	if p.Role != transport.RoleNone && p.Role != transport.RoleClient {
		s.refuse(p, "unknown role")
		return caller{}, errnof(syscall.EACCES, "peer %s has role %q", p.Addr, p.Role)
	}
	acc := &s.opts.Access
	var addr netip.Addr
	if len(acc.ClientNetworks) > 0 || (acc.RootSquash && len(acc.RootSquashExempt) > 0) {
		addr = peerAddr(p.Addr)
	}
	if len(acc.ClientNetworks) > 0 && !inPrefixes(addr, acc.ClientNetworks) {
		s.refuse(p, "client outside client_networks")
		return caller{}, errnof(syscall.EACCES, "client %s is not in an allowed network", p.Addr)
	}
	if c.cred == nil {
		s.refuse(p, "request without credentials")
		return caller{}, errnof(syscall.EACCES, "client %s sent no credentials", p.Addr)
	}
	if checks.Off {
		c.cred = nil // a benchmark build without checks: everyone is root
		return c, nil
	}
	if acc.RootSquash && c.cred.Uid == 0 && !inPrefixes(addr, acc.RootSquashExempt) {
		uid, gid := acc.squashIDs()
		c.cred = &proto.Cred{Uid: uid, Gid: gid}
	}
	return c, nil
}

// peerAddr returns the IP of a host:port, or the zero Addr (in no prefix).
func peerAddr(hostport string) netip.Addr {
	if ap, err := netip.ParseAddrPort(hostport); err == nil {
		return ap.Addr().Unmap()
	}
	if a, err := netip.ParseAddr(hostport); err == nil {
		return a.Unmap()
	}
	return netip.Addr{}
}

func inPrefixes(a netip.Addr, ps []netip.Prefix) bool {
	if !a.IsValid() {
		return false
	}
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// refuse logs a refused request (rate-limited: a client retrying in a loop
// must not fill the log).
func (s *Server) refuse(p transport.Peer, why string) {
	s.refusals.Warn(s.log, "meta: request refused", "peer", p.Addr, "name", p.Name, "role", string(p.Role), "why", why)
}

// own sets a creating command's credentials and the new inode's owner:
// the caller's uid and gid. Only a trusted in-process caller without
// credentials names the owner in the request's uid and gid fields; from
// anyone else those fields are ignored.
func (c caller) own(cmd *Command) {
	c.stamp(cmd)
	cmd.Cred = c.cred
	if c.cred != nil {
		cmd.Uid, cmd.Gid = c.cred.Uid, c.cred.Gid
	}
}
