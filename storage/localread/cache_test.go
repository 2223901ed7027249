package localread

import (
	"testing"
	"time"

	"github.com/weft-fs/weft/proto"
)

// countingCache is an fdCache whose "descriptors" are numbers and whose
// closes are recorded.
func countingCache(max int) (*fdCache, map[int]int) {
	closed := map[int]int{}
	c := newFDCache(max)
	c.close = func(fd int) error { closed[fd]++; return nil }
	return c, closed
}

func testEntry(ino, stripe int, cap string, exp time.Time) *entry {
	return &entry{key: key{t: 1, obj: proto.ObjectID{Ino: proto.Ino(ino), Stripe: uint32(stripe)}},
		data: 2 * (ino*100 + stripe), crc: 2*(ino*100+stripe) + 1, cap: []byte(cap), expiry: exp}
}

// TestCacheBound: past its bound the cache drops the least recently used
// object and closes both its descriptors, once; entries in use are
// closed only when their last read ends.
func TestCacheBound(t *testing.T) {
	c, closed := countingCache(3)
	exp := time.Now().Add(time.Hour)
	now := time.Now()
	for i := range 3 {
		c.release(c.put(testEntry(i, 0, "c", exp)))
	}
	// Use object 0, so that 1 is the least recently used.
	c.release(c.get(key{1, proto.ObjectID{Ino: 0}}, []byte("c"), now))
	held := c.get(key{1, proto.ObjectID{Ino: 2}}, []byte("c"), now) // in use across evictions
	c.release(c.put(testEntry(3, 0, "c", exp)))
	if c.len() != 3 {
		t.Fatalf("%d entries, bound 3", c.len())
	}
	if closed[200] != 1 || closed[201] != 1 {
		t.Fatalf("the least recently used object's descriptors closed %d and %d times, want once each (closed: %v)", closed[200], closed[201], closed)
	}
	if len(closed) != 2 {
		t.Fatalf("closed %v: only object 1's descriptors should be", closed)
	}
	for i := 4; i < 8; i++ {
		c.release(c.put(testEntry(i, 0, "c", exp)))
	}
	if c.len() != 3 {
		t.Fatalf("%d entries, bound 3", c.len())
	}
	if closed[400] != 0 {
		t.Fatalf("object 2 was in use when dropped: its descriptors must stay open until released")
	}
	c.release(held)
	if closed[400] != 1 || closed[401] != 1 {
		t.Fatalf("object 2's descriptors closed %d and %d times after its last read, want once each", closed[400], closed[401])
	}
	for fd, n := range closed {
		if n != 1 {
			t.Fatalf("descriptor %d closed %d times", fd, n)
		}
	}
}

// TestCacheDrops: an entry is used only with the capability it was opened
// with and before its expiry; Forget (dropIno) drops every object of an
// inode; dropAll every one.
func TestCacheDrops(t *testing.T) {
	c, closed := countingCache(DefaultMaxOpen)
	now := time.Now()
	c.release(c.put(testEntry(1, 0, "a", now.Add(time.Minute))))
	c.release(c.put(testEntry(1, 1, "a", now.Add(time.Minute))))
	c.release(c.put(testEntry(2, 0, "a", now.Add(time.Minute))))
	c.release(c.put(testEntry(3, 0, "a", now.Add(time.Minute))))
	if e := c.get(key{1, proto.ObjectID{Ino: 2}}, []byte("b"), now); e != nil {
		t.Fatal("an entry served a request with another capability")
	}
	if closed[400] != 1 {
		t.Fatal("an entry asked for with another capability stays open")
	}
	if e := c.get(key{1, proto.ObjectID{Ino: 3}}, []byte("a"), now.Add(2*time.Minute)); e != nil {
		t.Fatal("an entry served past its capability's expiry")
	}
	if e := c.get(key{1, proto.ObjectID{Ino: 1}}, []byte("a"), now); e == nil {
		t.Fatal("a valid entry was not found")
	} else {
		c.release(e)
	}
	c.dropIno(1)
	if c.len() != 0 || closed[200] != 1 || closed[202] != 1 {
		t.Fatalf("after dropping inode 1: %d entries, closed %v", c.len(), closed)
	}
	c.release(c.put(testEntry(5, 0, "a", now.Add(time.Minute))))
	c.release(c.put(testEntry(6, 0, "a", now.Add(time.Minute))))
	c.dropAll()
	if c.len() != 0 || closed[1000] != 1 || closed[1200] != 1 {
		t.Fatalf("after dropAll: %d entries, closed %v", c.len(), closed)
	}
}
