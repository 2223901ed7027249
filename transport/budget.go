package transport

import (
	"sync"
	"sync/atomic"
	"time"
)

// byteBudget bounds the request-body bytes a transport's listeners hold.
// Readers take bytes as a body's data arrives and wait, up to a deadline,
// when the budget is spent; handlers give them back once done. Taking and
// giving back are lock-free while nobody waits (every request does both).
type byteBudget struct {
	total int64 // 0 = no bound

	used    atomic.Int64
	waiters atomic.Int32 // acquirers waiting on changed

	mu      sync.Mutex
	changed chan struct{} // closed and replaced when bytes are given back while some wait
}

func newByteBudget(total int64) *byteBudget {
	return &byteBudget{total: total, changed: make(chan struct{})}
}

// tryAcquire takes n bytes if they are free (or nothing is taken: a
// request for more than the whole budget waits for all of it).
func (b *byteBudget) tryAcquire(n int64) bool {
	for {
		u := b.used.Load()
		if u != 0 && u+n > b.total {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

// acquire takes n bytes, waiting until deadline (zero: timeout from now,
// or for ever if timeout is 0 too) or until done closes; it reports
// whether it got them. A request for more than the whole budget waits for
// all of it.
func (b *byteBudget) acquire(n int64, deadline time.Time, timeout time.Duration, done <-chan struct{}) bool {
	if b.total <= 0 || n <= 0 || b.tryAcquire(n) {
		return true
	}
	var t *time.Timer
	var expired <-chan time.Time
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for {
		// Register as a waiter first, then try again: a release that
		// came before the registration is seen by the retry, one after
		// it closes ch.
		b.mu.Lock()
		ch := b.changed
		b.waiters.Add(1)
		b.mu.Unlock()
		if b.tryAcquire(n) {
			b.waiters.Add(-1)
			return true
		}
		if t == nil && (!deadline.IsZero() || timeout > 0) {
			if deadline.IsZero() {
				deadline = time.Now().Add(timeout)
			}
			t = time.NewTimer(time.Until(deadline))
			expired = t.C
		}
		var ok bool
		select {
		case <-ch:
			ok = true
		case <-expired:
		case <-done:
		}
		b.waiters.Add(-1)
		if !ok {
			return false
		}
		if b.tryAcquire(n) {
			return true
		}
	}
}

// release gives back n bytes.
func (b *byteBudget) release(n int64) {
	if b.total <= 0 || n <= 0 {
		return
	}
	b.used.Add(-n)
	if b.waiters.Load() > 0 {
		b.mu.Lock()
		close(b.changed)
		b.changed = make(chan struct{})
		b.mu.Unlock()
	}
}

// inUse returns the bytes taken now.
func (b *byteBudget) inUse() int64 { return b.used.Load() }
