package client

import (
	"testing"

	"github.com/weft-fs/weft/proto"
)

// TestAheadStreams: an open that asked the leader starts a stream of
// read-aheads at its file unless a stream with a read-ahead under way
// covers it; opens from the copies brought near a stream's end ask for
// the next ones, one read-ahead per stream at a time; a stream that
// covered a file opened from the leader again starts again there; a
// stream that ran into another takes it over.
func TestAheadStreams(t *testing.T) {
	var d aheadDemand
	a, ok := d.missed(100)
	if !ok {
		t.Fatal("the first open that asked the leader started no read-ahead")
	}
	if _, ok := d.missed(100); ok {
		t.Fatal("a second read-ahead of the same file while the first is under way")
	}
	b, ok := d.missed(1000)
	if !ok || b == a {
		t.Fatalf("an open elsewhere started stream %d (%v); the first is %d", b, ok, a)
	}
	d.done(a, 64, 100+aheadWindow)
	d.done(b, 64, 1000+aheadWindow)

	if _, _, ok := d.opened(110); ok {
		t.Fatal("an open far from its stream's end asked for more")
	}
	i, after, ok := d.opened(100 + aheadWindow - aheadLead)
	if !ok || i != a || after != 100+aheadWindow {
		t.Fatalf("an open near the end of stream %d: read-ahead of stream %d after %d (%v), want after %d", a, i, after, ok, 100+aheadWindow)
	}
	if _, _, ok := d.opened(100 + aheadWindow - 1); ok {
		t.Fatal("a second read-ahead of a stream while its first is under way")
	}
	if _, ok := d.missed(150); ok {
		t.Fatal("an open the busy stream covers started another read-ahead")
	}
	d.done(a, 64, 100+2*aheadWindow)
	d.mu.Lock()
	d.used = d.brought // the copies brought were opened, as far as the demand goes
	d.mu.Unlock()
	if i, ok := d.missed(150); !ok || i != a {
		t.Fatalf("a file the idle stream %d covered, opened from the leader: stream %d (%v), want it started again", a, i, ok)
	}
	d.done(a, 64, 150+aheadWindow)

	// A stream that reaches another's start takes it over.
	c, ok := d.missed(150 + aheadWindow + 1)
	if !ok {
		t.Fatal("no stream started past the first's end")
	}
	d.done(c, 64, 150+3*aheadWindow)
	i, after, ok = d.opened(150 + aheadWindow - 1)
	if !ok || i != a {
		t.Fatalf("the open near stream %d's end: stream %d (%v)", a, i, ok)
	}
	d.done(a, 64, after+aheadWindow)
	if st := d.streams[a]; st.last != 150+3*aheadWindow || d.streams[c].last != 0 {
		t.Fatalf("after running into stream %d, stream %d covers to %d (want %d), and %d is %+v", c, a, st.last, 150+3*aheadWindow, c, d.streams[c])
	}
}

// TestAheadDemand: once enough copies were brought, an open that asked the
// leader starts a read-ahead only while at least half of them were
// opened, or once in aheadProbe otherwise; an answer with nothing in it
// lets aheadSkip go by.
func TestAheadDemand(t *testing.T) {
	var d aheadDemand
	ino := proto.Ino(1)
	start := func() bool {
		ino += 10 * aheadWindow // a new place each time
		i, ok := d.missed(ino)
		if ok {
			d.done(i, 64, ino+aheadWindow)
		}
		return ok
	}
	if !start() {
		t.Fatal("no read-ahead before any was judged")
	}
	// 64 copies brought, none opened: refused, but for one probe.
	started := 0
	for range aheadProbe {
		if start() {
			started++
		}
	}
	if started != 1 {
		t.Fatalf("%d read-aheads started in %d opens while the copies brought were not opened, want 1 (the probe)", started, aheadProbe)
	}
	for range 128 {
		d.mu.Lock()
		d.used++
		d.mu.Unlock()
	}
	if !start() {
		t.Fatal("refused while the copies brought were opened")
	}

	// An empty answer: aheadSkip opens go by.
	ino += 10 * aheadWindow
	i, ok := d.missed(ino)
	if !ok {
		t.Fatal("refused")
	}
	d.done(i, 0, ino+aheadWindow)
	for n := range aheadSkip {
		ino += 10 * aheadWindow
		if _, ok := d.missed(ino); ok {
			t.Fatalf("open %d after an empty answer started a read-ahead", n)
		}
	}
	if !start() {
		t.Fatal("still refused after the skipped opens")
	}
}
