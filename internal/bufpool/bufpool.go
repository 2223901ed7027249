package bufpool

import (
	"fmt"
	"math/bits"
	"sync"
)

// Pool is a set of sync.Pools, one per power-of-two size class from Min to
// Max. The zero value is not usable; call New.
type Pool struct {
	minShift, maxShift int
	classes            []sync.Pool
}

// New returns a pool for buffers of min to max bytes; both must be powers
// of two with min <= max.
func New(min, max int) *Pool {
	if min <= 0 || max < min || min&(min-1) != 0 || max&(max-1) != 0 {
		panic(fmt.Sprintf("bufpool: bad size range %d..%d", min, max))
	}
	lo, hi := bits.Len(uint(min))-1, bits.Len(uint(max))-1
	return &Pool{minShift: lo, maxShift: hi, classes: make([]sync.Pool, hi-lo+1)}
}

// shift returns the size class (log2 of the capacity) of an n-byte buffer.
func shift(n int) int { return bits.Len(uint(n - 1)) }

// Get returns a buffer of length n with undefined contents.
func (p *Pool) Get(n int) []byte {
	if n < 1<<p.minShift || n > 1<<p.maxShift {
		return make([]byte, n)
	}
	s := shift(n)
	if b, ok := p.classes[s-p.minShift].Get().(*[]byte); ok {
		return (*b)[:n]
	}
	return make([]byte, n, 1<<s)
}

// Put recycles a buffer returned by Get; others are ignored.
func (p *Pool) Put(b []byte) {
	n := cap(b)
	if n < 1<<p.minShift || n > 1<<p.maxShift || n&(n-1) != 0 {
		return
	}
	b = b[:n]
	p.classes[shift(n)-p.minShift].Put(&b)
}
