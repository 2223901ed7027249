package tests

import (
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/weft-fs/weft/internal/testcluster"
)

// timesTree makes a tree of dirs directories of files files each under
// root, non-empty files of up to 200 KiB (some cross a 64 KiB stripe unit),
// every file and directory with a distinct mtime (and atime) to the
// nanosecond, in the past.
func timesTree(t *testing.T, root string, dirs, files int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(7, 11))
	base := time.Date(2019, 3, 4, 5, 6, 7, 0, time.UTC)
	stamp := func(i int) time.Time {
		return base.Add(time.Duration(i)*time.Minute + time.Duration(rng.IntN(1e9)))
	}
	buf := make([]byte, 200<<10)
	for i := range buf {
		buf[i] = byte(i*7 + i>>9)
	}
	k := 0
	var dirPaths []string
	for d := range dirs {
		dp := filepath.Join(root, fmt.Sprintf("d%03d", d))
		if err := os.Mkdir(dp, 0o755); err != nil {
			t.Fatal(err)
		}
		dirPaths = append(dirPaths, dp)
		for f := range files {
			p := filepath.Join(dp, fmt.Sprintf("f%04d", f))
			n := 1 + rng.IntN(4<<10)
			if f%10 == 0 {
				n = 1 + rng.IntN(len(buf))
			}
			if err := os.WriteFile(p, buf[:n], 0o644); err != nil {
				t.Fatal(err)
			}
			k++
			ts := stamp(k)
			if err := os.Chtimes(p, ts.Add(time.Hour), ts); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, dp := range dirPaths {
		k++
		ts := stamp(k)
		if err := os.Chtimes(dp, ts, ts); err != nil {
			t.Fatal(err)
		}
	}
}

// mtimes returns the mtime (ns) of every file and directory under root, by
// path relative to root (root itself excluded).
func mtimes(t *testing.T, root string) map[string]int64 {
	t.Helper()
	m := map[string]int64{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		m[rel] = st.Mtim.Nano()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// sameMtimes reports every entry of want whose mtime differs in got (or is
// missing), at most 10 of them, and fails if there is any.
func sameMtimes(t *testing.T, what string, got, want map[string]int64) {
	t.Helper()
	bad := 0
	for p, w := range want {
		g, ok := got[p]
		if ok && g == w {
			continue
		}
		bad++
		if bad <= 10 {
			if !ok {
				t.Errorf("%s: %s missing", what, p)
			} else {
				t.Errorf("%s: %s mtime %s, want %s", what, p, time.Unix(0, g).UTC().Format(time.RFC3339Nano), time.Unix(0, w).UTC().Format(time.RFC3339Nano))
			}
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d mtimes differ", what, bad, len(want))
	}
	if len(got) != len(want) {
		t.Errorf("%s: %d entries, want %d", what, len(got), len(want))
	}
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, tailString(string(out), 30))
	}
}

// TestTimestamps checks that explicitly set times are exact and final on
// every mount: tar x, cp -p and rsync -t of a tree of thousands of
// non-empty files keep every mtime to the nanosecond, as seen from the
// mount that wrote them and from another; close does not move mtime; a
// futimens on a file with unsent writes is what stat shows after close.
func TestTimestamps(t *testing.T) {
	t.Parallel() // tar x, cp -p and rsync wait on FUSE round trips, on a cluster of its own
	requireTool(t, "tar")
	requireTool(t, "rsync")
	c := testcluster.Start(t, testcluster.Options{Servers: 2, Targets: 4, Mounts: 2})
	a, b := c.Mount(0), c.Mount(1)
	if err := os.Mkdir(filepath.Join(a, "striped"), 0o755); err != nil {
		t.Fatal(err)
	}
	weft(t, c, "setstripe", "-c", "4", "-S", "64K", filepath.Join(a, "striped"))

	src := filepath.Join(t.TempDir(), "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	timesTree(t, src, 25, 100) // 2,500 files in 25 directories
	want := mtimes(t, src)
	archive := filepath.Join(t.TempDir(), "src.tar")
	// The POSIX (pax) format keeps nanoseconds.
	run(t, "tar", "--format=posix", "-C", src, "-cf", archive, ".")

	t.Run("tar x", func(t *testing.T) {
		for _, dst := range []string{"striped/tar"} {
			if err := os.Mkdir(filepath.Join(a, dst), 0o755); err != nil {
				t.Fatal(err)
			}
			run(t, "tar", "-C", filepath.Join(a, dst), "-xf", archive)
			sameMtimes(t, dst+" on the writing mount", mtimes(t, filepath.Join(a, dst)), want)
			sameMtimes(t, dst+" on another mount", mtimes(t, filepath.Join(b, dst)), want)
		}
	})
	t.Run("cp -p", func(t *testing.T) {
		run(t, "cp", "-rp", src, filepath.Join(a, "cp"))
		sameMtimes(t, "cp -p on the writing mount", mtimes(t, filepath.Join(a, "cp")), want)
		sameMtimes(t, "cp -p on another mount", mtimes(t, filepath.Join(b, "cp")), want)
	})
	t.Run("rsync -t", func(t *testing.T) {
		run(t, "rsync", "-rt", src+"/", filepath.Join(a, "rsync"))
		sameMtimes(t, "rsync -t on the writing mount", mtimes(t, filepath.Join(a, "rsync")), want)
		sameMtimes(t, "rsync -t on another mount", mtimes(t, filepath.Join(b, "rsync")), want)
	})

	t.Run("close does not move mtime", func(t *testing.T) {
		p := filepath.Join(a, "striped", "late-close")
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.Write(make([]byte, 300<<10)); err != nil {
			t.Fatal(err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &st); err != nil {
			t.Fatal(err)
		}
		written := st.Mtim.Nano()
		// Let the clock pass the last write before closing.
		for time.Now().UnixNano() < written+int64(50*time.Millisecond) {
			time.Sleep(10 * time.Millisecond)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		for _, m := range []string{a, b} {
			if err := unix.Stat(filepath.Join(m, "striped", "late-close"), &st); err != nil {
				t.Fatal(err)
			}
			if st.Mtim.Nano() != written {
				t.Errorf("%s: mtime after close %d, want the last write's %d", m, st.Mtim.Nano(), written)
			}
		}
	})

	t.Run("close after ftruncate does not move mtime", func(t *testing.T) {
		p := filepath.Join(a, "striped", "late-close-truncate")
		if err := os.WriteFile(p, make([]byte, 300<<10), 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := f.Truncate(100 << 10); err != nil {
			t.Fatal(err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &st); err != nil {
			t.Fatal(err)
		}
		truncated := st.Mtim.Nano()
		for time.Now().UnixNano() < truncated+int64(50*time.Millisecond) {
			time.Sleep(10 * time.Millisecond)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		for _, m := range []string{a, b} {
			if err := unix.Stat(filepath.Join(m, "striped", "late-close-truncate"), &st); err != nil {
				t.Fatal(err)
			}
			if st.Mtim.Nano() != truncated || st.Size != 100<<10 {
				t.Errorf("%s: mtime %d size %d after close, want the truncate's %d and %d", m, st.Mtim.Nano(), st.Size, truncated, 100<<10)
			}
		}
	})

	t.Run("futimens with unsent writes", func(t *testing.T) {
		p := filepath.Join(a, "striped", "futimens")
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		// Unaligned writes stay buffered in the client for a while.
		for i := range 50 {
			if _, err := f.WriteAt([]byte("abcdefghijk"), int64(i*70001)); err != nil {
				t.Fatal(err)
			}
		}
		set := time.Date(2001, 2, 3, 4, 5, 6, 789012345, time.UTC)
		ts := []unix.Timespec{unix.NsecToTimespec(set.UnixNano()), unix.NsecToTimespec(set.UnixNano())}
		// futimens(fd, ts) is utimensat(fd, NULL, ts, 0).
		if _, _, e := unix.Syscall6(unix.SYS_UTIMENSAT, f.Fd(), 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0); e != 0 {
			t.Fatal(e)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		for _, m := range []string{a, b} {
			var st unix.Stat_t
			if err := unix.Stat(filepath.Join(m, "striped", "futimens"), &st); err != nil {
				t.Fatal(err)
			}
			if st.Mtim.Nano() != set.UnixNano() || st.Atim.Nano() != set.UnixNano() {
				t.Errorf("%s: mtime %d atime %d, want both %d", m, st.Mtim.Nano(), st.Atim.Nano(), set.UnixNano())
			}
			if st.Size != 49*70001+11 {
				t.Errorf("%s: size %d, want %d", m, st.Size, 49*70001+11)
			}
		}
	})
}
