package storagerpc

import (
	"context"
	"sync"
	"sync/atomic"
)

// inflight bounds the requests a Client has outstanding at each storage
// server (address) at once: client.rpcs_in_flight, Lustre's
// max_rpcs_in_flight. The bound can change at any moment; a request
// waiting for a slot sees a raised bound at once.
type inflight struct {
	on    atomic.Bool // limit > 0: without a bound, requests skip all of this
	mu    sync.Mutex
	limit int            // 0: no bound (the transport's own, TCPOptions.MaxInflight)
	used  map[string]int // requests outstanding per address
	wake  chan struct{}  // closed (and replaced) when a slot frees or the bound changes
	peak  map[string]int // the most outstanding at once per address since the bound was set
	// waiting counts the requests waiting for a slot.
	waiting int
}

func (f *inflight) set(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.limit = max(n, 0)
	f.on.Store(f.limit > 0)
	f.peak = nil
	f.wakeLocked()
}

func (f *inflight) wakeLocked() {
	if f.wake != nil {
		close(f.wake)
		f.wake = nil
	}
}

// acquire takes a slot at addr, or fails with ctx's error; held says
// whether it took one (none is counted while there is no bound), which
// release must then give back.
func (f *inflight) acquire(ctx context.Context, addr string) (held bool, err error) {
	if !f.on.Load() {
		return false, nil
	}
	f.mu.Lock()
	for f.limit > 0 && f.used[addr] >= f.limit {
		if f.wake == nil {
			f.wake = make(chan struct{})
		}
		ch := f.wake
		f.waiting++
		f.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			f.mu.Lock()
			f.waiting--
			f.mu.Unlock()
			return false, ctx.Err()
		}
		f.mu.Lock()
		f.waiting--
	}
	if f.used == nil {
		f.used = map[string]int{}
	}
	f.used[addr]++
	if f.peak == nil {
		f.peak = map[string]int{}
	}
	f.peak[addr] = max(f.peak[addr], f.used[addr])
	f.mu.Unlock()
	return true, nil
}

func (f *inflight) release(addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.used[addr]--; f.used[addr] <= 0 {
		delete(f.used, addr)
	}
	f.wakeLocked()
}

// SetInflightLimit bounds the requests outstanding at each storage server
// to n from now on (0: no bound beyond the transport's).
func (c *Client) SetInflightLimit(n int) { c.limit.set(n) }

// InflightPeak returns the most requests that were outstanding at once at
// one storage server since the bound was last set (0 without a bound:
// nothing is counted then).
func (c *Client) InflightPeak() int {
	c.limit.mu.Lock()
	defer c.limit.mu.Unlock()
	p := 0
	for _, n := range c.limit.peak {
		p = max(p, n)
	}
	return p
}

// Outstanding returns the requests under way at each storage server
// (by address) now, whether a bound is set or not; servers asked before
// and idle now show 0.
func (c *Client) Outstanding() map[string]int64 {
	out := map[string]int64{}
	c.outstanding.Range(func(k, v any) bool {
		out[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
	return out
}
