package localread

import (
	"bytes"
	"container/list"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/weft-fs/weft/proto"
)

// DefaultMaxOpen is how many objects' descriptors a Reader keeps open by
// default (two descriptors each, three once read directly).
const DefaultMaxOpen = 1024

// key names one object of one target.
type key struct {
	t   proto.TargetID
	obj proto.ObjectID
}

// entry is one object's open descriptors: the data file and its sidecar,
// usable with exactly the capability the server checked (cap) until its
// expiry. refs counts the reads using it; a dropped entry's descriptors
// are closed when the last of them ends.
type entry struct {
	key
	data, crc int
	// direct is the O_DIRECT descriptor of the data file
	// (Reader.directFD): 0 not opened yet, -1 none to be had, else the
	// descriptor + 1.
	direct atomic.Int32
	cap    []byte
	expiry time.Time

	refs    int
	dropped bool
	elem    *list.Element
}

// fdCache is a bounded LRU of open objects. It is safe for concurrent use.
type fdCache struct {
	max   int
	close func(fd int) error // syscall.Close; tests count

	mu    sync.Mutex
	m     map[key]*entry
	byIno map[proto.Ino]map[*entry]struct{}
	lru   list.List // front: most recently used
}

func newFDCache(max int) *fdCache {
	if max <= 0 {
		max = DefaultMaxOpen
	}
	return &fdCache{max: max, close: syscall.Close, m: map[key]*entry{}, byIno: map[proto.Ino]map[*entry]struct{}{}}
}

// get returns k's entry, referenced, if it was opened with exactly the
// capability cap and that has not expired at now; nil otherwise (an
// entry of another capability, or an expired one, is dropped).
func (c *fdCache) get(k key, cap []byte, now time.Time) *entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.m[k]
	if e == nil {
		return nil
	}
	if !bytes.Equal(e.cap, cap) || now.After(e.expiry) {
		c.dropLocked(e)
		return nil
	}
	e.refs++
	c.lru.MoveToFront(e.elem)
	return e
}

// put adds e, referenced, replacing an entry of the same object, and
// drops the least recently used entries past the bound. If another read
// opened the object with the same capability meanwhile, that entry is
// returned (referenced) and e is closed.
func (c *fdCache) put(e *entry) *entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.m[e.key]; old != nil {
		if bytes.Equal(old.cap, e.cap) {
			c.closeLocked(e)
			old.refs++
			c.lru.MoveToFront(old.elem)
			return old
		}
		c.dropLocked(old)
	}
	e.refs = 1
	c.m[e.key] = e
	e.elem = c.lru.PushFront(e)
	s := c.byIno[e.obj.Ino]
	if s == nil {
		s = map[*entry]struct{}{}
		c.byIno[e.obj.Ino] = s
	}
	s[e] = struct{}{}
	for c.lru.Len() > c.max {
		c.dropLocked(c.lru.Back().Value.(*entry))
	}
	return e
}

// release ends a read's use of e.
func (c *fdCache) release(e *entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e.refs--
	if e.dropped && e.refs == 0 {
		c.closeLocked(e)
	}
}

// drop removes e (its descriptors are closed once no read uses them).
func (c *fdCache) drop(e *entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dropLocked(e)
}

// dropIno removes every entry of inode ino.
func (c *fdCache) dropIno(ino proto.Ino) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for e := range c.byIno[ino] {
		c.dropLocked(e)
	}
}

// dropAll removes every entry.
func (c *fdCache) dropAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.m {
		c.dropLocked(e)
	}
}

// len is the number of entries.
func (c *fdCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

func (c *fdCache) dropLocked(e *entry) {
	if e.dropped {
		return
	}
	e.dropped = true
	if c.m[e.key] == e {
		delete(c.m, e.key)
	}
	c.lru.Remove(e.elem)
	if s := c.byIno[e.obj.Ino]; s != nil {
		delete(s, e)
		if len(s) == 0 {
			delete(c.byIno, e.obj.Ino)
		}
	}
	if e.refs == 0 {
		c.closeLocked(e)
	}
}

func (c *fdCache) closeLocked(e *entry) {
	c.close(e.data)
	c.close(e.crc)
	if fd, _ := e.directFD(); fd >= 0 {
		c.close(fd)
	}
	e.data, e.crc = -1, -1
	e.direct.Store(-1)
}

// directFD returns e's O_DIRECT descriptor (-1: none) and whether one was
// tried for at all.
func (e *entry) directFD() (fd int, tried bool) {
	switch v := e.direct.Load(); {
	case v == 0:
		return -1, false
	case v < 0:
		return -1, true
	default:
		return int(v) - 1, true
	}
}
