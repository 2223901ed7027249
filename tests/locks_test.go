package tests

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/weft-fs/weft/internal/testcluster"
)

// locker is a process that takes file locks on command (testdata/locker.py):
// fcntl locks belong to processes, so every lock holder is one.
type locker struct {
	t    *testing.T
	name string
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  chan string
}

func startLocker(t *testing.T, name string) *locker {
	t.Helper()
	script, err := filepath.Abs("testdata/locker.py")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("python3", script)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the lock helper (python3): %v", err)
	}
	l := &locker{t: t, name: name, cmd: cmd, in: in, out: make(chan string, 16)}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			l.out <- sc.Text()
		}
		close(l.out)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return l
}

// send writes a command without waiting for its answer.
func (l *locker) send(cmd string) {
	l.t.Helper()
	if _, err := fmt.Fprintln(l.in, cmd); err != nil {
		l.t.Fatalf("%s: send %q: %v", l.name, cmd, err)
	}
}

// answer waits for the next answer (the timeout only guards against hangs).
// EWOULDBLOCK is EAGAIN.
func (l *locker) answer() string {
	l.t.Helper()
	select {
	case s, ok := <-l.out:
		if !ok {
			l.t.Fatalf("%s: the lock helper exited", l.name)
		}
		if s == "EWOULDBLOCK" {
			s = "EAGAIN"
		}
		return s
	case <-time.After(3 * time.Minute):
		l.t.Fatalf("%s: no answer", l.name)
	}
	return ""
}

// answered reports an answer that is already there, if any.
func (l *locker) answered() (string, bool) {
	select {
	case s, ok := <-l.out:
		return s, ok
	default:
		return "", false
	}
}

func (l *locker) do(cmd string) string {
	l.t.Helper()
	l.send(cmd)
	return l.answer()
}

// must runs cmd and fails the test unless the answer is want.
func (l *locker) must(cmd, want string) {
	l.t.Helper()
	if got := l.do(cmd); got != want {
		l.t.Fatalf("%s: %q: got %q, want %q", l.name, cmd, got, want)
	}
}

// eventually repeats cmd until it answers want (a release that the kernel
// sends after close returned, or a lease that has to run out).
func (l *locker) eventually(cmd, want string) {
	l.t.Helper()
	var got string
	waitFor(l.t, fmt.Sprintf("%s: %q to answer %q (last %q)", l.name, cmd, want, got), func() bool {
		got = l.do(cmd)
		return got == want
	})
}

func (l *locker) pid() int { return l.cmd.Process.Pid }

// blockedIn waits until the process sleeps in system call nr (it is
// waiting in the kernel for the lock, not about to ask for it).
func (l *locker) blockedIn(nr map[string]int) {
	l.t.Helper()
	want := strconv.Itoa(nr[runtime.GOARCH]) + " "
	waitFor(l.t, l.name+" blocked in the kernel", func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/syscall", l.pid()))
		return err == nil && strings.HasPrefix(string(b), want)
	})
}

var (
	sysFcntl = map[string]int{"amd64": 72, "arm64": 25}
	sysFlock = map[string]int{"amd64": 73, "arm64": 32}
)

// TestLocks: flock, POSIX and OFD locks taken on one mount hold against
// processes on the other mounts of the cluster, F_GETLK there reports the
// holder, and locks go away when their holder closes, exits, is killed,
// or loses its whole mount (once its session lease runs out).
func TestLocks(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Mounts: 3, Targets: 2, MetaArgs: []string{"--session-lease", sessionLease}})
	n := 0
	// lockers opens a new file as a process on each mount.
	lockers := func(t *testing.T) (*locker, *locker, *locker) {
		n++
		name := fmt.Sprintf("f%d", n)
		var ls [3]*locker
		for i := range ls {
			ls[i] = startLocker(t, fmt.Sprintf("mount %d", i))
			ls[i].must("open "+filepath.Join(c.Mount(i), name), "ok")
		}
		return ls[0], ls[1], ls[2]
	}

	t.Run("flock", func(t *testing.T) {
		a, b, cc := lockers(t)
		a.must("flock ex nb", "ok")
		b.must("flock ex nb", "EAGAIN")
		b.must("flock sh nb", "EAGAIN")
		// flock and POSIX locks do not see each other (as on Linux).
		b.must("posix wr 0 0 nb", "ok")
		b.must("posix un 0 0 nb", "ok")
		a.must("flock un nb", "ok")
		b.must("flock sh nb", "ok")
		cc.must("flock sh nb", "ok")
		a.must("flock ex nb", "EAGAIN")
		// Closing the descriptor releases its flock lock.
		b.must("close", "ok")
		cc.must("close", "ok")
		a.eventually("flock ex nb", "ok")
	})

	t.Run("posix", func(t *testing.T) {
		a, b, cc := lockers(t)
		a.must("posix wr 0 100 nb", "ok")
		b.must("posix wr 50 10 nb", "EAGAIN")
		b.must("posix rd 99 1 nb", "EAGAIN")
		b.must("posix wr 100 10 nb", "ok")
		if got, want := cc.do("getlk posix wr 0 0"), fmt.Sprintf("wr 0 100 %d", a.pid()); got != want {
			t.Errorf("F_GETLK on a third mount: %q, want %q", got, want)
		}
		if got, want := cc.do("getlk posix rd 105 1"), fmt.Sprintf("wr 100 10 %d", b.pid()); got != want {
			t.Errorf("F_GETLK on a third mount: %q, want %q", got, want)
		}
		// Unlocking the middle leaves both ends.
		a.must("posix un 20 60 nb", "ok")
		b.must("posix wr 30 10 nb", "ok")
		b.must("posix wr 10 20 nb", "EAGAIN")
		if got := cc.do("getlk posix wr 80 20"); got != fmt.Sprintf("wr 80 20 %d", a.pid()) {
			t.Errorf("F_GETLK after a split: %q", got)
		}
		a.must("posix un 0 0 nb", "ok")
		b.must("posix un 0 0 nb", "ok")
		if got := cc.do("getlk posix wr 0 0"); got != "unlck" {
			t.Errorf("F_GETLK with no locks: %q", got)
		}
		// Read locks are shared, a write lock waits for all of them.
		a.must("posix rd 0 0 nb", "ok")
		b.must("posix rd 0 0 nb", "ok")
		cc.must("posix wr 0 0 nb", "EAGAIN")
		b.must("posix un 0 0 nb", "ok")
		cc.must("posix wr 0 0 nb", "EAGAIN")
		// Closing any descriptor of the file releases the process's POSIX
		// locks on it, before close returns.
		a.must("dup", "ok")
		a.must("close", "ok")
		cc.must("posix wr 0 0 nb", "ok")
	})

	t.Run("ofd", func(t *testing.T) {
		a, b, cc := lockers(t)
		a.must("ofd wr 0 0 nb", "ok")
		b.must("ofd wr 0 0 nb", "EAGAIN")
		b.must("posix rd 10 1 nb", "EAGAIN") // OFD and POSIX locks conflict
		if got := cc.do("getlk ofd rd 10 1"); !strings.HasPrefix(got, "wr 0 0 ") {
			t.Errorf("F_OFD_GETLK on a third mount: %q, want the write lock of the whole file", got)
		}
		// Closing a duplicate of the descriptor keeps the OFD lock (it
		// is the open file description's, not the process's); the last
		// close of the description releases it.
		a.must("dup", "ok")
		a.must("close", "ok")
		b.must("ofd wr 0 0 nb", "EAGAIN")
		// Another process on the same mount is another owner too.
		d := startLocker(t, "mount 0, another process")
		d.must("open "+filepath.Join(c.Mount(0), fmt.Sprintf("f%d", n)), "ok")
		d.must("ofd rd 0 1 nb", "EAGAIN")
		a.must("close", "ok")
		b.eventually("ofd wr 0 0 nb", "ok")
	})

	t.Run("kill-holder", func(t *testing.T) {
		a, b, _ := lockers(t)
		a.must("flock ex nb", "ok")
		a.must("posix wr 0 10 nb", "ok")
		a.must("ofd wr 20 10 nb", "ok")
		b.must("flock sh nb", "EAGAIN")
		b.must("posix rd 5 1 nb", "EAGAIN")
		b.must("posix rd 25 1 nb", "EAGAIN")
		a.cmd.Process.Kill()
		a.cmd.Wait()
		b.eventually("flock ex nb", "ok")
		b.eventually("ofd wr 20 10 nb", "ok")
		b.must("posix wr 0 10 nb", "ok")
	})

	t.Run("wait", func(t *testing.T) {
		a, b, cc := lockers(t)
		a.must("posix wr 0 0 nb", "ok")
		b.send("posix wr 0 0 w")
		b.blockedIn(sysFcntl)
		if got := cc.do("getlk posix wr 0 0"); got != fmt.Sprintf("wr 0 0 %d", a.pid()) {
			t.Errorf("F_GETLK while b waits: %q", got)
		}
		if s, ok := b.answered(); ok {
			t.Fatalf("F_SETLKW answered %q while another mount holds the lock", s)
		}
		a.must("posix un 0 0 nb", "ok")
		if got := b.answer(); got != "ok" {
			t.Fatalf("F_SETLKW after the holder let go: %q", got)
		}
		if got := cc.do("getlk posix wr 0 0"); got != fmt.Sprintf("wr 0 0 %d", b.pid()) {
			t.Errorf("F_GETLK after F_SETLKW: %q", got)
		}

		// A signal ends the wait with EINTR and leaves no lock behind.
		a.send("posix wr 0 0 w")
		a.blockedIn(sysFcntl)
		a.cmd.Process.Signal(syscall.SIGUSR1)
		if got := a.answer(); got != "EINTR" {
			t.Fatalf("F_SETLKW interrupted by a signal: %q, want EINTR", got)
		}
		b.must("posix un 0 0 nb", "ok")
		cc.must("posix wr 0 0 nb", "ok")
		cc.must("posix un 0 0 nb", "ok")

		// flock without LOCK_NB waits too.
		a.must("flock ex nb", "ok")
		b.send("flock sh w")
		b.blockedIn(sysFlock)
		a.must("flock un nb", "ok")
		if got := b.answer(); got != "ok" {
			t.Fatalf("blocking flock after the holder let go: %q", got)
		}
		a.must("flock ex nb", "EAGAIN")
	})

	t.Run("rate", func(t *testing.T) {
		a, _, _ := lockers(t)
		const n = 500
		got := a.do(fmt.Sprintf("loop %d", n))
		var secs float64
		if _, err := fmt.Sscanf(got, "ok %f", &secs); err != nil {
			t.Fatalf("loop: %q", got)
		}
		t.Logf("%d F_SETLK lock+unlock pairs in %.3fs (%.0f pairs/s; a rate, not asserted)", n, secs, n/secs)
	})

	// Last: it kills mount 0.
	t.Run("kill-mount", func(t *testing.T) {
		a, b, _ := lockers(t)
		a.must("posix wr 0 0 nb", "ok")
		a.must("flock ex nb", "ok")
		b.send("posix wr 0 0 w")
		b.blockedIn(sysFcntl)
		// The holder process lives on, but its mount dies: nothing is
		// ever released by the mount, the session expires.
		c.StopMount(0)
		if got := b.answer(); got != "ok" {
			t.Fatalf("F_SETLKW after the holder's mount died: %q", got)
		}
		b.must("flock ex nb", "ok")
	})
}

// TestLocksAcrossMetaRestart: the metadata server keeps locks in memory;
// after it restarts, the mounts take theirs back in its grace period, in
// which nobody may take a new lock, so a lock held before the restart
// still holds after it.
func TestLocksAcrossMetaRestart(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Mounts: 2, Targets: 2,
		MetaArgs: []string{"--session-lease", sessionLease, "--orphan-grace", "3s"}})
	a, b := startLocker(t, "mount 0"), startLocker(t, "mount 1")
	a.must("open "+filepath.Join(c.Mount(0), "f"), "ok")
	b.must("open "+filepath.Join(c.Mount(1), "f"), "ok")
	b.must("open "+filepath.Join(c.Mount(1), "probe"), "ok")
	a.must("posix wr 0 9 nb", "ok")
	a.must("flock ex nb", "ok")

	c.StopMeta() // kill -9
	c.StartMeta()
	// A lock on a file nobody locked is granted once the grace period
	// is over.
	b.eventually("posix wr 0 0 nb", "ok")
	b.must("close", "ok")
	b.must("posix wr 5 1 nb", "EAGAIN")
	b.must("flock sh nb", "EAGAIN")
	if got := b.do("getlk posix rd 0 0"); got != fmt.Sprintf("wr 0 9 %d", a.pid()) {
		t.Errorf("F_GETLK after the restart: %q, want a's lock", got)
	}
	a.must("posix un 0 0 nb", "ok")
	b.must("posix wr 5 1 nb", "ok")
}

// TestAppendAcrossMetaRestart: records appended on one mount and not yet
// recorded (the descriptor is still open, so no close recorded the size)
// when the metadata server restarts are not overwritten by appends from
// another mount after the restart: the first mount tells the restarted
// server how far it wrote.
func TestAppendAcrossMetaRestart(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Mounts: 2, Targets: 2,
		MetaArgs: []string{"--session-lease", sessionLease, "--orphan-grace", "3s"}})
	const n, size = 100, 64
	a, b := startLocker(t, "mount 0"), startLocker(t, "mount 1")
	a.must("openappend "+filepath.Join(c.Mount(0), "log"), "ok")
	a.must(fmt.Sprintf("records %d %d A", n, size), "ok")
	// The records reach the storage targets in the background; wait for
	// them there (no close or fsync: the metadata server must not have
	// recorded the size).
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(c.Mount(0), "log"), &st); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the records on the targets", func() bool { return objectBytes(c, st.Ino) >= n*size })
	c.StopMeta() // kill -9
	c.StartMeta()
	b.must(fmt.Sprintf("append %d %d B %s", n, size, filepath.Join(c.Mount(1), "log")), "ok")
	a.must("close", "ok")
	got, err := os.ReadFile(filepath.Join(c.Mount(1), "log"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2*n*size {
		t.Errorf("file has %d bytes, want %d", len(got), 2*n*size)
	}
	seen := map[string]int{}
	for off := 0; off+size <= len(got); off += size {
		seen[string(bytes.TrimRight(got[off:off+size-1], "."))]++
	}
	for _, tag := range []string{"A", "B"} {
		for k := range n {
			if r := fmt.Sprintf("%s:%d", tag, k); seen[r] != 1 {
				t.Errorf("record %s found %d times", r, seen[r])
			}
		}
	}
}

// objectBytes sums the sizes of inode ino's objects on every target
// (not their checksum sidecars).
func objectBytes(c *testcluster.Cluster, ino uint64) int64 {
	prefix := fmt.Sprintf("%d.", ino)
	var n int64
	for _, td := range c.AllTargetDirs() {
		filepath.WalkDir(filepath.Join(td, "objects"), func(path string, de fs.DirEntry, err error) error {
			if err == nil && de.Type().IsRegular() && strings.HasPrefix(de.Name(), prefix) && !strings.HasSuffix(de.Name(), ".crc") {
				if fi, err := de.Info(); err == nil {
					n += fi.Size()
				}
			}
			return nil
		})
	}
	return n
}

// TestLocksSQLite: SQLite writers on three mounts, serialized only by
// SQLite's fcntl locks: every transaction commits, the counter each one
// bumps matches the rows, and the database is intact.
func TestLocksSQLite(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Mounts: 3, Targets: 2})
	script, err := filepath.Abs("testdata/sqlite_writer.py")
	if err != nil {
		t.Fatal(err)
	}
	run := func(mount int, args ...string) string {
		cmd := exec.Command("python3", append([]string{script, filepath.Join(c.Mount(mount), "db.sqlite")}, args...)...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Errorf("sqlite writer on mount %d %v: %v\n%s", mount, args, err, stderr.String())
		}
		return strings.TrimSpace(string(out))
	}
	run(0, "init")
	const writers = 3
	txns := 60
	if s := os.Getenv("WEFT_SQLITE_TXNS"); s != "" {
		txns, _ = strconv.Atoi(s) // a longer run by hand
	}
	start := time.Now()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run(w, "write", strconv.Itoa(w), strconv.Itoa(txns))
		}()
	}
	wg.Wait()
	t.Logf("%d SQLite transactions from %d mounts in %v (%.0f/s; a rate, not asserted)",
		writers*txns, writers, time.Since(start).Round(time.Millisecond), float64(writers*txns)/time.Since(start).Seconds())
	for m := range writers {
		want := fmt.Sprintf("%d %d ok", writers*txns, writers*txns)
		if got := run(m, "check"); got != want {
			t.Errorf("mount %d: rows, counter, integrity_check = %q, want %q", m, got, want)
		}
	}
}

// TestAppendAcrossMounts: processes on two mounts append records to one
// file with O_APPEND at the same time; every record lands once, whole, and
// nothing is overwritten.
func TestAppendAcrossMounts(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Mounts: 2, Targets: 2})
	const records, size = 2000, 64
	path := "log"
	ls := []*locker{startLocker(t, "mount 0"), startLocker(t, "mount 1")}
	start := time.Now()
	for i, l := range ls {
		l.send(fmt.Sprintf("append %d %d %c %s", records, size, 'A'+i, filepath.Join(c.Mount(i), path)))
	}
	for _, l := range ls {
		if got := l.answer(); got != "ok" {
			t.Fatalf("%s: append: %q", l.name, got)
		}
	}
	t.Logf("%d appends from 2 mounts in %v (%.0f/s; a rate, not asserted)",
		2*records, time.Since(start).Round(time.Millisecond), 2*records/time.Since(start).Seconds())
	b, err := os.ReadFile(filepath.Join(c.Mount(0), path))
	if err != nil {
		t.Fatal(err)
	}
	if b1, err := os.ReadFile(filepath.Join(c.Mount(1), path)); err != nil || !bytes.Equal(b1, b) {
		t.Errorf("mount 1 reads another file than mount 0 (%v): %s", err, firstDiff(b1, b))
	}
	if len(b) != 2*records*size {
		t.Errorf("file has %d bytes, want %d", len(b), 2*records*size)
	}
	seen := map[string]int{}
	for off := 0; off+size <= len(b); off += size {
		rec := b[off : off+size]
		if rec[size-1] != '\n' {
			t.Fatalf("record at %d is torn: %q", off, rec)
		}
		seen[string(bytes.TrimRight(rec[:size-1], "."))]++
	}
	for i := range ls {
		for k := range records {
			if r := fmt.Sprintf("%c:%d", 'A'+i, k); seen[r] != 1 {
				t.Errorf("record %s found %d times", r, seen[r])
			}
		}
	}
}
