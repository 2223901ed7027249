package pace

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Pacer limits the bytes per second of the work that waits on it. The
// zero value has no limit. It is safe for concurrent use.
type Pacer struct {
	bps  atomic.Uint64 // 0: unlimited
	mu   sync.Mutex
	next time.Time
}

// New returns a pacer limited to rate bytes/s (0: unlimited).
func New(rate uint64) *Pacer {
	p := &Pacer{}
	p.Set(rate)
	return p
}

// Rate returns the limit in bytes/s (0: none).
func (p *Pacer) Rate() uint64 { return p.bps.Load() }

// Set changes the limit (0: none) from the next range on.
func (p *Pacer) Set(r uint64) {
	p.bps.Store(r)
	p.mu.Lock()
	p.next = time.Time{} // forget what a slower rate reserved
	p.mu.Unlock()
}

// reserve books n bytes and returns when they may be sent.
func (p *Pacer) reserve(now time.Time, n uint64) time.Time {
	r := p.bps.Load()
	if r == 0 || n == 0 {
		return now
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.next.Before(now) {
		p.next = now
	}
	at := p.next
	p.next = p.next.Add(time.Duration(float64(n) / float64(r) * float64(time.Second)))
	return at
}

// Wait returns when n more bytes may be sent, or with ctx's error when ctx
// ends first.
func (p *Pacer) Wait(ctx context.Context, n uint64) error {
	d := time.Until(p.reserve(time.Now(), n))
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
