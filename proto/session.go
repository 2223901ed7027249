package proto

import (
	"context"
	"crypto/rand"
)

// SessionID names one client's session with the metadata server: a client
// (one mount, one admin tool run) picks a random one at start and sends it
// in the header of every request. The server keeps open handles per session
// (the peer's certificate name and this id), so one client can never drop
// another's handle.
type SessionID [16]byte

// NewSessionID returns a random session id.
func NewSessionID() SessionID {
	var id SessionID
	rand.Read(id[:]) // never fails (crypto/rand panics instead)
	return id
}

type sessionKey struct{}

// WithSession returns ctx carrying the session id a request belongs to
// (the metadata RPC handler sets it from the request header; in-process
// callers may set it to act as distinct sessions).
func WithSession(ctx context.Context, id SessionID) context.Context {
	return context.WithValue(ctx, sessionKey{}, id)
}

// SessionFrom returns the session id ctx carries, and false if none.
func SessionFrom(ctx context.Context) (SessionID, bool) {
	id, ok := ctx.Value(sessionKey{}).(SessionID)
	return id, ok
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

// Request identifies a mutating request within its session for the
// metadata server's request dedupe (Raft thesis §6.3): Seq numbers the
// session's mutations from 1 (0: none, no dedupe), and Acked says that
// the client has the replies of every request of the session numbered
// below it, so the server may forget them.
type Request struct {
	Seq, Acked uint64
}

type requestKey struct{}

// WithRequest returns ctx carrying the request's sequence numbers (the
// metadata RPC handler sets it from the request header).
func WithRequest(ctx context.Context, r Request) context.Context {
	return context.WithValue(ctx, requestKey{}, r)
}

// RequestFrom returns the request's sequence numbers in ctx (zero if none).
func RequestFrom(ctx context.Context) Request {
	r, _ := ctx.Value(requestKey{}).(Request)
	return r
}
