package storage

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/storage/vfs"
)

// countingFS counts the bytes read from sidecars, on the real disk.
type countingFS struct {
	vfs.FS
	crcRead atomic.Int64
	// gate, if set, is called before a sidecar's NextData (a truncate
	// counting the blocks it frees); tests block in it.
	gate atomic.Pointer[func()]
}

func (c *countingFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.HasSuffix(name, ".crc") {
		return f, err
	}
	return &countingFile{File: f, fs: c}, nil
}

func (c *countingFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := c.FS.OpenFile(name, flag, perm)
	return c.wrap(name, f, err)
}

func (c *countingFS) Open(name string) (vfs.File, error) {
	f, err := c.FS.Open(name)
	return c.wrap(name, f, err)
}

type countingFile struct {
	vfs.File
	fs *countingFS
}

func (f *countingFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.File.ReadAt(p, off)
	f.fs.crcRead.Add(int64(n))
	return n, err
}

func (f *countingFile) NextData(off int64) (int64, int64, error) {
	if g := f.fs.gate.Load(); g != nil {
		(*g)()
	}
	return vfs.NextData(f.File, off)
}

// TestTruncateHugeSparse: truncating a 1 TiB sparse object reads only the
// sidecar's few data extents (not the 2 GiB of entries its size spans),
// keeps the space accounting and the data right, and sizes past
// MaxObjectSize fail with EFBIG.
func TestTruncateHugeSparse(t *testing.T) {
	fs := &countingFS{FS: vfs.Default}
	tg, err := OpenTarget(t.TempDir()+"/target", TargetOptions{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	const tib = 1 << 40
	obj := proto.ObjectID{Ino: 42}
	blk := bytes.Repeat([]byte{0xab}, BlockSize)
	valid := map[uint64]uint64{} // block offset -> bytes of data left in it
	for _, off := range []uint64{0, tib / 4, tib - BlockSize} {
		if _, err := tg.Write(ctx, obj, off, blk); err != nil {
			t.Fatal(err)
		}
		valid[off] = BlockSize
	}
	used := func() uint64 {
		u, err := tg.Usage()
		if err != nil {
			t.Fatal(err)
		}
		return u.Used
	}
	if u := used(); u != 3*BlockSize {
		t.Fatalf("used %d, want 3 blocks", u)
	}
	// A sidecar data extent is a few pages at most; a scan of the 1 TiB
	// object's entries would read 2 GiB.
	const budget = 1 << 20
	for _, tc := range []struct {
		size     uint64
		wantUsed uint64
	}{
		{tib / 2, 2 * BlockSize},     // drops the last block
		{tib, 2 * BlockSize},         // grows: a hole
		{tib/4 + 100, 2 * BlockSize}, // cuts inside the middle block's span, after its data
		{tib/4 + 10, 2 * BlockSize},  // the middle block becomes a partial tail
		{tib, 2 * BlockSize},         // grows again
		{BlockSize, BlockSize},       // drops the middle block
		{0, 0},
	} {
		fs.crcRead.Store(0)
		if err := tg.Truncate(ctx, obj, tc.size); err != nil {
			t.Fatalf("truncate to %d: %v", tc.size, err)
		}
		if n := fs.crcRead.Load(); n > budget {
			t.Fatalf("truncate to %d read %d sidecar bytes", tc.size, n)
		}
		if u := used(); u != tc.wantUsed {
			t.Fatalf("after truncate to %d: used %d, want %d", tc.size, u, tc.wantUsed)
		}
		// What is left reads back right: data where written and not
		// cut off since, zeros in holes and where cut off, nothing past
		// the end.
		for off, v := range valid {
			valid[off] = min(v, tc.size-min(tc.size, off))
		}
		for off, v := range valid {
			got := make([]byte, BlockSize)
			n, err := tg.Read(ctx, obj, off, got)
			if err != nil {
				t.Fatalf("size %d: read at %d: %v", tc.size, off, err)
			}
			if want := min(BlockSize, tc.size-min(tc.size, off)); uint64(n) != want {
				t.Fatalf("size %d: read at %d gave %d bytes, want %d", tc.size, off, n, want)
			}
			want := append(bytes.Repeat([]byte{0xab}, int(v)), make([]byte, n-int(v))...)
			if !bytes.Equal(got[:n], want) {
				t.Fatalf("size %d: block at %d reads %x..., want %d bytes of data then zeros", tc.size, off, got[:16], v)
			}
		}
	}
	for _, size := range []uint64{MaxObjectSize + 1, 1 << 50, ^uint64(0)} {
		if err := tg.Truncate(ctx, obj, size); !errors.Is(err, syscall.EFBIG) {
			t.Fatalf("truncate to %d: %v, want EFBIG", size, err)
		}
	}
	if err := tg.Truncate(ctx, obj, MaxObjectSize); err != nil {
		t.Fatalf("truncate to MaxObjectSize: %v", err)
	}
}

// TestTruncateDoesNotBlockOthers: while a truncate of a huge sparse object
// is in the middle of its work (held there by the test), reads and writes
// of other objects (in other lock stripes) go on: the truncate holds only
// its object's lock, nothing target-wide.
func TestTruncateDoesNotBlockOthers(t *testing.T) {
	fs := &countingFS{FS: vfs.Default}
	tg, err := OpenTarget(t.TempDir()+"/target", TargetOptions{FS: fs, MaxOpen: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	big := proto.ObjectID{Ino: 1}
	if _, err := tg.Write(ctx, big, 1<<40-BlockSize, []byte("end")); err != nil {
		t.Fatal(err)
	}
	if _, err := tg.Write(ctx, big, 0, []byte("start")); err != nil {
		t.Fatal(err)
	}
	// Other objects, in other lock stripes than big's.
	var others []proto.ObjectID
	for ino := proto.Ino(2); len(others) < 4; ino++ {
		o := proto.ObjectID{Ino: ino}
		if tg.lockFor(o) != tg.lockFor(big) {
			others = append(others, o)
		}
	}
	entered, release := make(chan struct{}), make(chan struct{})
	gate := func() {
		close(entered)
		<-release
	}
	fs.gate.Store(&gate)
	done := make(chan error, 1)
	go func() { done <- tg.Truncate(ctx, big, 1<<30) }()
	<-entered
	fs.gate.Store(nil)
	// With MaxOpen 2 the others also evict handles from the cache.
	for _, o := range others {
		if _, err := tg.Write(ctx, o, 0, []byte("other")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 5)
		if n, err := tg.Read(ctx, o, 0, buf); err != nil || string(buf[:n]) != "other" {
			t.Fatalf("read of %v during the truncate: %q %v", o, buf[:n], err)
		}
	}
	select {
	case err := <-done:
		t.Fatalf("the truncate finished while held: %v", err)
	default:
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if n, err := tg.Read(ctx, big, 0, buf); err != nil || string(buf[:n]) != "start" {
		t.Fatalf("big object after the truncate: %q %v", buf[:n], err)
	}
}
