package vfs

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// conformance runs the same checks against every implementation.
func conformance(t *testing.T, fs FS, root string) {
	t.Helper()
	dir := filepath.Join(root, "a", "b")
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	name := filepath.Join(dir, "f")
	f, err := fs.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("hello"), 10); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 20)
	n, err := f.ReadAt(buf, 0)
	if n != 15 || err != io.EOF {
		t.Fatalf("ReadAt = %d, %v; want 15, EOF", n, err)
	}
	if string(buf[10:15]) != "hello" || buf[0] != 0 {
		t.Fatalf("content %q", buf[:n])
	}
	if n, err := f.ReadAt(buf, 100); n != 0 || err != io.EOF {
		t.Fatalf("ReadAt past end = %d, %v", n, err)
	}
	if err := f.Truncate(12); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(14); err != nil {
		t.Fatal(err)
	}
	n, _ = f.ReadAt(buf, 0)
	if n != 14 || string(buf[10:14]) != "he\x00\x00" {
		t.Fatalf("after truncate down/up: %q", buf[:n])
	}
	fi, err := f.Stat()
	if err != nil || fi.Size() != 14 {
		t.Fatalf("Stat = %v, %v", fi, err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644); !errors.Is(err, syscall.EEXIST) {
		t.Fatalf("O_EXCL on existing: %v", err)
	}
	ro, err := fs.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ro.WriteAt([]byte("x"), 0); err == nil {
		t.Fatal("write on read-only file succeeded")
	}
	ro.Close()
	d, err := fs.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	d.Close()
	if err := fs.Rename(name, filepath.Join(dir, "g")); err != nil {
		t.Fatal(err)
	}
	names, err := fs.ReadDir(dir)
	if err != nil || len(names) != 1 || names[0] != "g" {
		t.Fatalf("ReadDir = %v, %v", names, err)
	}
	if _, err := fs.Stat(name); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Stat of renamed-away: %v", err)
	}
	if _, err := fs.Open(name); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("Open of missing: %v", err)
	}
	if err := fs.Remove(filepath.Join(dir, "g")); err != nil {
		t.Fatal(err)
	}
	if err := fs.Remove(filepath.Join(dir, "g")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("second Remove: %v", err)
	}
	// Remove removes files only: an (empty) directory stays.
	sub := filepath.Join(dir, "sub")
	if err := fs.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := fs.Remove(sub); err == nil {
		t.Fatalf("Remove of a directory succeeded")
	}
	if fi, err := fs.Stat(sub); err != nil || !fi.IsDir() {
		t.Fatalf("the directory after Remove: %v, %v", fi, err)
	}
	if _, err := fs.Create(filepath.Join(root, "nodir", "f")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Create in missing dir: %v", err)
	}
	u, err := fs.Statfs(root)
	if err != nil || u.Total == 0 || u.Free > u.Total {
		t.Fatalf("Statfs = %+v, %v", u, err)
	}
}

func TestOS(t *testing.T)  { conformance(t, Default, t.TempDir()) }
func TestMem(t *testing.T) { conformance(t, NewMem(1<<30), "/x") }
func TestFaultyPassThrough(t *testing.T) {
	conformance(t, NewFaulty(NewMem(1<<30)), "/x")
}

func TestFaulty(t *testing.T) {
	mem := NewMem(1 << 30)
	fs := NewFaulty(mem)
	if err := fs.MkdirAll("/d", 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := fs.Create("/d/obj")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	tests := []struct {
		name  string
		rule  Rule
		calls int   // WriteAt calls made
		fails []int // indexes of calls that must fail
	}{
		{"every write", Rule{Ops: OpWrite, Err: syscall.ENOSPC}, 3, []int{0, 1, 2}},
		{"after one", Rule{Ops: OpWrite, Err: syscall.ENOSPC, After: 1}, 3, []int{1, 2}},
		{"once", Rule{Ops: OpWrite, Err: syscall.ENOSPC, Times: 1}, 3, []int{0}},
		{"after one once", Rule{Ops: OpWrite, Err: syscall.ENOSPC, After: 1, Times: 1}, 3, []int{1}},
		{"other path", Rule{Ops: OpWrite, Err: syscall.ENOSPC, Match: Suffix(".crc")}, 2, nil},
		{"other op", Rule{Ops: OpSync | OpRead, Err: syscall.ENOSPC}, 2, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			remove := fs.Inject(tc.rule)
			defer remove()
			for i := 0; i < tc.calls; i++ {
				_, err := f.WriteAt([]byte{1}, 0)
				want := false
				for _, j := range tc.fails {
					want = want || i == j
				}
				if got := err != nil; got != want {
					t.Fatalf("call %d: err %v, want failure %v", i, err, want)
				}
				if err != nil && !errors.Is(err, syscall.ENOSPC) {
					t.Fatalf("call %d: %v does not match ENOSPC", i, err)
				}
			}
		})
	}

	remove := fs.Inject(Rule{Ops: OpRead, CorruptRead: true, Times: 1})
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, 0); err != nil || b[0] != 0xfe {
		t.Fatalf("corrupt read: %v %x", err, b[0])
	}
	if _, err := f.ReadAt(b, 0); err != nil || b[0] != 1 {
		t.Fatalf("second read: %v %x", err, b[0])
	}
	if fs.Fired() != 1 {
		t.Fatalf("Fired = %d", fs.Fired())
	}
	remove()
	fs.Inject(Rule{Ops: OpOpen, Err: syscall.EIO, Match: Contains("/d/")})
	if _, err := fs.Open("/d/obj"); !errors.Is(err, syscall.EIO) {
		t.Fatalf("open: %v", err)
	}
	fs.Reset()
	if g, err := fs.Open("/d/obj"); err != nil {
		t.Fatal(err)
	} else {
		g.Close()
	}
}
