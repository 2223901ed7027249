package proto

import (
	"context"
	"crypto/rand"
)

// SessionID names one client's session with the metadata server: a mount
// picks a random one at start, registers it (it then lives as long as the
// mount renews its lease) and sends it in the header of every request;
// admin tools and storage servers have none (the zero id). The server
// keeps open handles per session (the peer's certificate name and this
// id), so one client can never drop another's handle.
type SessionID [16]byte

// NewSessionID returns a random session id.
func NewSessionID() SessionID {
	var id SessionID
	rand.Read(id[:]) // never fails (crypto/rand panics instead)
	return id
}

// WithSession returns ctx carrying the session id a request belongs to
// (the metadata RPC handler sets it from the request header; in-process
// callers may set it to act as distinct sessions).
func WithSession(ctx context.Context, id SessionID) context.Context {
	r := identityOf(ctx)
	r.sess, r.hasSess = id, true
	return context.WithValue(ctx, requestKey{}, &r)
}

// SessionFrom returns the session id ctx carries, and false if none.
func SessionFrom(ctx context.Context) (SessionID, bool) {
	if r, ok := ctx.Value(requestKey{}).(*requestIdentity); ok && r.hasSess {
		return r.sess, true
	}
	return SessionID{}, false
}

// OpenHandle is what a client holds open on one inode in its session: the
// number of handles and whether one of them was opened for writing. A
// client names its handles when it re-registers a session the metadata
// server forgot in a restart (meta.Server.OpenSession).
type OpenHandle struct {
	Ino   Ino
	Count uint32
	Write bool
}

// MaxPendingRequests is how many deduplicated requests of one session may
// wait for their reply at a time: the metadata server remembers the
// replies of a session's last MaxPendingRequests requests (by sequence
// number), so a retry of any request still waiting is recognized.
const MaxPendingRequests = 256

// WithSeq returns ctx carrying a mutating request's sequence number in its
// session, for the metadata server's request dedupe (Raft thesis §6.3):
// the metadata RPC handler sets it from the request header. 0: none.
func WithSeq(ctx context.Context, seq uint64) context.Context {
	r := identityOf(ctx)
	r.seq = seq
	return context.WithValue(ctx, requestKey{}, &r)
}

// SeqFrom returns the request's sequence number in ctx (0 if none).
func SeqFrom(ctx context.Context) uint64 {
	if r, ok := ctx.Value(requestKey{}).(*requestIdentity); ok {
		return r.seq
	}
	return 0
}
