package transport

import (
	"context"
	"time"
)

// Observer is told about every request a transport serves or every call it
// makes; the metrics package implements it. Begin is called as a request
// starts and End, on what Begin returned, as it ends (so that an observer
// resolves op once per request). Both are called from the goroutine doing
// the work and must be cheap and safe for concurrent use; Begin may return
// the same OpEnd for every request of op.
type Observer interface {
	Begin(op uint16) OpEnd
}

// OpEnd is told how a request that Begin saw ended.
type OpEnd interface {
	End(start time.Time, reqBytes, respBytes int, err error)
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
		end := obs.Begin(op)
		start := time.Now()
		resp, err := h(ctx, op, req)
		end.End(start, len(req), len(resp)+sendFileBytes(ctx), err)
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
	end := c.obs.Begin(op)
	start := time.Now()
	resp, err := c.Conn.Call(ctx, op, parts...)
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	end.End(start, n, len(resp), err)
	return resp, err
}

// isBroken forwards to the wrapped connection so Pool still redials a
// broken one.
func (c *observedConn) isBroken() bool {
	b, ok := c.Conn.(interface{ isBroken() bool })
	return ok && b.isBroken()
}

// retireIfIdle forwards to the wrapped connection so Pool still retires an
// idle one.
func (c *observedConn) retireIfIdle(d time.Duration) bool {
	r, ok := c.Conn.(interface{ retireIfIdle(time.Duration) bool })
	return ok && r.retireIfIdle(d)
}
