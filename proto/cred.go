package proto

import (
	"context"
	"slices"
)

// MaxGroups bounds the supplementary groups a Cred carries (NGROUPS_MAX).
const MaxGroups = 65536

// Cred is who asks: the calling process's file-system user and groups, as
// the client host reports them. The metadata server trusts them only as far
// as it trusts the authenticated client host (root squash and the client
// allow-list apply), and checks every operation against them.
type Cred struct {
	Uid    uint32
	Gid    uint32
	Groups []uint32 // supplementary groups (may include Gid)
}

// InGroup reports whether gid is the primary or a supplementary group.
func (c Cred) InGroup(gid uint32) bool {
	return c.Gid == gid || slices.Contains(c.Groups, gid)
}

// RootCred is the superuser.
var RootCred = Cred{}

type credKey struct{}

// WithCred returns ctx carrying c: the credentials of the caller on whose
// behalf the request is made. The client sets it per system call; the
// metadata RPC handler sets it per request from the request's header.
func WithCred(ctx context.Context, c Cred) context.Context {
	return context.WithValue(ctx, credKey{}, c)
}

// CredFrom returns the credentials ctx carries, and false if it carries
// none (an in-process caller such as a test or the server itself).
func CredFrom(ctx context.Context) (Cred, bool) {
	c, ok := ctx.Value(credKey{}).(Cred)
	return c, ok
}
