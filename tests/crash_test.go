package tests

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/weft-fs/weft/internal/testcluster"
)

// TestCrash acknowledges data and namespace changes, SIGKILLs every weft
// process at once (meta, storage, mount), restarts them on the same
// directories and checks that everything acknowledged is there.
func TestCrash(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Servers: 2, Targets: 4})
	mnt := c.Mount(0)
	p := func(s string) string { return filepath.Join(mnt, s) }
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	type fileWant struct {
		data []byte
		mode os.FileMode
	}
	files := map[string]fileWant{}
	must(os.MkdirAll(p("a/b/c"), 0o755))
	must(os.Mkdir(p("s"), 0o755))
	weft(t, c, "setstripe", "-c", "4", "-S", "64K", p("s"))
	// Closed files, some fsynced, some striped, one large.
	for i := 0; i < 20; i++ {
		name := fmt.Sprintf("a/f%d", i)
		if i%2 == 1 {
			name = fmt.Sprintf("s/f%d", i)
		}
		data := pattern(uint32(100+i), 0, 1000+i*50_000)
		f, err := os.Create(p(name))
		must(err)
		_, err = f.Write(data)
		must(err)
		if i%3 == 0 {
			must(f.Sync())
		}
		must(f.Close())
		files[name] = fileWant{data, 0o644}
	}
	big := pattern(200, 0, 12<<20+1)
	must(os.WriteFile(p("s/big"), big, 0o644))
	files["s/big"] = fileWant{big, 0o644}
	// Overwrite the middle of a closed file and fsync without closing: an
	// fsync is an acknowledgement too.
	keep, err := os.OpenFile(p("a/f0"), os.O_RDWR, 0)
	must(err)
	defer keep.Close()
	patch := []byte("patched-and-fsynced")
	_, err = keep.WriteAt(patch, 100)
	must(err)
	must(keep.Sync())
	d0 := append([]byte(nil), files["a/f0"].data...)
	copy(d0[100:], patch)
	files["a/f0"] = fileWant{d0, 0o644}

	// Namespace changes.
	must(os.Rename(p("a/f2"), p("a/b/renamed")))
	files["a/b/renamed"] = files["a/f2"]
	delete(files, "a/f2")
	must(os.Remove(p("a/f4")))
	delete(files, "a/f4")
	must(os.Rename(p("a/f6"), p("a/f8"))) // replace
	files["a/f8"] = files["a/f6"]
	delete(files, "a/f6")
	must(os.Chmod(p("a/f10"), 0o600))
	files["a/f10"] = fileWant{files["a/f10"].data, 0o600}
	must(os.Truncate(p("s/f1"), 333))
	files["s/f1"] = fileWant{files["s/f1"].data[:333], 0o644}
	must(os.Truncate(p("s/f3"), 3<<20))
	files["s/f3"] = fileWant{append(files["s/f3"].data, make([]byte, 3<<20-len(files["s/f3"].data))...), 0o644}
	must(os.Link(p("a/f12"), p("a/b/c/link")))
	files["a/b/c/link"] = files["a/f12"]
	must(os.Symlink("../f14", p("a/b/sym")))
	must(os.Mkdir(p("gone"), 0o755))
	must(os.Remove(p("gone")))
	must(os.Mkdir(p("a/b/c/newdir"), 0o700))
	must(unix.Setxattr(p("a/f14"), "user.k", []byte("v1"), 0))
	must(unix.Setxattr(p("a/f14"), "user.gone", []byte("x"), 0))
	must(unix.Removexattr(p("a/f14"), "user.gone"))
	mt := unix.Timespec{Sec: 1_234_567_890, Nsec: 5}
	must(unix.UtimesNanoAt(unix.AT_FDCWD, p("a/f16"), []unix.Timespec{mt, mt}, 0))
	must(os.Chown(p("a/f18"), 65534, 65534))

	c.KillAll()
	c.Restart()
	mnt = c.Mount(0)

	for name, fw := range files {
		got, err := os.ReadFile(p(name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if !bytes.Equal(got, fw.data) {
			t.Errorf("%s: %s", name, firstDiff(got, fw.data))
		}
		if fi, err := os.Stat(p(name)); err == nil && fi.Mode() != fw.mode {
			t.Errorf("%s: mode %v, want %v", name, fi.Mode(), fw.mode)
		}
	}
	for _, gone := range []string{"a/f2", "a/f4", "a/f6", "gone"} {
		if _, err := os.Lstat(p(gone)); !errors.Is(err, syscall.ENOENT) {
			t.Errorf("%s should be gone: %v", gone, err)
		}
	}
	var names []string
	ents, _ := os.ReadDir(p("a"))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	wantNames := []string{"b", "f0", "f10", "f12", "f14", "f16", "f18", "f8"}
	if !slices.Equal(names, wantNames) {
		t.Errorf("readdir a: %v, want %v", names, wantNames)
	}
	if got, err := os.Readlink(p("a/b/sym")); got != "../f14" {
		t.Errorf("symlink: %q %v", got, err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(p("a/f12"), &st); err != nil || st.Nlink != 2 {
		t.Errorf("hard link count: %d %v", st.Nlink, err)
	}
	if fi, err := os.Stat(p("a/b/c/newdir")); err != nil || fi.Mode() != os.ModeDir|0o700 {
		t.Errorf("newdir: %v %v", fi, err)
	}
	if v, err := testcluster.Getxattr(p("a/f14"), "user.k"); string(v) != "v1" {
		t.Errorf("xattr: %q %v", v, err)
	}
	if _, err := testcluster.Getxattr(p("a/f14"), "user.gone"); !errors.Is(err, unix.ENODATA) {
		t.Errorf("removed xattr: %v", err)
	}
	var ust unix.Stat_t
	if err := unix.Stat(p("a/f16"), &ust); err != nil || ust.Mtim != mt || ust.Atim != mt {
		t.Errorf("times: atime %v mtime %v (%v), want %v", ust.Atim, ust.Mtim, err, mt)
	}
	if err := syscall.Stat(p("a/f18"), &st); err != nil || st.Uid != 65534 || st.Gid != 65534 {
		t.Errorf("owner: %d:%d %v", st.Uid, st.Gid, err)
	}
	if l, err := testcluster.GetLayout(p("s/big")); err != nil || l.StripeCount != 4 || l.StripeSize != 64<<10 {
		t.Errorf("layout after restart: %+v %v", l, err)
	}
	// And the file system still works.
	if err := os.WriteFile(p("after"), []byte("ok"), 0o644); err != nil {
		t.Errorf("write after restart: %v", err)
	}
}
