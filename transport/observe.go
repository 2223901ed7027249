package transport

import (
	"context"
	"time"
)

// Observer is told about every request a transport serves or every call it
// makes; the metrics package implements it. Begin and End are called from
// the goroutine doing the work and must be cheap and safe for concurrent use.
type Observer interface {
	Begin(op uint16)
	End(op uint16, start time.Time, reqBytes, respBytes int, err error)
}

// Observed returns tr with server reporting to the handler of every
// listener and client reporting every Call of every dialled connection
// (either may be nil). Requests, responses, errors and contexts pass
// through unchanged. It lives here, not in the observer's package, because
// the connections it returns must keep the optional methods Pool relies on
// (isBroken).
func Observed(tr Transport, server, client Observer) Transport {
	return &observedTransport{inner: tr, server: server, client: client}
}

type observedTransport struct {
	inner          Transport
	server, client Observer
}

func (t *observedTransport) Listen(addr string, h Handler) (Listener, error) {
	obs := t.server
	if obs == nil {
		return t.inner.Listen(addr, h)
	}
	return t.inner.Listen(addr, func(ctx context.Context, op uint16, req []byte) ([]byte, error) {
		obs.Begin(op)
		start := time.Now()
		resp, err := h(ctx, op, req)
		obs.End(op, start, len(req), len(resp), err)
		return resp, err
	})
}

func (t *observedTransport) Dial(ctx context.Context, addr string) (Conn, error) {
	c, err := t.inner.Dial(ctx, addr)
	if err != nil || t.client == nil {
		return c, err
	}
	return &observedConn{Conn: c, obs: t.client}, nil
}

type observedConn struct {
	Conn
	obs Observer
}

func (c *observedConn) Call(ctx context.Context, op uint16, parts ...[]byte) ([]byte, error) {
	c.obs.Begin(op)
	start := time.Now()
	resp, err := c.Conn.Call(ctx, op, parts...)
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	c.obs.End(op, start, n, len(resp), err)
	return resp, err
}

// isBroken forwards to the wrapped connection so Pool still redials a
// broken one.
func (c *observedConn) isBroken() bool {
	b, ok := c.Conn.(interface{ isBroken() bool })
	return ok && b.isBroken()
}
