package meta

import (
	"bytes"
	"context"
	"errors"
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
