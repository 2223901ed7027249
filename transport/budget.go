package transport

import (
	"sync"
	"time"
)

// byteBudget bounds the request-body bytes a transport's listeners hold.
// Readers take bytes as a body's data arrives and wait, up to a deadline,
// when the budget is spent; handlers give them back once done.
type byteBudget struct {
	total int64 // 0 = no bound

	mu      sync.Mutex
	used    int64
	waiters int           // acquirers waiting on changed
	changed chan struct{} // closed and replaced when bytes are given back while some wait
}

func newByteBudget(total int64) *byteBudget {
	return &byteBudget{total: total, changed: make(chan struct{})}
}

// acquire takes n bytes, waiting until deadline (zero: timeout from now,
// or for ever if timeout is 0 too) or until done closes; it reports
// whether it got them. A request for more than the whole budget waits for
// all of it.
func (b *byteBudget) acquire(n int64, deadline time.Time, timeout time.Duration, done <-chan struct{}) bool {
	if b.total <= 0 || n <= 0 {
		return true
	}
	var t *time.Timer
	var expired <-chan time.Time
	for {
		b.mu.Lock()
		if b.used == 0 || b.used+n <= b.total {
			b.used += n
			b.mu.Unlock()
			if t != nil {
				t.Stop()
			}
			return true
		}
		ch := b.changed
		b.waiters++
		b.mu.Unlock()
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
		if !ok && t != nil {
			t.Stop()
		}
		b.mu.Lock()
		b.waiters--
		b.mu.Unlock()
		if !ok {
			return false
		}
	}
}

// release gives back n bytes.
func (b *byteBudget) release(n int64) {
	if b.total <= 0 || n <= 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	if b.waiters > 0 {
		close(b.changed)
		b.changed = make(chan struct{})
	}
	b.mu.Unlock()
}

// inUse returns the bytes taken now.
func (b *byteBudget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}
