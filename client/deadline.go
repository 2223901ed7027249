package client

import (
	"context"
	"sync"
	"time"
)

// lazyDeadline is context.WithTimeout whose timer is started only when
// something waits on it (rpcCtx and a mirror copy's grace are made with
// it). A read served from an object's file on this host (localread) never
// waits on its context: it only asks for the deadline (for a socket's)
// and for values. Two timers started and stopped for each 4 KiB random
// read (the read's bound and the mirror copy's grace)
// cost the mount about 6 % of its random-read rate (docs/performance.md,
// issue 12 session 15).
//
// The first Done makes the standard context the lazy one stands for,
// context.WithDeadline(parent, deadline), and from then on the lazy one
// answers as it does: children made with the context package find it
// through Value, as they find any cancelCtx, so they are cancelled with
// it without a goroutine of their own. Before that, Err is computed from
// the parent, the deadline and cancel.
type lazyDeadline struct {
	parent   context.Context
	deadline time.Time // the earlier of its own and the parent's

	mu          sync.Mutex
	inner       context.Context // made by the first Done
	cancelInner context.CancelFunc
	cancelled   bool
}

// withLazyDeadline is context.WithTimeout(ctx, d) with its timer started
// only by a wait (see lazyDeadline). Call the returned function when done.
func withLazyDeadline(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	c := &lazyDeadline{parent: ctx, deadline: time.Now().Add(d)}
	if pd, ok := ctx.Deadline(); ok && pd.Before(c.deadline) {
		c.deadline = pd
	}
	return c, c.cancel
}

func (c *lazyDeadline) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *lazyDeadline) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inner == nil {
		c.inner, c.cancelInner = context.WithDeadline(c.parent, c.deadline)
		if c.cancelled {
			c.cancelInner()
		}
	}
	return c.inner.Done()
}

func (c *lazyDeadline) Err() error {
	c.mu.Lock()
	inner, cancelled := c.inner, c.cancelled
	c.mu.Unlock()
	switch {
	case inner != nil:
		return inner.Err()
	case cancelled:
		return context.Canceled
	}
	if err := c.parent.Err(); err != nil {
		return err
	}
	if !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

func (c *lazyDeadline) Value(key any) any {
	c.mu.Lock()
	inner := c.inner
	c.mu.Unlock()
	if inner != nil {
		return inner.Value(key)
	}
	return c.parent.Value(key)
}

func (c *lazyDeadline) cancel() {
	c.mu.Lock()
	c.cancelled = true
	cancelInner := c.cancelInner
	c.mu.Unlock()
	if cancelInner != nil {
		cancelInner()
	}
}

func (c *lazyDeadline) String() string { return "client.lazyDeadline" }
