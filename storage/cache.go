package storage

import (
	"container/list"
	"sync"

	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/storage/vfs"
)

// handle is an open object: its data file and sidecar, with the state read
// from them. size and hdr are read and written only under the object's lock
// (exclusive to change them), which every caller takes before acquiring the
// handle; so a handle opened after a writer released the lock sees the
// writer's result on disk.
type handle struct {
	obj  proto.ObjectID
	data vfs.File
	crc  vfs.File
	size uint64 // data file size
	hdr  header
	ver  *verFile // the version file (version.go), nil while the object has none

	// guarded by handleCache.mu
	refs    int
	evicted bool
	elem    *list.Element
}

func (h *handle) close() {
	h.data.Close()
	h.crc.Close()
	if h.ver != nil {
		h.ver.f.Close()
	}
}

// handleCache is a bounded LRU of open objects, so that a target never holds
// more than 2*max descriptors for idle objects however many objects it has.
// Handles in use are never closed: an evicted handle closes when its last
// user releases it.
type handleCache struct {
	mu  sync.Mutex
	max int
	m   map[proto.ObjectID]*handle
	lru list.List // front = most recently used
}

func newHandleCache(max int) *handleCache {
	return &handleCache{max: max, m: make(map[proto.ObjectID]*handle)}
}

// get returns the cached handle for obj, referenced, or nil.
func (c *handleCache) get(obj proto.ObjectID) *handle {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.m[obj]
	if h == nil {
		return nil
	}
	h.refs++
	c.lru.MoveToFront(h.elem)
	return h
}

// put inserts a freshly opened handle and returns it referenced. If another
// caller (a concurrent reader) inserted one first, that one is returned and
// h is closed.
func (c *handleCache) put(h *handle) *handle {
	c.mu.Lock()
	if old := c.m[h.obj]; old != nil {
		old.refs++
		c.lru.MoveToFront(old.elem)
		c.mu.Unlock()
		h.close()
		return old
	}
	h.refs = 1
	h.elem = c.lru.PushFront(h)
	c.m[h.obj] = h
	var toClose []*handle
	for c.lru.Len() > c.max {
		v := c.lru.Back().Value.(*handle)
		if v == h {
			break
		}
		if c.evictLocked(v) {
			toClose = append(toClose, v)
		}
	}
	c.mu.Unlock()
	for _, v := range toClose {
		v.close()
	}
	return h
}

// evictLocked removes h from the cache and reports whether the caller must
// close it now (nobody uses it).
func (c *handleCache) evictLocked(h *handle) bool {
	if h.evicted {
		return false
	}
	h.evicted = true
	c.lru.Remove(h.elem)
	if c.m[h.obj] == h {
		delete(c.m, h.obj)
	}
	return h.refs == 0
}

// release drops a reference taken by get or put.
func (c *handleCache) release(h *handle) {
	c.mu.Lock()
	h.refs--
	closeNow := h.evicted && h.refs == 0
	c.mu.Unlock()
	if closeNow {
		h.close()
	}
}

// drop evicts obj's handle (after a remove, or when its cached state may no
// longer match the disk after a failed update).
func (c *handleCache) drop(obj proto.ObjectID) {
	c.mu.Lock()
	h := c.m[obj]
	closeNow := h != nil && c.evictLocked(h)
	c.mu.Unlock()
	if closeNow {
		h.close()
	}
}

// closeAll evicts every handle; handles still in use close on release.
func (c *handleCache) closeAll() {
	c.mu.Lock()
	var toClose []*handle
	for _, h := range c.m {
		if c.evictLocked(h) {
			toClose = append(toClose, h)
		}
	}
	c.mu.Unlock()
	for _, h := range toClose {
		h.close()
	}
}

// open reports how many handles the cache holds (for tests).
func (c *handleCache) open() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
