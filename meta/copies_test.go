package meta

import (
	"bytes"
	"context"
	"testing"

	"github.com/weft-fs/weft/meta/store"
	"github.com/weft-fs/weft/proto"
)

// copyEnv is a server with one target and two client sessions.
func copyEnv(t *testing.T) (e *env, writer, other context.Context) {
	e = newEnv(t)
	e.addTarget("t1", 1<<30)
	writer, other = remote("writer", 1), remote("other", 2)
	for _, c := range []context.Context{writer, other} {
		_, err := e.srv.OpenSession(c, nil)
		e.must(err)
	}
	return e, writer, other
}

// newFileCopy creates name open for writing in session c and records
// data with WriteDoneCopy, as a client that wrote it whole does.
func newFileCopy(t *testing.T, e *env, c context.Context, name string, data []byte) proto.Ino {
	t.Helper()
	a, _, _, err := e.srv.CreateOpen(c, proto.CreateIn{Parent: proto.RootIno, Name: name, Mode: 0644}, proto.AccessReadWrite)
	e.must(err)
	got, err := e.srv.WriteDoneCopy(c, a.Ino, uint64(len(data)), 5, proto.NoBlocks, data)
	e.must(err)
	if got.Size != uint64(len(data)) {
		t.Fatalf("size %d after the write, want %d", got.Size, len(data))
	}
	return a.Ino
}

// readCopy opens ino for reading in session c and returns its copy.
func readCopy(t *testing.T, e *env, c context.Context, ino proto.Ino) []byte {
	t.Helper()
	a, _, data, err := e.srv.OpenCopy(c, ino, proto.AccessRead)
	e.must(err)
	e.must(e.srv.Release(c, ino))
	if data != nil && uint64(len(data)) != a.Size {
		t.Fatalf("copy of %d bytes for a file of %d", len(data), a.Size)
	}
	return data
}

// TestFileCopyServed: the first WriteDone of a new file keeps its bytes,
// an open for reading answers them (in any session, after a restart too),
// an open for writing gets none.
func TestFileCopyServed(t *testing.T) {
	e, writer, other := copyEnv(t)
	data := []byte("the whole of a small file")
	ino := newFileCopy(t, e, writer, "f", data)
	if got := readCopy(t, e, other, ino); !bytes.Equal(got, data) {
		t.Fatalf("copy %q, want %q", got, data)
	}
	e.must(e.srv.Release(writer, ino))
	if got := readCopy(t, e, writer, ino); !bytes.Equal(got, data) {
		t.Fatalf("copy to its writer %q, want %q", got, data)
	}
	e.restart()
	for _, c := range []context.Context{writer, other} {
		_, err := e.srv.OpenSession(c, nil)
		e.must(err)
	}
	if got := readCopy(t, e, other, ino); !bytes.Equal(got, data) {
		t.Fatalf("copy after a restart %q, want %q", got, data)
	}
}

// TestFileCopyDropped: everything that may change a file's bytes drops
// its copy: a later WriteDone, a truncate, an open for writing (before it
// returns), a writer's session ending, the file's removal.
func TestFileCopyDropped(t *testing.T) {
	e, writer, other := copyEnv(t)
	data := []byte("0123456789")
	hasCopy := func(ino proto.Ino) bool {
		_, err := e.st.Get(store.AppendCopyKey(nil, uint64(ino)))
		return err == nil
	}
	cases := []struct {
		name string
		drop func(ino proto.Ino)
	}{
		{"writedone", func(ino proto.Ino) {
			_, err := e.srv.WriteDone(writer, ino, 20, 6, proto.NoBlocks)
			e.must(err)
		}},
		{"writedone within the size", func(ino proto.Ino) {
			_, err := e.srv.WriteDone(writer, ino, 4, 6, proto.NoBlocks)
			e.must(err)
		}},
		{"truncate", func(ino proto.Ino) {
			_, err := e.srv.SetAttr(other, ino, proto.SetAttrIn{Valid: proto.SetSize, Size: 10})
			e.must(err)
		}},
		{"open for writing", func(ino proto.Ino) {
			_, _, data, err := e.srv.OpenCopy(other, ino, proto.AccessReadWrite)
			e.must(err)
			if data != nil {
				t.Errorf("an open for writing got the copy")
			}
			if hasCopy(ino) {
				t.Errorf("the copy is still there when the open for writing returned")
			}
		}},
		{"writer's session closed", func(proto.Ino) { e.must(e.srv.CloseSession(writer)) }},
	}
	for i, tc := range cases {
		ino := newFileCopy(t, e, writer, "f"+string(rune('a'+i)), data)
		if !hasCopy(ino) || readCopy(t, e, other, ino) == nil {
			t.Fatalf("%s: no copy to begin with", tc.name)
		}
		tc.drop(ino)
		if hasCopy(ino) {
			t.Errorf("%s: the copy is still stored", tc.name)
		}
		if got := readCopy(t, e, other, ino); got != nil {
			t.Errorf("%s: an open still answers a copy %q", tc.name, got)
		}
		if tc.name == "writer's session closed" {
			_, err := e.srv.OpenSession(writer, nil)
			e.must(err)
		}
	}

	// Removal: the record goes with the inode.
	ino := newFileCopy(t, e, writer, "gone", data)
	e.must(e.srv.Release(writer, ino))
	e.must(e.srv.Unlink(writer, proto.RootIno, "gone"))
	waitFor(t, "the unlinked file to be reclaimed", func() bool { return !hasCopy(ino) })
}

// TestFileCopyRefused: a copy is taken only from a new file's first
// WriteDone, of its whole size, while no other session holds it open for
// writing and the server is past its grace period.
func TestFileCopyRefused(t *testing.T) {
	e, writer, other := copyEnv(t)
	data := []byte("0123456789")
	create := func(name string) proto.Ino {
		a, _, _, err := e.srv.CreateOpen(writer, proto.CreateIn{Parent: proto.RootIno, Name: name, Mode: 0644}, proto.AccessReadWrite)
		e.must(err)
		return a.Ino
	}
	refused := func(what string, ino proto.Ino) {
		t.Helper()
		if got := readCopy(t, e, other, ino); got != nil {
			t.Errorf("%s: copy %q taken", what, got)
		}
	}

	ino := create("second")
	_, err := e.srv.WriteDone(writer, ino, 3, 5, proto.NoBlocks)
	e.must(err)
	_, err = e.srv.WriteDoneCopy(writer, ino, uint64(len(data)), 6, proto.NoBlocks, data)
	e.must(err)
	refused("a second WriteDone", ino)

	ino = create("truncated")
	_, err = e.srv.SetAttr(other, ino, proto.SetAttrIn{Valid: proto.SetSize, Size: 0})
	e.must(err)
	_, err = e.srv.WriteDoneCopy(writer, ino, uint64(len(data)), 6, proto.NoBlocks, data)
	e.must(err)
	refused("after a truncate", ino)

	ino = create("shared")
	_, _, err = e.srv.Open(other, ino, proto.AccessWrite)
	e.must(err)
	_, err = e.srv.WriteDoneCopy(writer, ino, uint64(len(data)), 6, proto.NoBlocks, data)
	e.must(err)
	refused("with another writer", ino)
	if a, _ := e.srv.GetAttr(ctx, ino); a.Size != uint64(len(data)) {
		t.Errorf("the refused copy's WriteDone recorded size %d, want %d", a.Size, len(data))
	}

	e.must(e.srv.SetParam(ctx, "meta.file_copies", "off", false))
	ino = create("param off")
	_, err = e.srv.WriteDoneCopy(writer, ino, uint64(len(data)), 6, proto.NoBlocks, data)
	e.must(err)
	refused("with meta.file_copies off", ino)
	e.must(e.srv.SetParam(ctx, "meta.file_copies", "on", false))

	ino = create("short")
	if _, err := e.srv.WriteDoneCopy(writer, ino, 20, 6, proto.NoBlocks, data); err == nil {
		t.Errorf("a copy shorter than the size it records was accepted")
	}
	big := make([]byte, proto.MaxFileCopy+1)
	if _, err := e.srv.WriteDoneCopy(writer, ino, uint64(len(big)), 6, proto.NoBlocks, big); err == nil {
		t.Errorf("a copy of %d bytes was accepted", len(big))
	}

	// Within the grace period after a restart the server may not know
	// every writer yet.
	ino = create("grace")
	e.restart()
	_, err = e.srv.OpenSession(writer, []proto.OpenHandle{{Ino: ino, Count: 1, Write: true}})
	e.must(err)
	_, err = e.srv.OpenSession(other, nil)
	e.must(err)
	if !e.srv.inGrace() {
		t.Fatal("no grace period after the restart")
	}
	_, err = e.srv.WriteDoneCopy(writer, ino, uint64(len(data)), 6, proto.NoBlocks, data)
	e.must(err)
	refused("in the grace period", ino)
}

// TestFileCopyDamaged: a copy record whose checksum fails is not served
// (the reader reads the objects).
func TestFileCopyDamaged(t *testing.T) {
	e, writer, other := copyEnv(t)
	ino := newFileCopy(t, e, writer, "f", []byte("0123456789"))
	k := store.AppendCopyKey(nil, uint64(ino))
	v, err := e.st.Get(k)
	e.must(err)
	v[len(v)-1] ^= 1
	b := e.st.NewBatch()
	b.Set(k, v)
	e.must(b.Commit(true))
	if got := readCopy(t, e, other, ino); got != nil {
		t.Fatalf("a damaged copy was served: %q", got)
	}
}
