package tests

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/weft-fs/weft/internal/bdi"
	"github.com/weft-fs/weft/internal/testcluster"
)

// TestPOSIX checks the basic file system semantics through one mount. The
// subtests share a cluster; each works in its own directory.
func TestPOSIX(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Servers: 2, Targets: 4})
	mnt := c.Mount(0)
	dir := func(t *testing.T) string {
		d := filepath.Join(mnt, t.Name()[len("TestPOSIX/"):])
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	mustErrno := func(t *testing.T, err error, want syscall.Errno, what string) {
		t.Helper()
		if !errors.Is(err, want) {
			t.Errorf("%s: got %v, want %v", what, err, want)
		}
	}

	t.Run("read-ahead window", func(t *testing.T) {
		// weft mount raises the kernel's 128 KiB default (see internal/bdi)
		// so that buffered sequential reads arrive as 1 MiB requests.
		ra, err := bdi.ReadAhead(mnt)
		if err != nil {
			t.Fatal(err)
		}
		if ra != 1<<20 {
			t.Errorf("read-ahead window of the mount = %d bytes, want 1 MiB", ra)
		}
	})

	t.Run("files", func(t *testing.T) {
		d := dir(t)
		p := filepath.Join(d, "f")
		want := pattern(1, 0, 3<<20+17)
		if err := os.WriteFile(p, want, 0o640); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("read back: %s", firstDiff(got, want))
		}
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() != int64(len(want)) || fi.Mode() != 0o640 || !fi.Mode().IsRegular() {
			t.Errorf("stat: size %d mode %v, want %d -rw-r-----", fi.Size(), fi.Mode(), len(want))
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != 0 || st.Gid != 0 || st.Nlink != 1 {
			t.Errorf("stat: uid %d gid %d nlink %d, want 0 0 1", st.Uid, st.Gid, st.Nlink)
		}
		// Overwrite in the middle keeps the rest.
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		mid := pattern(2, 1<<20-5, 10)
		if _, err := f.WriteAt(mid, 1<<20-5); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		copy(want[1<<20-5:], mid)
		got, _ = os.ReadFile(p)
		if !bytes.Equal(got, want) {
			t.Fatalf("after overwrite: %s", firstDiff(got, want))
		}
		_, err = os.Open(filepath.Join(d, "missing"))
		mustErrno(t, err, syscall.ENOENT, "open missing")
		_, err = os.Open(filepath.Join(p, "x"))
		mustErrno(t, err, syscall.ENOTDIR, "open file/x")
	})

	t.Run("dirs", func(t *testing.T) {
		d := dir(t)
		for _, n := range []string{"a", "b", "c"} {
			if err := os.Mkdir(filepath.Join(d, n), 0o750); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(d, "a", "f"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		ents, err := os.ReadDir(d)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
			if !e.IsDir() {
				t.Errorf("%s: not a dir in readdir", e.Name())
			}
		}
		if !slices.Equal(names, []string{"a", "b", "c"}) {
			t.Errorf("readdir: %v", names)
		}
		fi, err := os.Stat(filepath.Join(d, "b"))
		if err != nil || fi.Mode() != os.ModeDir|0o750 {
			t.Errorf("stat dir: %v %v", fi, err)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(d, &st); err != nil || st.Nlink != 5 {
			t.Errorf("nlink of a dir with 3 subdirs: %d (%v), want 5", st.Nlink, err)
		}
		mustErrno(t, syscall.Rmdir(filepath.Join(d, "a")), syscall.ENOTEMPTY, "rmdir non-empty")
		mustErrno(t, syscall.Mkdir(filepath.Join(d, "a"), 0o755), syscall.EEXIST, "mkdir existing")
		mustErrno(t, syscall.Rmdir(filepath.Join(d, "a", "f")), syscall.ENOTDIR, "rmdir file")
		mustErrno(t, syscall.Unlink(filepath.Join(d, "b")), syscall.EISDIR, "unlink dir")
		if err := syscall.Rmdir(filepath.Join(d, "b")); err != nil {
			t.Errorf("rmdir empty: %v", err)
		}
		if _, err := os.Stat(filepath.Join(d, "b")); !errors.Is(err, syscall.ENOENT) {
			t.Errorf("stat removed dir: %v", err)
		}
	})

	t.Run("rename", func(t *testing.T) {
		d := dir(t)
		a, b := filepath.Join(d, "a"), filepath.Join(d, "b")
		os.WriteFile(a, []byte("new"), 0o644)
		os.WriteFile(b, []byte("old content"), 0o644)
		// A reader holding the old b keeps it.
		old, err := os.Open(b)
		if err != nil {
			t.Fatal(err)
		}
		defer old.Close()
		if err := syscall.Rename(a, b); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(b); string(got) != "new" {
			t.Errorf("after replace: %q", got)
		}
		if _, err := os.Stat(a); !errors.Is(err, syscall.ENOENT) {
			t.Errorf("source still there: %v", err)
		}
		if got, err := io.ReadAll(old); err != nil || string(got) != "old content" {
			t.Errorf("replaced file through an open fd: %q %v", got, err)
		}
		// Across directories, with a directory.
		os.MkdirAll(filepath.Join(d, "x", "sub"), 0o755)
		os.WriteFile(filepath.Join(d, "x", "sub", "f"), []byte("deep"), 0o644)
		os.Mkdir(filepath.Join(d, "y"), 0o755)
		if err := syscall.Rename(filepath.Join(d, "x", "sub"), filepath.Join(d, "y", "moved")); err != nil {
			t.Fatal(err)
		}
		if got, err := os.ReadFile(filepath.Join(d, "y", "moved", "f")); string(got) != "deep" {
			t.Errorf("after moving a dir: %q %v", got, err)
		}
		var st syscall.Stat_t
		syscall.Stat(filepath.Join(d, "x"), &st)
		if st.Nlink != 2 {
			t.Errorf("nlink of the old parent: %d, want 2", st.Nlink)
		}
		syscall.Stat(filepath.Join(d, "y"), &st)
		if st.Nlink != 3 {
			t.Errorf("nlink of the new parent: %d, want 3", st.Nlink)
		}
		mustErrno(t, syscall.Rename(filepath.Join(d, "y"), filepath.Join(d, "y", "moved", "in")), syscall.EINVAL, "rename dir into itself")
		mustErrno(t, syscall.Rename(filepath.Join(d, "y"), filepath.Join(d, "y", "moved")), syscall.EINVAL, "rename dir onto its child")
		// Replacing: dir over non-empty dir, dir over file, file over dir.
		os.MkdirAll(filepath.Join(d, "full", "z"), 0o755)
		err = syscall.Rename(filepath.Join(d, "x"), filepath.Join(d, "full"))
		if !errors.Is(err, syscall.ENOTEMPTY) && !errors.Is(err, syscall.EEXIST) {
			t.Errorf("dir over non-empty dir: %v, want ENOTEMPTY", err)
		}
		mustErrno(t, syscall.Rename(filepath.Join(d, "x"), b), syscall.ENOTDIR, "dir over file")
		mustErrno(t, syscall.Rename(b, filepath.Join(d, "x")), syscall.EISDIR, "file over dir")
		os.Mkdir(filepath.Join(d, "empty"), 0o755)
		if err := syscall.Rename(filepath.Join(d, "x"), filepath.Join(d, "empty")); err != nil {
			t.Errorf("dir over empty dir: %v", err)
		}
		// renameat2 flags.
		os.WriteFile(a, []byte("A"), 0o644)
		mustErrno(t, unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_NOREPLACE), syscall.EEXIST, "RENAME_NOREPLACE")
		if err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE); err != nil {
			t.Errorf("RENAME_EXCHANGE: %v", err)
		} else {
			ga, _ := os.ReadFile(a)
			gb, _ := os.ReadFile(b)
			if string(ga) != "new" || string(gb) != "A" {
				t.Errorf("after exchange: a=%q b=%q", ga, gb)
			}
		}
		mustErrno(t, syscall.Rename(filepath.Join(d, "nope"), a), syscall.ENOENT, "rename missing")
	})

	t.Run("hardlinks", func(t *testing.T) {
		d := dir(t)
		a, b := filepath.Join(d, "a"), filepath.Join(d, "sub", "b")
		os.Mkdir(filepath.Join(d, "sub"), 0o755)
		os.WriteFile(a, []byte("hello"), 0o644)
		if err := os.Link(a, b); err != nil {
			t.Fatal(err)
		}
		var sa, sb syscall.Stat_t
		syscall.Stat(a, &sa)
		syscall.Stat(b, &sb)
		if sa.Ino != sb.Ino || sa.Nlink != 2 || sb.Nlink != 2 {
			t.Errorf("link: ino %d/%d nlink %d/%d", sa.Ino, sb.Ino, sa.Nlink, sb.Nlink)
		}
		f, _ := os.OpenFile(b, os.O_WRONLY|os.O_APPEND, 0)
		f.WriteString(" world")
		f.Close()
		if got, _ := os.ReadFile(a); string(got) != "hello world" {
			t.Errorf("write through link: %q", got)
		}
		if err := os.Remove(a); err != nil {
			t.Fatal(err)
		}
		syscall.Stat(b, &sb)
		if sb.Nlink != 1 {
			t.Errorf("nlink after unlink: %d", sb.Nlink)
		}
		if got, _ := os.ReadFile(b); string(got) != "hello world" {
			t.Errorf("content after unlinking the other name: %q", got)
		}
		mustErrno(t, os.Link(d, filepath.Join(d, "dirlink")), syscall.EPERM, "link a dir")
		mustErrno(t, os.Link(b, filepath.Join(d, "sub")), syscall.EEXIST, "link over existing")
	})

	t.Run("symlinks", func(t *testing.T) {
		d := dir(t)
		os.WriteFile(filepath.Join(d, "target"), []byte("T"), 0o644)
		if err := os.Symlink("target", filepath.Join(d, "l")); err != nil {
			t.Fatal(err)
		}
		long := string(bytes.Repeat([]byte("x/"), 1000)) + "end"
		if err := os.Symlink(long, filepath.Join(d, "long")); err != nil {
			t.Fatal(err)
		}
		if got, err := os.Readlink(filepath.Join(d, "l")); got != "target" || err != nil {
			t.Errorf("readlink: %q %v", got, err)
		}
		if got, err := os.Readlink(filepath.Join(d, "long")); got != long || err != nil {
			t.Errorf("readlink of a 2003-byte target: %d bytes, %v", len(got), err)
		}
		fi, err := os.Lstat(filepath.Join(d, "l"))
		if err != nil || fi.Mode()&os.ModeSymlink == 0 || fi.Size() != int64(len("target")) {
			t.Errorf("lstat: %v %v", fi, err)
		}
		if got, _ := os.ReadFile(filepath.Join(d, "l")); string(got) != "T" {
			t.Errorf("read through symlink: %q", got)
		}
		os.Symlink("nowhere", filepath.Join(d, "dangling"))
		_, err = os.Stat(filepath.Join(d, "dangling"))
		mustErrno(t, err, syscall.ENOENT, "stat dangling")
		os.Symlink("loop2", filepath.Join(d, "loop1"))
		os.Symlink("loop1", filepath.Join(d, "loop2"))
		_, err = os.Stat(filepath.Join(d, "loop1"))
		mustErrno(t, err, syscall.ELOOP, "stat symlink loop")
	})

	t.Run("mkfifo", func(t *testing.T) {
		d := dir(t)
		p := filepath.Join(d, "fifo")
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode()&os.ModeNamedPipe == 0 || fi.Mode().Perm() != 0o600 {
			t.Fatalf("stat fifo: %v %v", fi, err)
		}
		// O_RDWR opens a fifo without waiting for a peer on Linux.
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		f.Write([]byte("through the pipe"))
		buf := make([]byte, 64)
		n, err := f.Read(buf)
		if string(buf[:n]) != "through the pipe" {
			t.Errorf("fifo read: %q %v", buf[:n], err)
		}
		if err := syscall.Mknod(filepath.Join(d, "sock"), syscall.S_IFSOCK|0o644, 0); err != nil {
			t.Errorf("mknod socket: %v", err)
		}
	})

	t.Run("permissions", func(t *testing.T) {
		d := dir(t)
		root := filepath.Join(d, "rootfile")
		os.WriteFile(root, []byte("secret"), 0o644)
		os.Chmod(root, 0o644)
		if got := runHelper(t, nobody, "open", root, "w"); got != "EACCES" {
			t.Errorf("nobody opening a 0644 root file for writing: %s, want EACCES", got)
		}
		if got := runHelper(t, nobody, "open", root, "r"); got != "ok" {
			t.Errorf("nobody reading a 0644 root file: %s, want ok", got)
		}
		if got := runHelper(t, nobody, "open", filepath.Join(d, "new"), "create"); got != "EACCES" {
			t.Errorf("nobody creating in a 0755 root dir: %s, want EACCES", got)
		}
		if got := runHelper(t, nobody, "unlink", root); got != "EACCES" {
			t.Errorf("nobody unlinking in a 0755 root dir: %s, want EACCES", got)
		}
		priv := filepath.Join(d, "private")
		os.Mkdir(priv, 0o700)
		os.Chmod(priv, 0o700)
		os.WriteFile(filepath.Join(priv, "f"), nil, 0o666)
		if got := runHelper(t, nobody, "open", filepath.Join(priv, "f"), "r"); got != "EACCES" {
			t.Errorf("nobody opening through a 0700 dir: %s, want EACCES", got)
		}
		pub := filepath.Join(d, "public")
		os.Mkdir(pub, 0o777)
		os.Chmod(pub, 0o777)
		if got := runHelper(t, nobody, "open", filepath.Join(pub, "mine"), "create"); got != "ok" {
			t.Fatalf("nobody creating in a 0777 dir: %s", got)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(pub, "mine"), &st); err != nil || st.Uid != 65534 || st.Gid != 65534 {
			t.Errorf("owner of nobody's file: %d:%d (%v), want 65534:65534", st.Uid, st.Gid, err)
		}
		// chmod makes the root file writable for others.
		os.Chmod(root, 0o666)
		if got := runHelper(t, nobody, "open", root, "w"); got != "ok" {
			t.Errorf("nobody writing a 0666 file: %s", got)
		}
		// Sticky dir: nobody may not remove root's file.
		syscall.Chmod(pub, 0o1777)
		os.WriteFile(filepath.Join(pub, "rootowned"), nil, 0o666)
		if got := runHelper(t, nobody, "unlink", filepath.Join(pub, "rootowned")); got != "EPERM" && got != "EACCES" {
			t.Errorf("nobody unlinking root's file in a sticky dir: %s, want EPERM", got)
		}
		if err := os.Chown(root, 65534, 65534); err != nil {
			t.Errorf("chown: %v", err)
		}
		syscall.Stat(root, &st)
		if st.Uid != 65534 || st.Gid != 65534 {
			t.Errorf("after chown: %d:%d", st.Uid, st.Gid)
		}
	})

	t.Run("utimens", func(t *testing.T) {
		d := dir(t)
		p := filepath.Join(d, "f")
		os.WriteFile(p, []byte("x"), 0o644)
		at := unix.Timespec{Sec: 1_000_000_000, Nsec: 123_456_789}
		mt := unix.Timespec{Sec: 1_500_000_000, Nsec: 987_654_321}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{at, mt}, 0); err != nil {
			t.Fatal(err)
		}
		var st unix.Stat_t
		unix.Stat(p, &st)
		if st.Atim != at || st.Mtim != mt {
			t.Errorf("explicit times: atime %v mtime %v, want %v %v", st.Atim, st.Mtim, at, mt)
		}
		// UTIME_OMIT keeps atime, UTIME_NOW sets mtime to now.
		before := time.Now().Add(-2 * time.Second)
		omit := unix.Timespec{Nsec: unix.UTIME_OMIT}
		now := unix.Timespec{Nsec: unix.UTIME_NOW}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{omit, now}, 0); err != nil {
			t.Fatal(err)
		}
		unix.Stat(p, &st)
		if st.Atim != at {
			t.Errorf("UTIME_OMIT changed atime: %v, want %v", st.Atim, at)
		}
		if m := time.Unix(st.Mtim.Unix()); m.Before(before) || m.After(time.Now().Add(2*time.Second)) {
			t.Errorf("UTIME_NOW mtime %v is not now", m)
		}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{now, omit}, 0); err != nil {
			t.Fatal(err)
		}
		var st2 unix.Stat_t
		unix.Stat(p, &st2)
		if st2.Mtim != st.Mtim {
			t.Errorf("UTIME_OMIT changed mtime: %v, want %v", st2.Mtim, st.Mtim)
		}
		if a := time.Unix(st2.Atim.Unix()); a.Before(before) {
			t.Errorf("UTIME_NOW atime %v is not now", a)
		}
		// Writing moves mtime and ctime forward.
		unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{at, mt}, 0)
		os.WriteFile(p, []byte("more"), 0o644)
		unix.Stat(p, &st)
		if st.Mtim == mt {
			t.Errorf("write did not update mtime")
		}
		// On a symlink itself.
		l := filepath.Join(d, "l")
		os.Symlink("f", l)
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, l, []unix.Timespec{at, mt}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			t.Errorf("utimensat AT_SYMLINK_NOFOLLOW: %v", err)
		}
		unix.Lstat(l, &st)
		if st.Mtim != mt {
			t.Errorf("symlink mtime %v, want %v", st.Mtim, mt)
		}
	})

	t.Run("truncate", func(t *testing.T) {
		d := dir(t)
		p := filepath.Join(d, "f")
		want := pattern(3, 0, 5<<20+100)
		os.WriteFile(p, want, 0o644)
		for _, size := range []int64{4<<20 + 7, 1 << 20, 1000, 0, 3<<20 + 5, 9 << 20} {
			if err := os.Truncate(p, size); err != nil {
				t.Fatalf("truncate %d: %v", size, err)
			}
			if int64(len(want)) > size {
				want = want[:size]
			} else {
				want = append(want, make([]byte, size-int64(len(want)))...)
			}
			fi, _ := os.Stat(p)
			got, err := os.ReadFile(p)
			if err != nil || fi.Size() != size || !bytes.Equal(got, want) {
				t.Fatalf("after truncate to %d: size %d, %v: %s", size, fi.Size(), err, firstDiff(got, want))
			}
		}
		// ftruncate on an open file, then write past the end.
		f, _ := os.OpenFile(p, os.O_RDWR, 0)
		f.Truncate(100)
		f.WriteAt([]byte("z"), 2<<20)
		f.Close()
		want = append(want[:100], make([]byte, 2<<20-100)...)
		want = append(want, 'z')
		got, _ := os.ReadFile(p)
		if !bytes.Equal(got, want) {
			t.Errorf("ftruncate then write: %s", firstDiff(got, want))
		}
	})

	t.Run("sparse", func(t *testing.T) {
		d := dir(t)
		p := filepath.Join(d, "f")
		f, _ := os.Create(p)
		f.WriteAt([]byte("head"), 0)
		f.WriteAt([]byte("tail"), 10<<20+3)
		f.Close()
		fi, _ := os.Stat(p)
		if fi.Size() != 10<<20+7 {
			t.Errorf("size %d", fi.Size())
		}
		got, _ := os.ReadFile(p)
		want := make([]byte, 10<<20+7)
		copy(want, "head")
		copy(want[10<<20+3:], "tail")
		if !bytes.Equal(got, want) {
			t.Errorf("sparse read: %s", firstDiff(got, want))
		}
		var st syscall.Stat_t
		syscall.Stat(p, &st)
		t.Logf("sparse file of %d bytes: %d blocks of 512", fi.Size(), st.Blocks)
		if st.Blocks != 2*4096/512 { // two 4 KiB blocks hold data; the rest is a hole
			t.Errorf("sparse file of %d bytes: st_blocks %d, want %d", fi.Size(), st.Blocks, 2*4096/512)
		}
	})

	t.Run("append", func(t *testing.T) {
		d := dir(t)
		p := filepath.Join(d, "log")
		f1, _ := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		f2, _ := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
		var want []byte
		for i := 0; i < 50; i++ {
			f := f1
			if i%2 == 1 {
				f = f2
			}
			line := []byte{'a' + byte(i%26), '\n'}
			if _, err := f.Write(line); err != nil {
				t.Fatal(err)
			}
			want = append(want, line...)
		}
		f1.Close()
		f2.Close()
		got, _ := os.ReadFile(p)
		if !bytes.Equal(got, want) {
			t.Errorf("O_APPEND from two fds: %q, want %q", got, want)
		}
	})

	t.Run("excl", func(t *testing.T) {
		d := dir(t)
		p := filepath.Join(d, "f")
		f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		_, err = os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		mustErrno(t, err, syscall.EEXIST, "O_EXCL on an existing file")
		os.Symlink("f", filepath.Join(d, "l"))
		_, err = os.OpenFile(filepath.Join(d, "l"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		mustErrno(t, err, syscall.EEXIST, "O_EXCL on a symlink")
		// O_TRUNC empties.
		os.WriteFile(p, []byte("data"), 0o600)
		f, _ = os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
		f.Close()
		if fi, _ := os.Stat(p); fi.Size() != 0 {
			t.Errorf("O_TRUNC: size %d", fi.Size())
		}
	})

	t.Run("xattr", func(t *testing.T) {
		d := dir(t)
		p := filepath.Join(d, "f")
		os.WriteFile(p, nil, 0o644)
		val := bytes.Repeat([]byte("v"), 3000)
		if err := unix.Setxattr(p, "user.one", val, 0); err != nil {
			t.Fatal(err)
		}
		if err := unix.Setxattr(p, "user.two", []byte{}, 0); err != nil {
			t.Fatal(err)
		}
		if got, err := testcluster.Getxattr(p, "user.one"); !bytes.Equal(got, val) || err != nil {
			t.Errorf("getxattr: %d bytes, %v", len(got), err)
		}
		buf := make([]byte, 10)
		_, err := unix.Getxattr(p, "user.one", buf)
		mustErrno(t, err, unix.ERANGE, "getxattr into a short buffer")
		if n, err := unix.Getxattr(p, "user.one", nil); n != len(val) || err != nil {
			t.Errorf("getxattr size query: %d %v", n, err)
		}
		lb := make([]byte, 4096)
		n, err := unix.Listxattr(p, lb)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, b := range bytes.Split(bytes.TrimRight(lb[:n], "\x00"), []byte{0}) {
			names = append(names, string(b))
		}
		slices.Sort(names)
		if !slices.Equal(names, []string{"user.one", "user.two"}) {
			t.Errorf("listxattr: %q (the user.weft.* virtual xattrs must not be listed)", names)
		}
		mustErrno(t, unix.Setxattr(p, "user.one", []byte("x"), unix.XATTR_CREATE), unix.EEXIST, "XATTR_CREATE on existing")
		mustErrno(t, unix.Setxattr(p, "user.three", []byte("x"), unix.XATTR_REPLACE), unix.ENODATA, "XATTR_REPLACE on missing")
		if err := unix.Removexattr(p, "user.one"); err != nil {
			t.Fatal(err)
		}
		_, err = unix.Getxattr(p, "user.one", buf)
		mustErrno(t, err, unix.ENODATA, "getxattr removed")
		mustErrno(t, unix.Removexattr(p, "user.one"), unix.ENODATA, "removexattr missing")
		// Directories carry xattrs too.
		if err := unix.Setxattr(d, "user.dir", []byte("D"), 0); err != nil {
			t.Errorf("setxattr on a dir: %v", err)
		}
	})

	t.Run("statfs", func(t *testing.T) {
		// Targets on one file system (one device) count it once.
		sum := func(ts []testcluster.TargetInfo) (total, free uint64) {
			seen := map[string]bool{}
			for _, ti := range ts {
				if ti.Device != "" && seen[ti.Device] {
					continue
				}
				seen[ti.Device] = true
				total += ti.Total
				free += ti.Free
			}
			return total, free
		}
		// Both answers come from the usage the storage servers last
		// reported, which moves with every heartbeat while other
		// processes write to the disk: compare statfs with a df that
		// saw the same reports before and after it.
		var ts []testcluster.TargetInfo
		var total, free uint64
		var st unix.Statfs_t
		for deadline := time.Now().Add(hangGuard); ; {
			before, err := testcluster.DF(mnt)
			if err != nil {
				t.Fatal(err)
			}
			if err := unix.Statfs(mnt, &st); err != nil {
				t.Fatal(err)
			}
			if ts, err = testcluster.DF(mnt); err != nil {
				t.Fatal(err)
			}
			t0, f0 := sum(before)
			total, free = sum(ts)
			if (t0 == total && f0 == free) || time.Now().After(deadline) {
				break
			}
			t.Logf("a heartbeat moved free space by %d bytes during statfs: again", int64(free)-int64(f0))
		}
		bs := uint64(st.Frsize)
		if bs == 0 {
			bs = uint64(st.Bsize)
		}
		gotTotal, gotFree := st.Blocks*bs, st.Bfree*bs
		tol := uint64(len(ts)) * bs
		if diff(gotTotal, total) > tol {
			t.Errorf("statfs total %d bytes, targets sum to %d", gotTotal, total)
		}
		// Free space moves while other tests write; allow 64 MiB.
		if diff(gotFree, free) > tol+64<<20 {
			t.Errorf("statfs free %d bytes, targets sum to %d", gotFree, free)
		}
		if len(ts) != 4 || total == 0 {
			t.Errorf("df: %d targets, total %d", len(ts), total)
		}
		if st.Files == 0 || st.Namelen < 255 {
			t.Errorf("statfs: files %d namelen %d", st.Files, st.Namelen)
		}
	})

	t.Run("unlink-open", func(t *testing.T) {
		d := dir(t)
		p := filepath.Join(d, "f")
		f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		first := pattern(4, 0, 2<<20)
		f.Write(first)
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(p); !errors.Is(err, syscall.ENOENT) {
			t.Errorf("stat after unlink: %v", err)
		}
		more := pattern(4, 2<<20, 1<<20)
		if _, err := f.Write(more); err != nil {
			t.Errorf("write after unlink: %v", err)
		}
		if err := f.Sync(); err != nil {
			t.Errorf("fsync after unlink: %v", err)
		}
		got := make([]byte, 3<<20)
		if n, err := f.ReadAt(got, 0); n != len(got) {
			t.Fatalf("read after unlink: %d bytes, %v", n, err)
		}
		if want := append(first, more...); !bytes.Equal(got, want) {
			t.Errorf("read after unlink: %s", firstDiff(got, want))
		}
		var st syscall.Stat_t
		if err := syscall.Fstat(int(f.Fd()), &st); err != nil || st.Size != 3<<20 || st.Nlink != 0 {
			t.Errorf("fstat after unlink: size %d nlink %d %v", st.Size, st.Nlink, err)
		}
		ents, _ := os.ReadDir(d)
		if len(ents) != 0 {
			t.Errorf("readdir after unlink lists %v", ents)
		}
		// A new file with the same name is a different file.
		os.WriteFile(p, []byte("other"), 0o644)
		if _, err := f.ReadAt(got[:10], 0); err != nil || !bytes.Equal(got[:10], first[:10]) {
			t.Errorf("unlinked file changed after the name was reused: %v", err)
		}
	})
}

func diff(a, b uint64) uint64 {
	if a > b {
		return a - b
	}
	return b - a
}
