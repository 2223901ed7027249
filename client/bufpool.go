package client

import (
	"math/bits"
	"sync"
)

// bufPool recycles write-behind buffers in power-of-two size classes from
// 4 KiB to 4 MiB, so a stream of 1 MiB writes does not allocate (and the GC
// does not scan) a fresh megabyte per write. Larger buffers are not pooled.
type bufPool struct {
	classes [minShift + numClasses]sync.Pool
}

const (
	minShift   = 12 // 4 KiB
	numClasses = 11 // up to 4 MiB
)

func classOf(n int) int {
	if n <= 1<<minShift {
		return minShift
	}
	return bits.Len(uint(n - 1))
}

// get returns a buffer of length n (contents undefined).
func (p *bufPool) get(n int) []byte {
	c := classOf(n)
	if c >= minShift+numClasses {
		return make([]byte, n)
	}
	if b, ok := p.classes[c].Get().(*[]byte); ok {
		return (*b)[:n]
	}
	return make([]byte, n, 1<<c)
}

// put recycles a buffer obtained from get.
func (p *bufPool) put(b []byte) {
	c := classOf(cap(b))
	if c >= minShift+numClasses || cap(b) != 1<<c {
		return
	}
	b = b[:cap(b)]
	p.classes[c].Put(&b)
}
