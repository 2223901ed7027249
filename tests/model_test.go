package tests

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
	"pgregory.net/rapid"

	"github.com/weft-fs/weft/internal/testcluster"
)

// minode is a file or directory of the model. Hard links share one minode.
type minode struct {
	dir  bool
	data []byte
	// mtime was set explicitly (utimensat, futimens) and nothing changed
	// the data since: stat must show exactly it.
	mtime    int64
	mtimeSet bool
}

// fsModel is the in-memory file system the real mount is compared with:
// paths relative to the test's root, "" being the root itself.
type fsModel struct {
	ents map[string]*minode
}

func parentOf(p string) string {
	d := filepath.Dir(p)
	if d == "." {
		return ""
	}
	return d
}

// resolveParent is the error the kernel gives while walking to p's parent.
func (m *fsModel) resolveParent(p string) syscall.Errno {
	parts := strings.Split(p, "/")
	for i := 1; i < len(parts); i++ {
		n := m.ents[strings.Join(parts[:i], "/")]
		if n == nil {
			return syscall.ENOENT
		}
		if !n.dir {
			return syscall.ENOTDIR
		}
	}
	return 0
}

func (m *fsModel) nonEmpty(p string) bool {
	for q := range m.ents {
		if strings.HasPrefix(q, p+"/") {
			return true
		}
	}
	return false
}

func (m *fsModel) nlink(n *minode) int {
	c := 0
	for _, o := range m.ents {
		if o == n {
			c++
		}
	}
	return c
}

func (m *fsModel) create(p string) syscall.Errno {
	if e := m.resolveParent(p); e != 0 {
		return e
	}
	if m.ents[p] != nil {
		return syscall.EEXIST
	}
	m.ents[p] = &minode{}
	return 0
}

func (m *fsModel) file(p string) (*minode, syscall.Errno) {
	if e := m.resolveParent(p); e != 0 {
		return nil, e
	}
	n := m.ents[p]
	if n == nil {
		return nil, syscall.ENOENT
	}
	if n.dir {
		return nil, syscall.EISDIR
	}
	return n, 0
}

func (m *fsModel) write(p string, off int, data []byte) syscall.Errno {
	n, e := m.file(p)
	if e != 0 {
		return e
	}
	if len(data) == 0 {
		return 0 // a zero-length write does not extend the file
	}
	n.mtimeSet = false
	if end := off + len(data); end > len(n.data) {
		n.data = append(n.data, make([]byte, end-len(n.data))...)
	}
	copy(n.data[off:], data)
	return 0
}

func (m *fsModel) truncate(p string, size int) syscall.Errno {
	n, e := m.file(p)
	if e != 0 {
		return e
	}
	n.mtimeSet = false
	if size < len(n.data) {
		n.data = n.data[:size]
	} else {
		n.data = append(n.data, make([]byte, size-len(n.data))...)
	}
	return 0
}

// setMtime is utimensat with an explicit mtime (directories are not
// tracked: creating in them moves their mtime).
func (m *fsModel) setMtime(p string, mtime int64) syscall.Errno {
	if e := m.resolveParent(p); e != 0 {
		return e
	}
	n := m.ents[p]
	if n == nil {
		return syscall.ENOENT
	}
	if !n.dir {
		n.mtime, n.mtimeSet = mtime, true
	}
	return 0
}

// fallocate is fallocate(2) with the modes weft supports.
func (m *fsModel) fallocate(p string, mode uint32, off, n int) syscall.Errno {
	f, e := m.file(p)
	if e != 0 {
		return e
	}
	keep := mode&unix.FALLOC_FL_KEEP_SIZE != 0
	end := off + n
	if mode&(unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_ZERO_RANGE) != 0 {
		if off < len(f.data) {
			clear(f.data[off:min(end, len(f.data))])
		}
		f.mtimeSet = false
	}
	if !keep && end > len(f.data) {
		f.data = append(f.data, make([]byte, end-len(f.data))...)
		f.mtimeSet = false
	}
	return 0
}

func (m *fsModel) mkdir(p string) syscall.Errno {
	if e := m.resolveParent(p); e != 0 {
		return e
	}
	if m.ents[p] != nil {
		return syscall.EEXIST
	}
	m.ents[p] = &minode{dir: true}
	return 0
}

func (m *fsModel) rmdir(p string) syscall.Errno {
	if e := m.resolveParent(p); e != 0 {
		return e
	}
	n := m.ents[p]
	switch {
	case n == nil:
		return syscall.ENOENT
	case !n.dir:
		return syscall.ENOTDIR
	case m.nonEmpty(p):
		return syscall.ENOTEMPTY
	}
	delete(m.ents, p)
	return 0
}

func (m *fsModel) unlink(p string) syscall.Errno {
	if e := m.resolveParent(p); e != 0 {
		return e
	}
	n := m.ents[p]
	if n == nil {
		return syscall.ENOENT
	}
	if n.dir {
		return syscall.EISDIR
	}
	delete(m.ents, p)
	return 0
}

func (m *fsModel) link(a, b string) syscall.Errno {
	if e := m.resolveParent(a); e != 0 {
		return e
	}
	n := m.ents[a]
	if n == nil {
		return syscall.ENOENT
	}
	if e := m.resolveParent(b); e != 0 {
		return e
	}
	if m.ents[b] != nil {
		return syscall.EEXIST
	}
	if n.dir {
		return syscall.EPERM
	}
	m.ents[b] = n
	return 0
}

// rename follows the order of checks of Linux's renameat2.
func (m *fsModel) rename(a, b string) syscall.Errno {
	// Both parents are walked before the source is looked up.
	if e := m.resolveParent(a); e != 0 {
		return e
	}
	if e := m.resolveParent(b); e != 0 {
		return e
	}
	src := m.ents[a]
	if src == nil {
		return syscall.ENOENT
	}
	if strings.HasPrefix(b, a+"/") {
		return syscall.EINVAL
	}
	if strings.HasPrefix(a, b+"/") {
		return syscall.ENOTEMPTY
	}
	dst := m.ents[b]
	if dst == src {
		return 0
	}
	if dst != nil {
		switch {
		case src.dir && !dst.dir:
			return syscall.ENOTDIR
		case !src.dir && dst.dir:
			return syscall.EISDIR
		case dst.dir && m.nonEmpty(b):
			return syscall.ENOTEMPTY
		}
	}
	moved := map[string]*minode{}
	for q, n := range m.ents {
		if q == a || strings.HasPrefix(q, a+"/") {
			moved[b+q[len(a):]] = n
			delete(m.ents, q)
		}
	}
	for q, n := range moved {
		m.ents[q] = n
	}
	return 0
}

// realEntry is what the mount shows for one path.
type realEntry struct {
	dir   bool
	data  []byte
	nlink uint64
	mtime int64
}

// snapshot walks the real tree under root.
func snapshot(root string) (map[string]realEntry, error) {
	out := map[string]realEntry{}
	var walk func(rel string) error
	walk = func(rel string) error {
		ents, err := os.ReadDir(filepath.Join(root, rel))
		if err != nil {
			return err
		}
		for _, e := range ents {
			p := e.Name()
			if rel != "" {
				p = rel + "/" + e.Name()
			}
			var st syscall.Stat_t
			if err := syscall.Lstat(filepath.Join(root, p), &st); err != nil {
				return fmt.Errorf("lstat %s (listed by readdir): %w", p, err)
			}
			if e.IsDir() != (st.Mode&syscall.S_IFMT == syscall.S_IFDIR) {
				return fmt.Errorf("%s: readdir type %v, stat mode %o", p, e.Type(), st.Mode)
			}
			if e.IsDir() {
				out[p] = realEntry{dir: true, nlink: uint64(st.Nlink)}
				if err := walk(p); err != nil {
					return err
				}
				continue
			}
			b, err := os.ReadFile(filepath.Join(root, p))
			if err != nil {
				return fmt.Errorf("read %s: %w", p, err)
			}
			if int64(len(b)) != st.Size {
				return fmt.Errorf("%s: stat size %d, read %d bytes", p, st.Size, len(b))
			}
			out[p] = realEntry{data: b, nlink: uint64(st.Nlink), mtime: st.Mtim.Nano()}
		}
		return nil
	}
	return out, walk("")
}

func (m *fsModel) compare(root string) error {
	real, err := snapshot(root)
	if err != nil {
		return err
	}
	var paths []string
	for p := range m.ents {
		paths = append(paths, p)
	}
	for p := range real {
		if m.ents[p] == nil {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	for _, p := range paths {
		n, r := m.ents[p], real[p]
		_, inReal := real[p]
		switch {
		case n == nil:
			return fmt.Errorf("%s exists on weft but not in the model", p)
		case !inReal:
			return fmt.Errorf("%s is missing on weft", p)
		case n.dir != r.dir:
			return fmt.Errorf("%s: dir=%v on weft, %v in the model", p, r.dir, n.dir)
		case n.dir:
			sub := 0
			for q, o := range m.ents {
				if o.dir && parentOf(q) == p {
					sub++
				}
			}
			if r.nlink != uint64(2+sub) {
				return fmt.Errorf("dir %s: nlink %d, want %d", p, r.nlink, 2+sub)
			}
		default:
			if !bytes.Equal(r.data, n.data) {
				return fmt.Errorf("%s: content: %s", p, firstDiff(r.data, n.data))
			}
			if want := m.nlink(n); r.nlink != uint64(want) {
				return fmt.Errorf("%s: nlink %d, want %d", p, r.nlink, want)
			}
			if n.mtimeSet && r.mtime != n.mtime {
				return fmt.Errorf("%s: mtime %d, want %d (set explicitly)", p, r.mtime, n.mtime)
			}
		}
	}
	return nil
}

var modelPaths = []string{"a", "b", "c", "d", "e", "d/a", "d/b", "d/e", "e/a", "e/d", "d/e/a", "d/e/b"}

// TestModel runs random sequences of file operations on a weft mount and on
// fsModel, comparing results (errno included) after every step, and the
// whole tree (names, types, contents, sizes, link counts, explicitly set
// mtimes) after every step. Besides namespace operations, reads, writes and
// truncates, it sets times explicitly (by path, or through a descriptor
// right after a write it has not flushed) and calls fallocate in every mode
// weft supports.
func TestModel(t *testing.T) {
	t.Parallel() // waits on FUSE round trips, on a cluster of its own
	c := testcluster.Start(t, testcluster.Options{Servers: 2, Targets: 4})
	base := filepath.Join(c.Mount(0), "model")
	if err := os.Mkdir(base, 0o755); err != nil {
		t.Fatal(err)
	}
	// Small stripes, so that small files already cross stripe boundaries.
	weft(t, c, "setstripe", "-c", "4", "-S", "64K", base)
	if f := flag.Lookup("rapid.checks"); f != nil && f.Value.String() == "100" {
		f.Value.Set("800")
		defer f.Value.Set("100")
	}
	iter := 0
	start := time.Now()
	steps := 0
	rapid.Check(t, func(rt *rapid.T) {
		iter++
		root := filepath.Join(base, strconv.Itoa(iter))
		if err := os.Mkdir(root, 0o755); err != nil {
			rt.Fatal(err)
		}
		m := &fsModel{ents: map[string]*minode{}}
		path := rapid.SampledFrom(modelPaths)
		n := rapid.IntRange(1, 80).Draw(rt, "steps")
		for i := 0; i < n; i++ {
			steps++
			op := rapid.SampledFrom([]string{"create", "write", "write", "truncate", "rename", "unlink", "mkdir", "rmdir", "link", "read", "stat", "settimes", "fallocate"}).Draw(rt, "op")
			var want syscall.Errno
			var err error
			var what string
			switch op {
			case "create":
				p := path.Draw(rt, "path")
				what = "create " + p
				want = m.create(p)
				var f *os.File
				f, err = os.OpenFile(filepath.Join(root, p), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
				if err == nil {
					err = f.Close()
				}
			case "write":
				p := path.Draw(rt, "path")
				off := rapid.IntRange(0, 400<<10).Draw(rt, "off")
				size := rapid.IntRange(0, 150<<10).Draw(rt, "size")
				seed := rapid.Uint32().Draw(rt, "seed")
				data := pattern(seed, int64(off), size)
				what = fmt.Sprintf("write %s [%d,%d)", p, off, off+size)
				want = m.write(p, off, data)
				var f *os.File
				f, err = os.OpenFile(filepath.Join(root, p), os.O_WRONLY, 0)
				if err == nil {
					_, err = f.WriteAt(data, int64(off))
					err = errors.Join(err, f.Close())
				}
			case "truncate":
				p := path.Draw(rt, "path")
				size := rapid.IntRange(0, 600<<10).Draw(rt, "size")
				what = fmt.Sprintf("truncate %s %d", p, size)
				want = m.truncate(p, size)
				err = os.Truncate(filepath.Join(root, p), int64(size))
			case "settimes":
				p := path.Draw(rt, "path")
				mtime := rapid.Int64Range(0, 4e18).Draw(rt, "mtime")
				ts := []unix.Timespec{unix.NsecToTimespec(mtime / 2), unix.NsecToTimespec(mtime)}
				if rapid.Bool().Draw(rt, "through a descriptor after a write") {
					off := rapid.IntRange(0, 200<<10).Draw(rt, "off")
					data := pattern(rapid.Uint32().Draw(rt, "seed"), int64(off), rapid.IntRange(1, 70<<10).Draw(rt, "size"))
					what = fmt.Sprintf("write %s [%d,%d) then futimens %d", p, off, off+len(data), mtime)
					if want = m.write(p, off, data); want == 0 {
						want = m.setMtime(p, mtime)
					}
					var f *os.File
					f, err = os.OpenFile(filepath.Join(root, p), os.O_WRONLY, 0)
					if err == nil {
						_, err = f.WriteAt(data, int64(off))
						if err == nil { // futimens(fd, ts) is utimensat(fd, NULL, ts, 0)
							if _, _, e := unix.Syscall6(unix.SYS_UTIMENSAT, f.Fd(), 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0); e != 0 {
								err = e
							}
						}
						err = errors.Join(err, f.Close())
					}
				} else {
					what = fmt.Sprintf("utimensat %s %d", p, mtime)
					want = m.setMtime(p, mtime)
					err = unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(root, p), ts, unix.AT_SYMLINK_NOFOLLOW)
				}
			case "fallocate":
				p := path.Draw(rt, "path")
				mode := rapid.SampledFrom([]uint32{0, unix.FALLOC_FL_KEEP_SIZE, unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE,
					unix.FALLOC_FL_ZERO_RANGE, unix.FALLOC_FL_ZERO_RANGE | unix.FALLOC_FL_KEEP_SIZE}).Draw(rt, "mode")
				off := rapid.IntRange(0, 400<<10).Draw(rt, "off")
				size := rapid.IntRange(1, 200<<10).Draw(rt, "size")
				what = fmt.Sprintf("fallocate %s mode %#x [%d,%d)", p, mode, off, off+size)
				want = m.fallocate(p, mode, off, size)
				var f *os.File
				f, err = os.OpenFile(filepath.Join(root, p), os.O_WRONLY, 0)
				if err == nil {
					err = errors.Join(unix.Fallocate(int(f.Fd()), mode, int64(off), int64(size)), f.Close())
				}
			case "rename":
				a, b := path.Draw(rt, "from"), path.Draw(rt, "to")
				what = "rename " + a + " " + b
				want = m.rename(a, b)
				err = syscall.Rename(filepath.Join(root, a), filepath.Join(root, b))
			case "unlink":
				p := path.Draw(rt, "path")
				what = "unlink " + p
				want = m.unlink(p)
				err = syscall.Unlink(filepath.Join(root, p))
			case "mkdir":
				p := path.Draw(rt, "path")
				what = "mkdir " + p
				want = m.mkdir(p)
				err = syscall.Mkdir(filepath.Join(root, p), 0o755)
			case "rmdir":
				p := path.Draw(rt, "path")
				what = "rmdir " + p
				want = m.rmdir(p)
				err = syscall.Rmdir(filepath.Join(root, p))
			case "link":
				a, b := path.Draw(rt, "from"), path.Draw(rt, "to")
				what = "link " + a + " " + b
				want = m.link(a, b)
				err = os.Link(filepath.Join(root, a), filepath.Join(root, b))
			case "read":
				p := path.Draw(rt, "path")
				what = "read " + p
				var mn *minode
				mn, want = m.file(p)
				var got []byte
				got, err = os.ReadFile(filepath.Join(root, p))
				if err == nil && want == 0 && !bytes.Equal(got, mn.data) {
					rt.Fatalf("step %d: %s: %s", i, what, firstDiff(got, mn.data))
				}
			case "stat":
				p := path.Draw(rt, "path")
				what = "stat " + p
				if want = m.resolveParent(p); want == 0 && m.ents[p] == nil {
					want = syscall.ENOENT
				}
				var st syscall.Stat_t
				err = syscall.Lstat(filepath.Join(root, p), &st)
				if err == nil && want == 0 {
					mn := m.ents[p]
					isDir := st.Mode&syscall.S_IFMT == syscall.S_IFDIR
					if isDir != mn.dir || (!mn.dir && st.Size != int64(len(mn.data))) {
						rt.Fatalf("step %d: %s: dir %v size %d, model dir %v size %d", i, what, isDir, st.Size, mn.dir, len(mn.data))
					}
				}
			}
			got := errnoOf(err)
			if err != nil && got == 0 {
				rt.Fatalf("step %d: %s: non-errno error %v", i, what, err)
			}
			okAlt := want == syscall.ENOTEMPTY && got == syscall.EEXIST && op == "rename"
			if got != want && !okAlt {
				rt.Fatalf("step %d: %s: weft says %v, model says %v", i, what, errName(err), errName(errOrNil(want)))
			}
			if err := m.compare(root); err != nil {
				rt.Fatalf("after step %d (%s): %v", i, what, err)
			}
		}
	})
	t.Logf("model test: %d sequences, %d steps in %v", iter, steps, time.Since(start).Round(time.Millisecond))
}

func errOrNil(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}
