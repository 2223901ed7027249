package transport

import (
	"context"
)

// Handler serves one request. op says which operation; req is the request
// body, owned by the handler. The returned error is sent to the caller as an
// errno (errors.As to syscall.Errno, else EIO) plus its message.
type Handler func(ctx context.Context, op uint16, req []byte) (resp []byte, err error)

// Conn is a client connection. Call is safe for concurrent use; calls do not
// wait for each other. The request is the concatenation of parts (so a data
// payload can be sent without copying it into a header buffer).
//
// Call returns an error that matches syscall.ETIMEDOUT when ctx expires,
// syscall.EIO (wrapped, with the cause) when the connection breaks, and the
// server's errno (errors.Is(err, syscall.ENOENT), ...) when the handler failed.
type Conn interface {
	Call(ctx context.Context, op uint16, parts ...[]byte) ([]byte, error)
	Close() error
}

// Listener is a serving endpoint.
type Listener interface {
	Addr() string
	Close() error
}

// Transport creates connections and listeners.
type Transport interface {
	Dial(ctx context.Context, addr string) (Conn, error)
	Listen(addr string, h Handler) (Listener, error)
}
