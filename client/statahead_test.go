package client

import (
	"testing"

	"github.com/weft-fs/weft/proto"
)

// TestStataheadMissed: stataheadMin lookups in a row in one directory that
// found their names and missed the cache start one listing; a lookup that
// found nothing, or one in another directory, starts the count again; a
// listing under way starts no other, the misses meanwhile do not count
// towards the next, the next listing of a directory goes on where the
// last stopped, and a directory listed to its end is listed again only
// once its slot in the lease cache moved.
func TestStataheadMissed(t *testing.T) {
	var s statahead
	moved := false
	hasMoved := func(uint64) bool { return moved }
	run := func(dir uint64, n int) (started int, after string) {
		for range n {
			if a, ok := s.missed(proto.Ino(dir), true, hasMoved); ok {
				started++
				after = a
			}
		}
		return started, after
	}
	if n, _ := run(1, stataheadMin-1); n != 0 {
		t.Fatalf("%d listings after %d lookups", n, stataheadMin-1)
	}
	if _, ok := s.missed(1, false, hasMoved); ok {
		t.Fatal("a lookup that found nothing started a listing")
	}
	if n, _ := run(1, stataheadMin-1); n != 0 {
		t.Fatal("the count went on past a lookup that found nothing")
	}
	run(2, 1) // another directory
	if n, _ := run(1, stataheadMin-1); n != 0 {
		t.Fatal("the count went on past a lookup in another directory")
	}
	if n, after := run(1, 1); n != 1 || after != "" {
		t.Fatalf("%d listings (from %q) after %d lookups in a row, want 1 from the start", n, after, stataheadMin)
	}
	if n, _ := run(1, 3*stataheadMin); n != 0 {
		t.Fatal("a listing started while one is under way")
	}
	s.listed(1, "m", false, 0) // read its pages, up to name m
	if n, _ := run(1, stataheadMin-1); n != 0 {
		t.Fatal("the misses during the listing counted towards the next")
	}
	if n, after := run(1, 1); n != 1 || after != "m" {
		t.Fatalf("the next listing starts from %q (%d), want m", after, n)
	}
	s.listed(1, "", true, 7) // reached the end
	if n, _ := run(1, 3*stataheadMin); n != 0 {
		t.Fatal("a directory listed to its end was listed again before it changed")
	}
	moved = true
	if n, after := run(1, stataheadMin); n != 1 || after != "" {
		t.Fatalf("after the directory changed: %d listings from %q, want 1 from the start", n, after)
	}
}
