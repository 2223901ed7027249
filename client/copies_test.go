package client

import (
	"bytes"
	"context"
	"math/rand/v2"
	"syscall"
	"testing"

	"github.com/weft-fs/weft/internal/fake"
	"github.com/weft-fs/weft/meta"
	"github.com/weft-fs/weft/proto"
)

// copyClients returns two clients, a writer and a reader, of one real
// metadata server (in memory) and one fake storage service.
func copyClients(t *testing.T) (stor *fake.Storage, writer, reader *Client) {
	srv := newMetaServer(t)
	stor = fake.NewStorage()
	writer = NewWithServices(srv, stor, Config{})
	t.Cleanup(func() { writer.Close() })
	reader = NewWithServices(srv, stor, Config{})
	t.Cleanup(func() { reader.Close() })
	return stor, writer, reader
}

// createFile creates name in the root of c's file system, open for
// reading and writing.
func createFile(t *testing.T, c *Client, name string) *File {
	t.Helper()
	f, _, _, err := c.CreateOpen(context.Background(), proto.CreateIn{Parent: proto.RootIno, Name: name, Mode: syscall.S_IFREG | 0o644, Exclusive: true}, proto.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestFileCopies: a small file written whole by one client is read by
// another from the metadata service's copy, without a storage read; once
// anything rewrites it (a later write through the same handle, another
// open for writing), readers get the new bytes from the objects. A file
// over proto.MaxFileCopy has no copy.
func TestFileCopies(t *testing.T) {
	ctx := context.Background()
	stor, writer, reader := copyClients(t)

	rng := rand.New(rand.NewPCG(1, 2))
	fill := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	create := func(name string) *File { return createFile(t, writer, name) }
	write := func(f *File, p []byte, off uint64) {
		t.Helper()
		if _, err := f.Write(ctx, p, off); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// read opens ino on c for reading and returns the whole file and the
	// storage reads it took.
	read := func(c *Client, ino proto.Ino) ([]byte, int) {
		t.Helper()
		before := stor.Calls(fake.OpRead)
		f, a, err := c.Open(ctx, ino, proto.AccessRead)
		must(err)
		p := make([]byte, a.Size+100)
		n, err := f.Read(ctx, p, 0)
		must(err)
		must(f.Release(ctx))
		return p[:n], stor.Calls(fake.OpRead) - before
	}

	// Written in two writes, out of order, then closed.
	data := fill(3901)
	f := create("small")
	write(f, data[2000:], 2000)
	write(f, data[:2000], 0)
	must(f.Flush(ctx))
	must(f.Release(ctx))
	got, reads := read(reader, f.Ino())
	if !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes, not what was written", len(got))
	}
	if reads != 0 {
		t.Errorf("reading the small file took %d storage reads, want 0 (its copy)", reads)
	}

	// Another open for writing drops the copy; what it writes is read,
	// also by a reader that kept a handle open meanwhile (close-to-open:
	// its next open sees the new bytes).
	held, _, err := reader.Open(ctx, f.Ino(), proto.AccessRead)
	must(err)
	w, _, err := writer.Open(ctx, f.Ino(), proto.AccessReadWrite)
	must(err)
	write(w, []byte("XYZ"), 10)
	must(w.Flush(ctx))
	must(w.Release(ctx))
	copy(data[10:], "XYZ")
	got, reads = read(reader, f.Ino())
	if !bytes.Equal(got, data) {
		t.Fatalf("after a rewrite: read %q..., want %q...", got[:16], data[:16])
	}
	if reads == 0 {
		t.Errorf("after a rewrite the file was still read from a copy")
	}
	must(held.Release(ctx))

	// Written again through the handle that offered the copy.
	data = fill(100)
	g := create("again")
	write(g, data, 0)
	must(g.Flush(ctx))
	write(g, []byte("later"), 50)
	must(g.Flush(ctx))
	copy(data[50:], "later")
	if got, _ := read(reader, g.Ino()); !bytes.Equal(got, data) {
		t.Fatalf("after a second write through the same handle: %q", got)
	}
	must(g.Release(ctx))

	// Too big for a copy, and a file with a hole in it.
	data = fill(proto.MaxFileCopy + 1)
	h := create("big")
	write(h, data, 0)
	must(h.Release(ctx))
	if got, reads := read(reader, h.Ino()); !bytes.Equal(got, data) || reads == 0 {
		t.Fatalf("a file over the copy limit: read back equal %v, %d storage reads", bytes.Equal(got, data), reads)
	}
	data = make([]byte, 3000)
	copy(data[2990:], "tail")
	s := create("sparse")
	write(s, data[2990:], 2990)
	must(s.Release(ctx))
	if got, reads := read(reader, s.Ino()); !bytes.Equal(got, data) || reads != 0 {
		t.Fatalf("a sparse small file: read back equal %v, %d storage reads", bytes.Equal(got, data), reads)
	}

	// Truncated before it was closed: no copy, the truncate's zeros read.
	data = fill(200)
	tr := create("truncated")
	write(tr, data, 0)
	_, err = tr.Truncate(ctx, 50)
	must(err)
	must(tr.Release(ctx))
	if got, _ := read(reader, tr.Ino()); !bytes.Equal(got, data[:50]) {
		t.Fatalf("truncated file: read %d bytes, want its first 50", len(got))
	}
}

// TestFileCopyConcurrentWrites: writes racing a flush through another
// handle of the same file: whatever copy the flush offers, a reader that
// opens after the last close reads the last bytes written (run with
// -race: the offer must not share the shadow with the writes).
func TestFileCopyConcurrentWrites(t *testing.T) {
	ctx := context.Background()
	_, writer, reader := copyClients(t)
	f := createFile(t, writer, "f")
	g, _, err := writer.Open(ctx, f.Ino(), proto.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	last := make([]byte, 1000)
	if _, err := f.Write(ctx, last, 0); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		for i := range 2000 {
			for j := range last {
				last[j] = byte(i)
			}
			if _, err := f.Write(ctx, last, 0); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for range 5 {
		if err := g.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, h := range []*File{f, g} {
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	r, a, err := reader.Open(ctx, f.Ino(), proto.AccessRead)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release(ctx)
	got := make([]byte, a.Size)
	if _, err := r.Read(ctx, got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, last) {
		t.Fatalf("read %d bytes starting %v, want 1000 bytes of %d", len(got), got[:min(4, len(got))], last[0])
	}
}

// TestFileCopyNotOffered: a file none of whose copy may be trusted
// offers none: one with a write that failed in the background (its bytes
// never reached the objects), and one written again through the handle
// that offered its copy (the copy is dropped before the new bytes can
// reach the objects, so a reader that opens meanwhile reads the objects).
func TestFileCopyNotOffered(t *testing.T) {
	ctx := context.Background()
	stor, writer, reader := copyClients(t)
	create := func(name string) *File { return createFile(t, writer, name) }
	storageReads := func(ino proto.Ino) (int, []byte) {
		t.Helper()
		before := stor.Calls(fake.OpRead)
		r, a, err := reader.Open(ctx, ino, proto.AccessRead)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Release(ctx)
		p := make([]byte, a.Size)
		if _, err := r.Read(ctx, p, 0); err != nil {
			t.Fatal(err)
		}
		return stor.Calls(fake.OpRead) - before, p
	}

	f := create("failed")
	fail := true
	stor.SetFault(func(op fake.Op, _ proto.TargetID, _ proto.ObjectID, _ uint64, _ int) error {
		if op == fake.OpWrite && fail {
			return syscall.EIO
		}
		return nil
	})
	if _, err := f.Write(ctx, bytes.Repeat([]byte("x"), 100), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Fsync(ctx); err == nil {
		t.Fatal("fsync after a failed write succeeded")
	}
	fail = false
	if _, err := f.Write(ctx, []byte("y"), 100); err != nil {
		t.Fatal(err)
	}
	if err := f.Release(ctx); err != nil {
		t.Fatal(err)
	}
	stor.SetFault(nil)
	if n, got := storageReads(f.Ino()); n == 0 {
		t.Errorf("a file whose write failed was read from a copy: %q", got)
	}

	g := create("again")
	if _, err := g.Write(ctx, []byte("first"), 0); err != nil {
		t.Fatal(err)
	}
	if err := g.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := storageReads(g.Ino()); n != 0 {
		t.Fatalf("no copy after the first close (%d storage reads)", n)
	}
	if _, err := g.Write(ctx, []byte("SECOND"), 0); err != nil {
		t.Fatal(err)
	}
	if n, got := storageReads(g.Ino()); n == 0 {
		t.Errorf("written again through the handle that offered it, the copy still answers opens: %q", got)
	}
	if err := g.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, got := storageReads(g.Ino()); string(got) != "SECOND" {
		t.Errorf("after the second close: %q", got)
	}
}

// slowCopies delays OpenCopy's answer until release is closed.
type slowCopies struct {
	*meta.Server
	started chan struct{}
	release chan struct{}
}

func (s slowCopies) OpenCopy(ctx context.Context, ino proto.Ino, want proto.Access) (proto.Attr, []byte, []byte, error) {
	a, cap, data, err := s.Server.OpenCopy(ctx, ino, want)
	close(s.started)
	<-s.release
	return a, cap, data, err
}

// TestFileCopyStaleInstall: a copy answered to an open whose reply was
// overtaken by this client's own rewrite of the file is not installed.
func TestFileCopyStaleInstall(t *testing.T) {
	ctx := context.Background()
	srv := newMetaServer(t)
	stor := fake.NewStorage()
	slow := slowCopies{srv, make(chan struct{}), make(chan struct{})}
	c := NewWithServices(slow, stor, Config{})
	defer c.Close()
	f := createFile(t, c, "f")
	if _, err := f.Write(ctx, []byte("AAAA"), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Fsync(ctx); err != nil {
		t.Fatal(err)
	}
	type opened struct {
		f   *File
		err error
	}
	done := make(chan opened, 1)
	go func() {
		r, _, err := c.Open(ctx, f.Ino(), proto.AccessRead)
		done <- opened{r, err}
	}()
	<-slow.started // the service answered "AAAA"
	if _, err := f.Write(ctx, []byte("BBBB"), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Fsync(ctx); err != nil {
		t.Fatal(err)
	}
	close(slow.release)
	o := <-done
	if o.err != nil {
		t.Fatal(o.err)
	}
	defer o.f.Release(ctx)
	p := make([]byte, 4)
	if _, err := f.Read(ctx, p, 0); err != nil || string(p) != "BBBB" {
		t.Fatalf("read back %q, %v: want BBBB", p, err)
	}
	if err := f.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
