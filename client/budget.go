package client

import "sync"

// budget is a counting semaphore over bytes: the global cap on memory held by
// write-behind buffers. A request larger than the whole budget is admitted
// when nothing else is held, so it can never wait forever.
type budget struct {
	mu    sync.Mutex
	cond  *sync.Cond
	limit uint64
	used  uint64
}

func newBudget(limit uint64) *budget {
	b := &budget{limit: limit}
	b.cond = sync.NewCond(&b.mu)
	return b
}

func (b *budget) acquire(n uint64) {
	b.mu.Lock()
	for b.used > 0 && b.used+n > b.limit {
		b.cond.Wait()
	}
	b.used += n
	b.mu.Unlock()
}

func (b *budget) release(n uint64) {
	b.mu.Lock()
	b.used -= n
	b.cond.Broadcast()
	b.mu.Unlock()
}

// tryAcquire takes n bytes if they are available now.
func (b *budget) tryAcquire(n uint64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.limit {
		return false
	}
	b.used += n
	return true
}

// setLimit changes the budget (client.write_behind); waiters recheck at
// once. Bytes held above a lowered limit are given back as their writes
// finish; nothing new is admitted until they are.
func (b *budget) setLimit(limit uint64) {
	b.mu.Lock()
	b.limit = limit
	b.cond.Broadcast()
	b.mu.Unlock()
}

// getLimit returns the budget's limit.
func (b *budget) getLimit() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.limit
}
