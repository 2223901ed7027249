package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/storage/vfs"
)

var ctx = context.Background()

func openMem(t *testing.T, fs vfs.FS, opts TargetOptions) *Target {
	t.Helper()
	opts.FS = fs
	tg, err := OpenTarget("/t/target", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tg.Close() })
	return tg
}

func newMemFS(t *testing.T) *vfs.MemFS {
	fs := vfs.NewMem(1 << 40)
	if err := fs.MkdirAll("/t", 0o755); err != nil {
		t.Fatal(err)
	}
	return fs
}

func pattern(seed, n int) []byte {
	r := rand.New(rand.NewPCG(uint64(seed), 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32() | 1) // never zero, so holes are visible
	}
	return b
}

// model is the expected content of one object.
type model []byte

func (m *model) write(off int, b []byte) {
	if end := off + len(b); end > len(*m) {
		*m = append(*m, make([]byte, end-len(*m))...)
	}
	copy((*m)[off:], b)
}

func (m *model) truncate(n int) {
	if n < len(*m) {
		*m = (*m)[:n]
	} else {
		*m = append(*m, make([]byte, n-len(*m))...)
	}
}

func checkObject(t *testing.T, tg *Target, obj proto.ObjectID, want []byte) {
	t.Helper()
	got := make([]byte, len(want)+5000)
	n, err := tg.Read(ctx, obj, 0, got)
	if err != nil {
		t.Fatalf("read whole object: %v", err)
	}
	if n != len(want) || !bytes.Equal(got[:n], want) {
		t.Fatalf("object content differs: got %d bytes, want %d (first diff at %d)", n, len(want), firstDiff(got[:n], want))
	}
	// Unaligned sub-ranges, each verified on its own.
	r := rand.New(rand.NewPCG(uint64(len(want)), 2))
	for i := 0; i < 20 && len(want) > 0; i++ {
		off := r.IntN(len(want))
		l := r.IntN(3*BlockSize) + 1
		buf := make([]byte, l)
		n, err := tg.Read(ctx, obj, uint64(off), buf)
		if err != nil {
			t.Fatalf("read %d+%d: %v", off, l, err)
		}
		wantN := min(l, len(want)-off)
		if n != wantN || !bytes.Equal(buf[:n], want[off:off+wantN]) {
			t.Fatalf("read %d+%d: got %d bytes, differs at %d", off, l, n, firstDiff(buf[:n], want[off:off+wantN]))
		}
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func TestWriteRead(t *testing.T) {
	type w struct{ off, n int }
	tests := []struct {
		name   string
		writes []w
	}{
		{"one aligned block", []w{{0, BlockSize}}},
		{"small at start", []w{{0, 10}}},
		{"inside one block", []w{{100, 200}}},
		{"across a boundary", []w{{4000, 200}}},
		{"across many blocks", []w{{1000, 3*BlockSize + 5}}},
		{"sparse", []w{{5 * BlockSize, 100}}},
		{"sparse unaligned then fill", []w{{10000, 10}, {0, 5000}}},
		{"extend partial tail", []w{{0, 100}, {100, 100}, {150, 5000}}},
		{"overwrite middle", []w{{0, 4 * BlockSize}, {BlockSize + 7, 2*BlockSize - 14}}},
		{"ior-hard records", []w{{0, 47008}, {2 * 47008, 47008}, {47008, 47008}}},
		{"one byte per block edge", []w{{4095, 1}, {4096, 1}, {8191, 2}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tg := openMem(t, newMemFS(t), TargetOptions{})
			obj := proto.ObjectID{Ino: 42, Stripe: 3}
			var m model
			for i, wr := range tc.writes {
				data := pattern(i, wr.n)
				v, err := tg.Write(ctx, obj, uint64(wr.off), data)
				if err != nil {
					t.Fatal(err)
				}
				if v != uint64(i+1) {
					t.Fatalf("write %d: version %d", i, v)
				}
				m.write(wr.off, data)
				checkObject(t, tg, obj, m)
			}
		})
	}
}

func TestReadMissingAndPastEnd(t *testing.T) {
	tg := openMem(t, newMemFS(t), TargetOptions{})
	obj := proto.ObjectID{Ino: 1}
	buf := make([]byte, 100)
	if n, err := tg.Read(ctx, obj, 0, buf); n != 0 || err != nil {
		t.Fatalf("read missing = %d, %v", n, err)
	}
	if _, err := tg.Write(ctx, obj, 0, []byte("abc")); err != nil {
		t.Fatal(err)
	}
	if n, err := tg.Read(ctx, obj, 3, buf); n != 0 || err != nil {
		t.Fatalf("read at end = %d, %v", n, err)
	}
	if n, err := tg.Read(ctx, obj, 1, buf); n != 2 || err != nil || string(buf[:2]) != "bc" {
		t.Fatalf("short read = %d, %v, %q", n, err, buf[:n])
	}
	if v, err := tg.Write(ctx, obj, 0, nil); v != 1 || err != nil {
		t.Fatalf("empty write = %d, %v", v, err)
	}
	if _, err := tg.Write(ctx, obj, MaxObjectSize-1, []byte("ab")); !errors.Is(err, syscall.EFBIG) {
		t.Fatalf("write past limit: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := tg.Read(cctx, obj, 0, buf); !errors.Is(err, syscall.EINTR) {
		t.Fatalf("read with cancelled ctx: %v", err)
	}
}

func TestTruncate(t *testing.T) {
	tests := []struct {
		name  string
		sizes []int
	}{
		{"down mid block", []int{5000}},
		{"down aligned", []int{2 * BlockSize}},
		{"to zero", []int{0}},
		{"up leaves a hole", []int{20 * BlockSize}},
		{"down then up", []int{3000, 9000}},
		{"up then down", []int{50000, 10}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tg := openMem(t, newMemFS(t), TargetOptions{})
			obj := proto.ObjectID{Ino: 7}
			var m model
			data := pattern(1, 4*BlockSize+123)
			if _, err := tg.Write(ctx, obj, 0, data); err != nil {
				t.Fatal(err)
			}
			m.write(0, data)
			alloc := blocksFor(uint64(len(data)))
			for _, size := range tc.sizes {
				if err := tg.Truncate(ctx, obj, uint64(size)); err != nil {
					t.Fatal(err)
				}
				m.truncate(size)
				checkObject(t, tg, obj, m)
				alloc = min(alloc, blocksFor(uint64(size)))
				if u, _ := tg.Usage(); u.Used != alloc*BlockSize {
					t.Fatalf("used %d after truncate to %d", u.Used, size)
				}
			}
			// Writing after truncation: the tail and the hole stay right.
			more := pattern(9, 3000)
			off := len(m) + 1000
			if _, err := tg.Write(ctx, obj, uint64(off), more); err != nil {
				t.Fatal(err)
			}
			m.write(off, more)
			checkObject(t, tg, obj, m)
			// And after a restart.
			tg.Close()
			checkObject(t, openMem(t, tg.fs, TargetOptions{}), obj, m)
		})
	}
}

func TestTruncateMissing(t *testing.T) {
	tg := openMem(t, newMemFS(t), TargetOptions{})
	obj := proto.ObjectID{Ino: 9}
	if err := tg.Truncate(ctx, obj, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := tg.fs.Stat(tg.objPath(obj)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("truncate to 0 created the object: %v", err)
	}
	if err := tg.Truncate(ctx, obj, 10000); err != nil {
		t.Fatal(err)
	}
	checkObject(t, tg, obj, make([]byte, 10000))
	if u, _ := tg.Usage(); u.Used != 0 {
		t.Fatalf("a hole uses %d bytes", u.Used)
	}
}

func TestVersionsAndRestart(t *testing.T) {
	fs := newMemFS(t)
	tg := openMem(t, fs, TargetOptions{})
	obj := proto.ObjectID{Ino: 300, Stripe: 1}
	for i := 1; i <= 5; i++ {
		v, err := tg.Write(ctx, obj, uint64(i*100), []byte("x"))
		if err != nil || v != uint64(i) {
			t.Fatalf("write %d: version %d, %v", i, v, err)
		}
	}
	if err := tg.Truncate(ctx, obj, 50); err != nil {
		t.Fatal(err)
	}
	tg.Close()
	tg2 := openMem(t, fs, TargetOptions{})
	v, err := tg2.Write(ctx, obj, 0, []byte("y"))
	if err != nil || v != 7 {
		t.Fatalf("version after truncate and restart = %d, %v; want 7", v, err)
	}
	if u, _ := tg2.Usage(); u.Used != BlockSize || u.Objects != 1 {
		t.Fatalf("usage after restart = %+v", u)
	}
}

func TestRemove(t *testing.T) {
	tg := openMem(t, newMemFS(t), TargetOptions{})
	obj := proto.ObjectID{Ino: 5}
	if err := tg.Remove(ctx, obj); err != nil {
		t.Fatalf("remove missing: %v", err)
	}
	if _, err := tg.Write(ctx, obj, 0, pattern(1, 3*BlockSize)); err != nil {
		t.Fatal(err)
	}
	if u, _ := tg.Usage(); u.Used != 3*BlockSize || u.Objects != 1 {
		t.Fatalf("usage = %+v", u)
	}
	if err := tg.Remove(ctx, obj); err != nil {
		t.Fatal(err)
	}
	if u, _ := tg.Usage(); u.Used != 0 || u.Objects != 0 {
		t.Fatalf("usage after remove = %+v", u)
	}
	for _, p := range []string{tg.objPath(obj), tg.objPath(obj) + ".crc"} {
		if _, err := tg.fs.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s still there: %v", p, err)
		}
	}
	if n, err := tg.Read(ctx, obj, 0, make([]byte, 10)); n != 0 || err != nil {
		t.Fatalf("read removed = %d, %v", n, err)
	}
	if v, err := tg.Write(ctx, obj, 0, []byte("new")); v != 1 || err != nil {
		t.Fatalf("write after remove: version %d, %v", v, err)
	}
}

func TestSync(t *testing.T) {
	mem := newMemFS(t)
	fs := vfs.NewFaulty(mem)
	tg := openMem(t, fs, TargetOptions{})
	obj := proto.ObjectID{Ino: 5}
	if err := tg.Sync(ctx, obj); err != nil {
		t.Fatalf("sync missing: %v", err)
	}
	if _, err := tg.Write(ctx, obj, 0, []byte("x")); err != nil {
		t.Fatal(err)
	}
	fs.Inject(vfs.Rule{Ops: vfs.OpSync, Match: vfs.Suffix(".crc"), Err: syscall.EIO, Times: 1})
	if err := tg.Sync(ctx, obj); !errors.Is(err, syscall.EIO) {
		t.Fatalf("sync with failing sidecar fsync: %v", err)
	}
	if err := tg.Sync(ctx, obj); err != nil {
		t.Fatal(err)
	}
	// The new object's directory entry was synced too, exactly once.
	fs.Inject(vfs.Rule{Ops: vfs.OpSync, Match: vfs.Suffix("/05"), Err: syscall.EIO})
	if err := tg.Sync(ctx, obj); err != nil {
		t.Fatalf("directory synced again: %v", err)
	}
	obj2 := proto.ObjectID{Ino: 5 + 256}
	if _, err := tg.Write(ctx, obj2, 0, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := tg.Sync(ctx, obj2); !errors.Is(err, syscall.EIO) {
		t.Fatalf("new object's directory not synced: %v", err)
	}
}

// TestInterleavedWriters is IO500 ior-hard on one object: many writers, each
// writing 47,008-byte records at interleaved offsets, so that neighbouring
// records share edge blocks. Every byte must survive.
func TestInterleavedWriters(t *testing.T) {
	const (
		writers = 8
		records = 16
		rec     = 47008
	)
	tg := openMem(t, newMemFS(t), TargetOptions{})
	obj := proto.ObjectID{Ino: 1000}
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < records; i++ {
				idx := i*writers + w
				if _, err := tg.Write(ctx, obj, uint64(idx*rec), pattern(idx, rec)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var m model
	for idx := 0; idx < writers*records; idx++ {
		m.write(idx*rec, pattern(idx, rec))
	}
	checkObject(t, tg, obj, m)
	v, err := tg.Write(ctx, obj, 0, nil)
	if err != nil || v != writers*records {
		t.Fatalf("version %d, %v; want %d", v, err, writers*records)
	}
}

func TestCorruption(t *testing.T) {
	mem := newMemFS(t)
	log, logs := newLogger()
	tg := openMem(t, mem, TargetOptions{Logger: log})
	obj := proto.ObjectID{Ino: 77, Stripe: 2}
	data := pattern(3, 3*BlockSize)
	if _, err := tg.Write(ctx, obj, 0, data); err != nil {
		t.Fatal(err)
	}
	// Flip one byte of block 1 in the object file.
	f, err := mem.OpenFile(tg.objPath(obj), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{data[BlockSize+10] ^ 1}, BlockSize+10); err != nil {
		t.Fatal(err)
	}
	f.Close()
	buf := make([]byte, 3*BlockSize)
	if n, err := tg.Read(ctx, obj, 0, buf); !errors.Is(err, syscall.EIO) || !errors.Is(err, ErrCorrupt) || n != 0 {
		t.Fatalf("read of corrupt block = %d, %v; want EIO", n, err)
	}
	if n, err := tg.Read(ctx, obj, BlockSize+5, buf[:10]); !errors.Is(err, syscall.EIO) || n != 0 {
		t.Fatalf("unaligned read of corrupt block = %d, %v; want EIO", n, err)
	}
	line := logs.String()
	for _, want := range []string{"level=ERROR", "target=/t/target", "object=77.2", fmt.Sprintf("offset=%d", BlockSize)} {
		if !strings.Contains(line, want) {
			t.Fatalf("log lacks %q:\n%s", want, line)
		}
	}
	// The blocks around it still read.
	if n, err := tg.Read(ctx, obj, 0, buf[:BlockSize]); err != nil || !bytes.Equal(buf[:n], data[:BlockSize]) {
		t.Fatalf("read of good block = %d, %v", n, err)
	}
	// A partial write into the corrupt block refuses to bless it.
	if _, err := tg.Write(ctx, obj, BlockSize+1, []byte("zz")); !errors.Is(err, syscall.EIO) {
		t.Fatalf("read-modify-write of a corrupt block: %v", err)
	}
	// A full overwrite replaces it.
	if _, err := tg.Write(ctx, obj, BlockSize, data[BlockSize:2*BlockSize]); err != nil {
		t.Fatal(err)
	}
	checkObject(t, tg, obj, data)
}

func TestCorruptReadInjected(t *testing.T) {
	fs := vfs.NewFaulty(newMemFS(t))
	log, logs := newLogger()
	tg := openMem(t, fs, TargetOptions{Logger: log})
	obj := proto.ObjectID{Ino: 8}
	if _, err := tg.Write(ctx, obj, 0, pattern(1, 10000)); err != nil {
		t.Fatal(err)
	}
	fs.Inject(vfs.Rule{Ops: vfs.OpRead, Match: func(p string) bool { return !strings.HasSuffix(p, ".crc") }, CorruptRead: true, Times: 1})
	if _, err := tg.Read(ctx, obj, 0, make([]byte, 10000)); !errors.Is(err, syscall.EIO) {
		t.Fatalf("corrupted read: %v", err)
	}
	if !strings.Contains(logs.String(), "offset=0") {
		t.Fatalf("log: %s", logs.String())
	}
	if _, err := tg.Read(ctx, obj, 0, make([]byte, 10000)); err != nil {
		t.Fatalf("clean re-read: %v", err)
	}
}

func TestCorruptSidecar(t *testing.T) {
	mem := newMemFS(t)
	tg := openMem(t, mem, TargetOptions{})
	obj := proto.ObjectID{Ino: 8}
	if _, err := tg.Write(ctx, obj, 0, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	tg.Close()
	f, _ := mem.OpenFile(tg.objPath(obj)+".crc", os.O_RDWR, 0)
	f.WriteAt([]byte{0xff}, 9) // inside the version: the header CRC fails
	f.Close()
	tg2 := openMem(t, mem, TargetOptions{})
	if _, err := tg2.Read(ctx, obj, 0, make([]byte, 5)); !errors.Is(err, syscall.EIO) {
		t.Fatalf("read with a bad header: %v", err)
	}
	if err := mem.Remove(tg.objPath(obj) + ".crc"); err != nil {
		t.Fatal(err)
	}
	if _, err := tg2.Read(ctx, obj, 0, make([]byte, 5)); !errors.Is(err, syscall.EIO) {
		t.Fatalf("read without a sidecar: %v", err)
	}
	if err := tg2.Remove(ctx, obj); err != nil {
		t.Fatalf("remove of a broken object: %v", err)
	}
}

// notCRC matches data files only.
func notCRC(p string) bool { return strings.Contains(p, "/objects/") && !strings.HasSuffix(p, ".crc") }

// TestCrashBetweenChecksumAndData simulates kill -9 after the checksum
// entries were written and before the data was: the data write fails and so
// does everything after it, then the target restarts on the same files.
func TestCrashBetweenChecksumAndData(t *testing.T) {
	for _, tc := range []struct {
		name     string
		off, n   int
		newFirst bool // the write is the object's first
	}{
		{"full blocks", 0, 2 * BlockSize, false},
		{"unaligned", 1000, BlockSize + 50, false},
		{"extending", 2*BlockSize - 10, 3 * BlockSize, false},
		{"first write", 0, 5000, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := newMemFS(t)
			fs := vfs.NewFaulty(mem)
			tg := openMem(t, fs, TargetOptions{})
			obj := proto.ObjectID{Ino: 11}
			var m model
			if !tc.newFirst {
				old := pattern(1, 2*BlockSize+100)
				if _, err := tg.Write(ctx, obj, 0, old); err != nil {
					t.Fatal(err)
				}
				m.write(0, old)
			}
			// Crash: the data write fails and every write after it.
			fs.Inject(vfs.Rule{Ops: vfs.OpWrite, Match: notCRC, Err: syscall.EIO, Times: 1})
			fs.Inject(vfs.Rule{Ops: vfs.OpWrite | vfs.OpTruncate, Err: syscall.EIO, After: 1}) // the entries write passes
			if _, err := tg.Write(ctx, obj, uint64(tc.off), pattern(2, tc.n)); err == nil {
				t.Fatal("write succeeded through a crash")
			}
			tg.Close()
			fs.Reset()
			tg2 := openMem(t, mem, TargetOptions{})
			checkObject(t, tg2, obj, m)

			// Crash again on the same blocks, now with full-block writes
			// over entries that are {new, old}: the old data still reads.
			fs2 := vfs.NewFaulty(mem)
			tg2.Close()
			tg3 := openMem(t, fs2, TargetOptions{})
			fs2.Inject(vfs.Rule{Ops: vfs.OpWrite, Match: notCRC, Err: syscall.EIO, Times: 1})
			fs2.Inject(vfs.Rule{Ops: vfs.OpWrite | vfs.OpTruncate, Err: syscall.EIO, After: 1})
			if _, err := tg3.Write(ctx, obj, 0, pattern(3, 3*BlockSize)); err == nil {
				t.Fatal("write succeeded through a crash")
			}
			tg3.Close()
			tg4 := openMem(t, mem, TargetOptions{})
			checkObject(t, tg4, obj, m)

			// And a write that completes is read back.
			data := pattern(4, tc.n)
			if _, err := tg4.Write(ctx, obj, uint64(tc.off), data); err != nil {
				t.Fatal(err)
			}
			m.write(tc.off, data)
			checkObject(t, tg4, obj, m)
		})
	}
}

// TestCrashAfterData: the data was written but the entries were not
// collapsed nor the header updated. The new data reads.
func TestCrashAfterData(t *testing.T) {
	mem := newMemFS(t)
	fs := vfs.NewFaulty(mem)
	tg := openMem(t, fs, TargetOptions{})
	obj := proto.ObjectID{Ino: 12}
	if _, err := tg.Write(ctx, obj, 0, pattern(1, 3*BlockSize)); err != nil {
		t.Fatal(err)
	}
	fs.Inject(vfs.Rule{Ops: vfs.OpWrite, Match: vfs.Suffix(".crc"), After: 1, Err: syscall.EIO})
	data := pattern(2, 2*BlockSize+1)
	if _, err := tg.Write(ctx, obj, 100, data); err == nil {
		t.Fatal("write succeeded through a crash")
	}
	tg.Close()
	tg2 := openMem(t, mem, TargetOptions{})
	var m model
	m.write(0, pattern(1, 3*BlockSize))
	m.write(100, data)
	checkObject(t, tg2, obj, m)
}

// TestCrashDuringTruncate leaves checksum entries past the new end (the
// sidecar was not truncated); growing the object again must read zeros.
func TestCrashDuringTruncate(t *testing.T) {
	mem := newMemFS(t)
	fs := vfs.NewFaulty(mem)
	tg := openMem(t, fs, TargetOptions{})
	obj := proto.ObjectID{Ino: 13}
	data := pattern(1, 5*BlockSize)
	if _, err := tg.Write(ctx, obj, 0, data); err != nil {
		t.Fatal(err)
	}
	fs.Inject(vfs.Rule{Ops: vfs.OpTruncate | vfs.OpWrite, Match: vfs.Suffix(".crc"), Err: syscall.EIO})
	if err := tg.Truncate(ctx, obj, BlockSize); err == nil {
		t.Fatal("truncate succeeded through a crash")
	}
	tg.Close()
	tg2 := openMem(t, mem, TargetOptions{})
	if err := tg2.Truncate(ctx, obj, 5*BlockSize); err != nil {
		t.Fatal(err)
	}
	var m model
	m.write(0, data[:BlockSize])
	m.truncate(5 * BlockSize)
	checkObject(t, tg2, obj, m)
}

func TestCapacity(t *testing.T) {
	tg := openMem(t, newMemFS(t), TargetOptions{Capacity: 4 * BlockSize})
	a, b := proto.ObjectID{Ino: 1}, proto.ObjectID{Ino: 2}
	if _, err := tg.Write(ctx, a, 0, pattern(1, 3*BlockSize)); err != nil {
		t.Fatal(err)
	}
	// Two new blocks do not fit: nothing changes.
	_, err := tg.Write(ctx, b, 0, pattern(2, BlockSize+1))
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write over capacity: %v", err)
	}
	if _, err := tg.Write(ctx, a, 3*BlockSize-10, pattern(2, BlockSize+20)); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("extending write over capacity: %v", err)
	}
	if u, _ := tg.Usage(); u.Used != 3*BlockSize || u.Free != BlockSize || u.Total != 4*BlockSize {
		t.Fatalf("usage after refused write = %+v", u)
	}
	checkObject(t, tg, a, pattern(1, 3*BlockSize))
	if v, _ := tg.Write(ctx, a, 0, nil); v != 1 {
		t.Fatalf("refused write changed the version to %d", v)
	}
	// Overwrites and holes need no space.
	if _, err := tg.Write(ctx, a, 0, pattern(3, 3*BlockSize)); err != nil {
		t.Fatalf("overwrite at capacity: %v", err)
	}
	if err := tg.Truncate(ctx, b, 100*BlockSize); err != nil {
		t.Fatalf("truncate up at capacity: %v", err)
	}
	if _, err := tg.Write(ctx, b, 0, pattern(4, BlockSize)); err != nil {
		t.Fatal(err)
	}
	if _, err := tg.Write(ctx, b, BlockSize, []byte{1}); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write when full: %v", err)
	}
	// Removing frees space.
	if err := tg.Remove(ctx, a); err != nil {
		t.Fatal(err)
	}
	if _, err := tg.Write(ctx, b, BlockSize, pattern(5, 3*BlockSize)); err != nil {
		t.Fatalf("write after remove: %v", err)
	}
}

func TestDiskENOSPC(t *testing.T) {
	fs := vfs.NewFaulty(newMemFS(t))
	tg := openMem(t, fs, TargetOptions{})
	obj := proto.ObjectID{Ino: 1}
	if _, err := tg.Write(ctx, obj, 0, pattern(1, 100)); err != nil {
		t.Fatal(err)
	}
	remove := fs.Inject(vfs.Rule{Ops: vfs.OpWrite, Match: notCRC, Err: syscall.ENOSPC})
	if _, err := tg.Write(ctx, obj, 100, pattern(2, 3*BlockSize)); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("disk full: %v", err)
	}
	remove()
	checkObject(t, tg, obj, pattern(1, 100))
	if u, _ := tg.Usage(); u.Used != BlockSize {
		t.Fatalf("used %d after failed write", u.Used)
	}
}

func TestIdentity(t *testing.T) {
	fs := newMemFS(t)
	tg := openMem(t, fs, TargetOptions{})
	uuid := tg.UUID()
	if len(uuid) != 36 || tg.ID() != 0 {
		t.Fatalf("new target: uuid %q id %d", uuid, tg.ID())
	}
	if err := tg.SetID(7); err != nil {
		t.Fatal(err)
	}
	if err := tg.SetID(8); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("changing the id: %v", err)
	}
	tg.Close()
	tg2 := openMem(t, fs, TargetOptions{})
	if tg2.UUID() != uuid || tg2.ID() != 7 {
		t.Fatalf("after restart: uuid %q id %d", tg2.UUID(), tg2.ID())
	}
	other := vfs.NewMem(1 << 30)
	other.MkdirAll("/t", 0o755)
	if tg3 := openMem(t, other, TargetOptions{}); tg3.UUID() == uuid {
		t.Fatal("two targets share a uuid")
	}
	if _, err := OpenTarget("/missing/parent/t", TargetOptions{FS: fs}); err == nil {
		t.Fatal("target with a missing parent opened")
	}
}

func TestServerUnknownTarget(t *testing.T) {
	s := NewServer()
	tg := openMem(t, newMemFS(t), TargetOptions{})
	if err := s.Add(tg); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("add without id: %v", err)
	}
	tg.SetID(3)
	if err := s.Add(tg); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(ctx, 3, proto.ObjectID{Ino: 1}, 0, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Read(ctx, 4, proto.ObjectID{Ino: 1}, 0, make([]byte, 1)); !errors.Is(err, syscall.ESTALE) || !errors.Is(err, ErrUnknownTarget) {
		t.Fatalf("unknown target: %v", err)
	}
}
