package transport

import (
	"context"
)

// Role is what an authenticated peer is allowed to be, as its certificate
// says (package auth issues them). Servers authorize every request by the
// role of the connection it came on.
type Role string

const (
	// RoleNone is a peer that did not authenticate: a transport built
	// without security (unit tests only). Servers refuse it unless they
	// were configured to trust unauthenticated peers.
	RoleNone Role = ""
	// RoleClient is a mount (or an admin tool acting as one).
	RoleClient Role = "client"
	// RoleStorage is a storage server.
	RoleStorage Role = "storage"
	// RoleMeta is a metadata server.
	RoleMeta Role = "meta"
)

// IsServer reports whether r is a server role (storage or meta).
func (r Role) IsServer() bool { return r == RoleStorage || r == RoleMeta }

// Peer is the other end of a server connection, as the transport
// authenticated it.
type Peer struct {
	Addr string // remote host:port
	Role Role   // RoleNone if the connection was not authenticated
	Name string // the name in the peer's certificate ("" if none)
}

type peerKey struct{}

// WithPeer returns ctx carrying p. Transports call it for every request
// they hand to a Handler; another transport (RDMA) does the same from
// outside this package.
func WithPeer(ctx context.Context, p Peer) context.Context {
	return context.WithValue(ctx, peerKey{}, p)
}

// PeerFrom returns the peer of the request being served with ctx. ok is
// false when ctx carries none (a call that did not come from a transport).
func PeerFrom(ctx context.Context) (p Peer, ok bool) {
	p, ok = ctx.Value(peerKey{}).(Peer)
	return p, ok
}
