package fuse

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/weft-fs/weft/client"
	"github.com/weft-fs/weft/health"
	"github.com/weft-fs/weft/internal/fake"
	"github.com/weft-fs/weft/layout"
	"github.com/weft-fs/weft/proto"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type backend struct {
	meta  *fake.Meta
	store *fake.Storage
}

func newBackend(stripe uint64, count int32) *backend {
	store := fake.NewStorage()
	meta := fake.NewMeta([]proto.TargetID{1, 2, 3, 4}, store)
	meta.SetDefaultLayout(layout.Layout{StripeSize: stripe, StripeCount: count})
	return &backend{meta: meta, store: store}
}

// mount mounts the backend in a fresh temp dir and unmounts in Cleanup.
func (b *backend) mount(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Fatalf("no /dev/fuse: %v", err)
	}
	dir := t.TempDir()
	cl := client.NewWithServices(b.meta, b.store, client.Config{Timeout: 5 * time.Second})
	srv, err := Mount(cl, Config{Mountpoint: dir, AllowOther: true})
	if err != nil {
		_ = cl.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Shutdown(0); err != nil {
			t.Errorf("unmount: %v", err)
		}
		_ = cl.Close()
	})
	return dir
}

func errnoOf(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return 0
}

func TestBasicOps(t *testing.T) {
	mnt := newBackend(64<<10, 2).mount(t)
	p := func(s string) string { return filepath.Join(mnt, s) }

	if err := os.Mkdir(p("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p("d/f"), []byte("hello world"), 0o640); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(p("d/f"))
	if err != nil || st.Size() != 11 || st.Mode().Perm() != 0o640 {
		t.Fatalf("stat: %v %v", st, err)
	}
	if got, _ := os.ReadFile(p("d/f")); string(got) != "hello world" {
		t.Fatalf("read %q", got)
	}
	// O_EXCL.
	if _, err := os.OpenFile(p("d/f"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600); errnoOf(err) != syscall.EEXIST {
		t.Fatalf("O_EXCL on existing: %v", err)
	}
	// O_APPEND.
	f, err := os.OpenFile(p("d/f"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"!", "?"} {
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(p("d/f")); string(got) != "hello world!?" {
		t.Fatalf("after append %q", got)
	}
	// Rename, link, symlink.
	if err := os.Rename(p("d/f"), p("d/g")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(p("d/g"), p("h")); err != nil {
		t.Fatal(err)
	}
	sg, _ := os.Stat(p("d/g"))
	sh, _ := os.Stat(p("h"))
	if sg.Sys().(*syscall.Stat_t).Ino != sh.Sys().(*syscall.Stat_t).Ino || sh.Sys().(*syscall.Stat_t).Nlink != 2 {
		t.Fatalf("hard link: %+v %+v", sg.Sys(), sh.Sys())
	}
	if err := os.Symlink("d/g", p("s")); err != nil {
		t.Fatal(err)
	}
	if tgt, err := os.Readlink(p("s")); err != nil || tgt != "d/g" {
		t.Fatalf("readlink %q %v", tgt, err)
	}
	if got, _ := os.ReadFile(p("s")); string(got) != "hello world!?" {
		t.Fatalf("through symlink %q", got)
	}
	if err := unix.Renameat2(unix.AT_FDCWD, p("h"), unix.AT_FDCWD, p("s"), unix.RENAME_NOREPLACE); err != syscall.EEXIST {
		t.Fatalf("RENAME_NOREPLACE: %v", err)
	}
	// Mknod fifo.
	if err := syscall.Mkfifo(p("fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Lstat(p("fifo")); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("fifo: %v %v", st, err)
	}
	// chmod, chown, utimes with UTIME_OMIT.
	if err := os.Chmod(p("d/g"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p("d/g"), 1234, 5678); err != nil {
		t.Fatal(err)
	}
	ts := []unix.Timespec{{Sec: 1000, Nsec: 5}, {Nsec: unix.UTIME_OMIT}}
	before, _ := os.Stat(p("d/g"))
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, p("d/g"), ts, 0); err != nil {
		t.Fatal(err)
	}
	st, _ = os.Stat(p("d/g"))
	sys := st.Sys().(*syscall.Stat_t)
	if st.Mode().Perm() != 0o600 || sys.Uid != 1234 || sys.Gid != 5678 || sys.Atim.Sec != 1000 || sys.Atim.Nsec != 5 || !st.ModTime().Equal(before.ModTime()) {
		t.Fatalf("after chmod/chown/utimes: %v %+v", st.Mode(), sys)
	}
	// Truncate by path and by handle.
	if err := os.Truncate(p("d/g"), 5); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(p("d/g")); string(got) != "hello" {
		t.Fatalf("after truncate %q", got)
	}
	f, _ = os.OpenFile(p("d/g"), os.O_RDWR, 0)
	if _, err := f.WriteAt([]byte("XY"), 8); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(9); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(p("d/g")); string(got) != "hello\x00\x00\x00X" {
		t.Fatalf("after ftruncate %q", got)
	}
	// Readdir.
	ents, err := os.ReadDir(mnt)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, ",") != "d,fifo,h,s" {
		t.Fatalf("readdir %v", names)
	}
	// Unlink, rmdir.
	if err := os.Remove(p("d")); errnoOf(err) != syscall.ENOTEMPTY {
		t.Fatalf("rmdir non-empty: %v", err)
	}
	for _, n := range []string{"d/g", "d", "h", "s", "fifo"} {
		if err := os.Remove(p(n)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(p("d")); !os.IsNotExist(err) {
		t.Fatalf("stat removed dir: %v", err)
	}
	// Statfs.
	var sfs syscall.Statfs_t
	if err := syscall.Statfs(mnt, &sfs); err != nil || sfs.Blocks*uint64(sfs.Bsize) != 4<<40 {
		t.Fatalf("statfs %+v %v", sfs, err)
	}
}

func TestUnlinkedOpenFile(t *testing.T) {
	mnt := newBackend(64<<10, 2).mount(t)
	name := filepath.Join(mnt, "f")
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("alive"); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(name); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(" still"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 20)
	n, err := f.ReadAt(buf, 0)
	if string(buf[:n]) != "alive still" {
		t.Fatalf("read after unlink %q %v", buf[:n], err)
	}
	if st, err := f.Stat(); err != nil || st.Size() != 11 {
		t.Fatalf("fstat after unlink: %v %v", st, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestXattrs(t *testing.T) {
	b := newBackend(64<<10, 2)
	mnt := b.mount(t)
	d := filepath.Join(mnt, "d")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(d, "f")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(f, "user.color", []byte("blue"), 0); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if n, err := unix.Getxattr(f, "user.color", buf); err != nil || string(buf[:n]) != "blue" {
		t.Fatalf("getxattr %q %v", buf[:n], err)
	}
	if _, err := unix.Getxattr(f, "user.color", buf[:2]); err != unix.ERANGE {
		t.Fatalf("small buffer: %v", err)
	}
	if _, err := unix.Getxattr(f, "security.capability", buf); err != unix.ENODATA {
		t.Fatalf("security.capability: %v", err)
	}
	if err := unix.Setxattr(f, "trusted.x", []byte("1"), 0); err != unix.EOPNOTSUPP {
		t.Fatalf("trusted: %v", err)
	}
	if err := unix.Setxattr(f, "user.weft.other", []byte("1"), 0); err != unix.EPERM {
		t.Fatalf("user.weft.other: %v", err)
	}
	n, err := unix.Listxattr(f, buf)
	if err != nil || string(buf[:n]) != "user.color\x00" {
		t.Fatalf("listxattr %q %v", buf[:n], err)
	}
	if err := unix.Removexattr(f, "user.color"); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Getxattr(f, "user.color", buf); err != unix.ENODATA {
		t.Fatalf("after remove: %v", err)
	}

	// Layout of the file, and of a directory (default, then set).
	var lj layoutJSON
	getJSON := func(path, name string, v any) {
		t.Helper()
		big := make([]byte, 4096)
		n, err := unix.Getxattr(path, name, big)
		if err != nil {
			t.Fatalf("getxattr %s %s: %v", path, name, err)
		}
		if err := json.Unmarshal(big[:n], v); err != nil {
			t.Fatalf("%s: %v: %q", name, err, big[:n])
		}
	}
	getJSON(f, xattrLayout, &lj)
	if lj.StripeSize != 64<<10 || lj.StripeCount != 2 || len(lj.Targets) != 2 {
		t.Fatalf("file layout %+v", lj)
	}
	getJSON(d, xattrLayout, &lj)
	if lj.StripeSize != layout.DefaultStripeSize {
		t.Fatalf("dir default layout %+v", lj)
	}
	if err := unix.Setxattr(d, xattrLayout, []byte(`{"stripe_size":131072,"stripe_count":3}`), 0); err != nil {
		t.Fatal(err)
	}
	g := filepath.Join(d, "g")
	if err := os.WriteFile(g, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	getJSON(g, xattrLayout, &lj)
	if lj.StripeSize != 128<<10 || lj.StripeCount != 3 || len(lj.Targets) != 3 {
		t.Fatalf("inherited layout %+v", lj)
	}
	// An empty file's layout can be set; a written one's cannot.
	if err := unix.Setxattr(f, xattrLayout, []byte(`{"stripe_size":65536,"stripe_count":4}`), 0); err != nil {
		t.Fatal(err)
	}
	getJSON(f, xattrLayout, &lj)
	if lj.StripeCount != 4 {
		t.Fatalf("set file layout %+v", lj)
	}
	if err := unix.Setxattr(g, xattrLayout, []byte(`{"stripe_size":65536,"stripe_count":4}`), 0); err == nil {
		t.Fatal("setting the layout of a written file succeeded")
	}
	if err := unix.Setxattr(f, xattrLayout, []byte(`not json`), 0); err != unix.EINVAL {
		t.Fatalf("bad json: %v", err)
	}
	var df []health.Target
	getJSON(mnt, xattrDF, &df)
	if len(df) != 4 || df[0].Addr == "" || !df[0].Up {
		t.Fatalf("df %+v", df)
	}
}

// TestStripedFile writes through the mount and checks the data landed on
// three targets and reads back intact.
func TestStripedFile(t *testing.T) {
	b := newBackend(64<<10, 3)
	mnt := b.mount(t)
	data := make([]byte, 3<<20+12345)
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	name := filepath.Join(mnt, "big")
	if err := os.WriteFile(name, data, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(name)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back: equal=%v err=%v", bytes.Equal(got, data), err)
	}
	a, err := b.meta.Lookup(context.Background(), proto.RootIno, "big")
	if err != nil || a.Size != uint64(len(data)) || len(a.Layout.Targets) != 3 {
		t.Fatalf("meta: %+v %v", a, err)
	}
	for s, tgt := range a.Layout.Targets {
		obj, ok := b.store.Object(tgt, proto.ObjectID{Ino: a.Ino, Stripe: uint32(s)})
		if !ok || uint64(len(obj)) != a.Layout.ObjectSize(a.Size, s) {
			t.Fatalf("stripe %d on target %d: %d bytes", s, tgt, len(obj))
		}
	}
	// Random reads at unaligned offsets.
	f, _ := os.Open(name)
	defer f.Close()
	for range 50 {
		off := rng.IntN(len(data))
		n := 1 + rng.IntN(300<<10)
		buf := make([]byte, n)
		m, _ := f.ReadAt(buf, int64(off))
		if !bytes.Equal(buf[:m], data[off:min(len(data), off+n)]) {
			t.Fatalf("pread %d@%d differs", n, off)
		}
	}
}

// TestCloseToOpen: after a writer on mount A closes, a reader on mount B
// that opens afterwards sees the new data and size, even with B's caches
// warm and within the attribute timeout.
func TestCloseToOpen(t *testing.T) {
	b := newBackend(64<<10, 2)
	ma, mb := b.mount(t), b.mount(t)
	pa, pb := filepath.Join(ma, "f"), filepath.Join(mb, "f")
	for i, size := range []int{1000, 5000, 200000, 300, 70000} {
		want := bytes.Repeat([]byte{byte('a' + i)}, size)
		if err := os.WriteFile(pa, want, 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(pb) // B's page cache and attrs now warm
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("round %d: B read %d bytes (want %d) err=%v", i, len(got), size, err)
		}
		if st, err := os.Stat(pb); err != nil || st.Size() != int64(size) {
			t.Fatalf("round %d: B size %v %v", i, st.Size(), err)
		}
	}
	// A file created on A is visible on B at once (no negative caching).
	if _, err := os.Stat(filepath.Join(mb, "new")); !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ma, "new"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(mb, "new")); err != nil || string(got) != "x" {
		t.Fatalf("new file on B: %q %v", got, err)
	}
	// fsync also publishes, while A keeps the file open.
	f, err := os.OpenFile(pa, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("tail"); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(pb)
	if err != nil || len(got) != 70004 || string(got[70000:]) != "tail" {
		t.Fatalf("after fsync on A: B read %d bytes, err=%v", len(got), err)
	}
}

// TestDisjointInterleaved: two mounts write alternating 47,008-byte blocks
// of one file concurrently (IO500 ior-hard); every byte must survive.
func TestDisjointInterleaved(t *testing.T) {
	const block, blocks = 47008, 96
	b := newBackend(64<<10, 4)
	mnts := []string{b.mount(t), b.mount(t)}
	if err := os.WriteFile(filepath.Join(mnts[0], "shared"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	fill := func(i int) []byte {
		p := make([]byte, block)
		for j := range p {
			p[j] = byte(i*7 + j*13 + j>>8)
		}
		return p
	}
	var wg sync.WaitGroup
	for w, m := range mnts {
		wg.Go(func() {
			f, err := os.OpenFile(filepath.Join(m, "shared"), os.O_WRONLY, 0)
			if err != nil {
				t.Error(err)
				return
			}
			for i := w; i < blocks; i += 2 {
				if _, err := f.WriteAt(fill(i), int64(i)*block); err != nil {
					t.Error(err)
				}
			}
			if err := f.Close(); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for _, m := range mnts {
		got, err := os.ReadFile(filepath.Join(m, "shared"))
		if err != nil || len(got) != block*blocks {
			t.Fatalf("%s: read %d bytes, err=%v", m, len(got), err)
		}
		for i := range blocks {
			if !bytes.Equal(got[i*block:(i+1)*block], fill(i)) {
				t.Fatalf("%s: block %d corrupted", m, i)
			}
		}
	}
}

// TestLargeDir lists a directory of 100,000 entries (created directly in the
// backend) through the mount.
func TestLargeDir(t *testing.T) {
	b := newBackend(64<<10, 1)
	ctx := context.Background()
	d, err := b.meta.Mkdir(ctx, proto.RootIno, "big", 0o755, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	const n = 100000
	for i := range n {
		if _, err := b.meta.Create(ctx, proto.CreateIn{Parent: d.Ino, Name: fmt.Sprintf("f%06d", i), Mode: syscall.S_IFREG | 0o644}); err != nil {
			t.Fatal(err)
		}
	}
	mnt := b.mount(t)
	f, err := os.Open(filepath.Join(mnt, "big"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != n {
		t.Fatalf("listed %d entries, want %d", len(names), n)
	}
	sort.Strings(names)
	for i, name := range names {
		if name != fmt.Sprintf("f%06d", i) {
			t.Fatalf("entry %d is %q", i, name)
		}
	}
}

// TestWriteErrorReportedAtClose: a failing storage target makes close()
// fail, since data is acknowledged only there.
func TestWriteErrorReportedAtClose(t *testing.T) {
	b := newBackend(64<<10, 2)
	mnt := b.mount(t)
	b.store.SetFault(func(op fake.Op, _ proto.TargetID, _ proto.ObjectID, _ uint64, _ int) error {
		if op == fake.OpWrite {
			return syscall.ENOSPC
		}
		return nil
	})
	f, err := os.Create(filepath.Join(mnt, "f"))
	if err != nil {
		t.Fatal(err)
	}
	_, werr := f.Write(make([]byte, 100))
	cerr := f.Close()
	if errnoOf(werr) != syscall.ENOSPC && errnoOf(cerr) != syscall.ENOSPC {
		t.Fatalf("write %v, close %v: want ENOSPC from one of them", werr, cerr)
	}
}
