package meta

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/weft-fs/weft/proto"
)

// TestLookupCopy: a lookup answers a small file's copy, and says it may be
// opened from the client's cache at once, only to a session that polls
// for lease invalidations and was granted a lease with nothing of the file
// to invalidate, and the copy only of a file every class may read
// (proto.LookupCopier; docs/caching.md, "Small files from the lookup").
func TestLookupCopy(t *testing.T) {
	e, writer, other := copyEnv(t)
	data := []byte("the whole of a small file")
	f := newFileCopy(t, e, writer, "f", data)
	e.must(e.srv.Release(writer, f))
	g := newFileCopy(t, e, writer, "g", data)
	e.must(e.srv.Release(writer, g))
	p, _, _, err := e.srv.CreateOpen(writer, proto.CreateIn{Parent: proto.RootIno, Name: "p", Mode: 0o600}, proto.AccessReadWrite)
	e.must(err)
	if _, err := e.srv.WriteDoneCopy(writer, p.Ino, uint64(len(data)), 5, proto.NoBlocks, data); err != nil {
		t.Fatal(err)
	}
	e.must(e.srv.Release(writer, p.Ino))
	empty, _, _, err := e.srv.CreateOpen(writer, proto.CreateIn{Parent: proto.RootIno, Name: "empty", Mode: 0o644}, proto.AccessReadWrite)
	e.must(err)
	e.must(e.srv.Release(writer, empty.Ino))

	lookup := func(name string) (proto.Attr, []byte, bool) {
		t.Helper()
		a, got, openable, err := e.srv.LookupCopy(other, proto.RootIno, name)
		e.must(err)
		return a, got, openable
	}
	if _, got, openable := lookup("f"); got != nil || openable {
		t.Fatalf("a session that holds no leases got copy %q, openable %v", got, openable)
	}

	// other polls from now on (one poll registers it as a holder).
	ended, end := context.WithCancel(other)
	end()
	_, err = e.srv.LeasePoll(ended, 0)
	e.must(err)
	if a, got, openable := lookup("f"); !bytes.Equal(got, data) || !openable || a.Ino != f || a.Size != uint64(len(data)) {
		t.Fatalf("a holder's lookup of a 0644 file with a copy: ino %d size %d, copy %q, openable %v", a.Ino, a.Size, got, openable)
	}
	if _, got, openable := lookup("p"); got != nil || !openable {
		t.Fatalf("a holder's lookup of a 0600 file: copy %q (want none: not every class may read it), openable %v", got, openable)
	}
	if _, got, openable := lookup("empty"); got != nil || !openable {
		t.Fatalf("a holder's lookup of an empty file: copy %q, openable %v (want true)", got, openable)
	}
	if _, _, _, err := e.srv.LookupCopy(other, proto.RootIno, "nothing"); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("lookup of a missing name: %v, want ENOENT", err)
	}

	// An unlink reclaiming g by itself (nobody else holds a lease on it)
	// fences it: a lease granted meanwhile comes with an invalidation,
	// and the file must not be opened from the cache.
	if !e.srv.leases.claimReclaim(g, sessionOf(writer)) {
		t.Fatal("claimReclaim refused a file no other session holds")
	}
	if _, got, openable := lookup("g"); got != nil || openable {
		t.Fatalf("a lookup of a fenced file: copy %q, openable %v", got, openable)
	}
	e.srv.leases.unfence(g)
}

// TestCopiesAfter: a session is answered the copies of the files numbered
// after one only where it could already open them from its lease cache
// but for the bytes: it polls, holds a lease on the file with nothing of
// it to invalidate, and every class may read the file
// (proto.CopyPrefetcher; docs/caching.md, "Small files read ahead").
func TestCopiesAfter(t *testing.T) {
	e, writer, other := copyEnv(t)
	content := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i)}, 100+i) }
	var inos []proto.Ino
	for i := range 8 {
		ino := newFileCopy(t, e, writer, fmt.Sprint("f", i), content(i))
		e.must(e.srv.Release(writer, ino))
		inos = append(inos, ino)
	}
	p, _, _, err := e.srv.CreateOpen(writer, proto.CreateIn{Parent: proto.RootIno, Name: "private", Mode: 0o600}, proto.AccessReadWrite)
	e.must(err)
	_, err = e.srv.WriteDoneCopy(writer, p.Ino, 5, 5, proto.NoBlocks, []byte("12345"))
	e.must(err)
	e.must(e.srv.Release(writer, p.Ino))
	first := inos[0]
	after := func(c context.Context, window uint32) map[proto.Ino][]byte {
		t.Helper()
		fcs, through, err := e.srv.CopiesAfter(c, first, window)
		e.must(err)
		if through != first+proto.Ino(window) {
			t.Fatalf("an answer not cut short covers to %d, want %d", through, first+proto.Ino(window))
		}
		got := map[proto.Ino][]byte{}
		for i, fc := range fcs {
			if i > 0 && fc.Attr.Ino <= fcs[i-1].Attr.Ino {
				t.Fatalf("copies not in ascending order: %d after %d", fc.Attr.Ino, fcs[i-1].Attr.Ino)
			}
			if fc.Attr.Size != uint64(len(fc.Data)) {
				t.Fatalf("inode %d: attributes of size %d with a copy of %d bytes", fc.Attr.Ino, fc.Attr.Size, len(fc.Data))
			}
			got[fc.Attr.Ino] = fc.Data
		}
		return got
	}

	if got := after(other, 64); len(got) != 0 {
		t.Fatalf("a session that does not poll got %d copies", len(got))
	}
	ended, end := context.WithCancel(other)
	end()
	_, err = e.srv.LeasePoll(ended, 0)
	e.must(err)
	if got := after(other, 64); len(got) != 0 {
		t.Fatalf("a holder that never looked the files up got %d copies", len(got))
	}
	// other looks up f2, f3, f5 and private: it holds leases on them.
	for _, name := range []string{"f2", "f3", "f5", "private"} {
		_, err := e.srv.Lookup(other, proto.RootIno, name)
		e.must(err)
	}
	got := after(other, 64)
	if len(got) != 3 || !bytes.Equal(got[inos[2]], content(2)) || !bytes.Equal(got[inos[3]], content(3)) || !bytes.Equal(got[inos[5]], content(5)) {
		t.Fatalf("copies after f0: %d files (%v), want f2, f3 and f5 with their bytes, not the private file", len(got), got)
	}
	if got := after(other, uint32(inos[3]-first)); len(got) != 2 || got[inos[5]] != nil {
		t.Fatalf("a window to f3 answered %d files, f5 among them: %v", len(got), got[inos[5]] != nil)
	}

	// f3 opened for writing by another session: other's lease on it is
	// broken, and until other acknowledges the invalidation (its next
	// poll) f3 is left out; then its copy is gone.
	poll := func(ack uint64) []proto.LeaseInval {
		t.Helper()
		p, err := e.srv.LeasePoll(ended, ack)
		e.must(err)
		return p.Invals
	}
	opened := make(chan error, 1)
	go func() {
		_, _, err := e.srv.Open(writer, inos[3], proto.AccessReadWrite)
		opened <- err
	}()
	var seq uint64
	for seq == 0 {
		for _, iv := range poll(0) {
			if iv.Ino == inos[3] {
				seq = iv.Seq
			}
		}
		select {
		case err := <-opened:
			t.Fatalf("the open for writing returned (%v) before other acknowledged its invalidation", err)
		default:
		}
	}
	if got := after(other, 64); got[inos[3]] != nil {
		t.Fatal("f3 answered while other's invalidation of it is not acknowledged")
	}
	poll(seq)
	e.must(<-opened)
	e.must(e.srv.Release(writer, inos[3]))
	if got := after(other, 64); len(got) != 2 || got[inos[3]] != nil {
		t.Fatalf("after f3 was opened for writing elsewhere: %d files, f3 among them: %v", len(got), got[inos[3]] != nil)
	}
}

// TestCopiesAfterCutShort: an answer holds at most proto.MaxCopiesAfter
// copies and says how far it got, so that the next one starts there.
func TestCopiesAfterCutShort(t *testing.T) {
	e, writer, other := copyEnv(t)
	var inos []proto.Ino
	for i := range proto.MaxCopiesAfter + 10 {
		ino := newFileCopy(t, e, writer, fmt.Sprint("f", i), []byte(fmt.Sprint("f", i)))
		e.must(e.srv.Release(writer, ino))
		inos = append(inos, ino)
	}
	ended, end := context.WithCancel(other)
	end()
	_, err := e.srv.LeasePoll(ended, 0)
	e.must(err)
	for i := range inos {
		_, err := e.srv.Lookup(other, proto.RootIno, fmt.Sprint("f", i))
		e.must(err)
	}
	fcs, through, err := e.srv.CopiesAfter(other, inos[0]-1, proto.MaxCopiesWindow)
	e.must(err)
	if len(fcs) != proto.MaxCopiesAfter || through != inos[proto.MaxCopiesAfter-1] {
		t.Fatalf("the first answer: %d copies through inode %d, want %d through %d", len(fcs), through, proto.MaxCopiesAfter, inos[proto.MaxCopiesAfter-1])
	}
	rest, _, err := e.srv.CopiesAfter(other, through, proto.MaxCopiesWindow)
	e.must(err)
	if len(rest) != 10 || rest[0].Attr.Ino != inos[proto.MaxCopiesAfter] {
		t.Fatalf("the next answer: %d copies, want the last 10", len(rest))
	}
}
