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

// requestKey carries the whole identity of a request in one context value
// (credentials, session, sequence number): the metadata server reads all
// three for every request, and one value costs one allocation and one
// lookup where three cost three of each. Every With* copies what ctx
// already carries and changes its part, so the nearest setting wins.
type requestKey struct{}

type requestIdentity struct {
	cred    Cred
	hasCred bool
	sess    SessionID
	hasSess bool
	seq     uint64
	job     string // see WithJob
}

func identityOf(ctx context.Context) requestIdentity {
	if r, ok := ctx.Value(requestKey{}).(*requestIdentity); ok {
		return *r
	}
	return requestIdentity{}
}

// WithRequest returns ctx carrying a request's credentials, session,
// sequence number and job at once (the metadata RPC handler's one call per
// request): as WithJob(WithSeq(WithSession(WithCred(ctx, c), sess), seq), job).
func WithRequest(ctx context.Context, c Cred, sess SessionID, seq uint64, job string) context.Context {
	return context.WithValue(ctx, requestKey{}, &requestIdentity{cred: c, hasCred: true, sess: sess, hasSess: true, seq: seq, job: job})
}

// WithCred returns ctx carrying c: the credentials of the caller on whose
// behalf the request is made. The client sets it per system call; the
// metadata RPC handler sets it per request from the request's header.
func WithCred(ctx context.Context, c Cred) context.Context {
	r := identityOf(ctx)
	r.cred, r.hasCred = c, true
	return context.WithValue(ctx, requestKey{}, &r)
}

// CredFrom returns the credentials ctx carries, and false if it carries
// none (an in-process caller such as a test or the server itself).
func CredFrom(ctx context.Context) (Cred, bool) {
	if r, ok := ctx.Value(requestKey{}).(*requestIdentity); ok && r.hasCred {
		return r.cred, true
	}
	return Cred{}, false
}

// CredPtr is CredFrom without a copy: the credentials ctx carries, which
// the caller must not modify, or nil.
func CredPtr(ctx context.Context) *Cred {
	if r, ok := ctx.Value(requestKey{}).(*requestIdentity); ok && r.hasCred {
		return &r.cred
	}
	return nil
}
