package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/weft-fs/weft/internal/testcluster"
)

// helperEnv, when set, turns the test binary into a helper process that runs
// one command (helperMain) and exits.
const helperEnv = "WEFT_IT_HELPER"

// helperMain runs a helper command. It prints "ok" or the errno name of the
// first failure on stdout, and exits 0 unless the command line is wrong, so
// that tests can assert the exact error another user or process saw.
func helperMain(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "helper: no command")
		return 2
	}
	var err error
	switch args[0] {
	case "open": // open PATH FLAGS: FLAGS is r, w, rw, create
		if len(args) != 3 {
			return 2
		}
		flags := map[string]int{"r": os.O_RDONLY, "w": os.O_WRONLY, "rw": os.O_RDWR, "create": os.O_WRONLY | os.O_CREATE | os.O_EXCL}[args[2]]
		var f *os.File
		f, err = os.OpenFile(args[1], flags, 0o644)
		if err == nil {
			err = f.Close()
		}
	case "creates", "write", "writesync": // quota_test.go: creates DIR N; write(sync) PATH SIZE
		if len(args) != 3 {
			return 2
		}
		fmt.Println(quotaHelper(args[0], args[1], args[2]))
		return 0
	case "mkdir": // mkdir PATH
		err = os.Mkdir(args[1], 0o755)
	case "unlink":
		err = os.Remove(args[1])
	case "records": // records PATH NPROC IDX NREC RECSIZE
		if len(args) != 6 {
			return 2
		}
		n := make([]int, 4)
		for i := range n {
			if n[i], err = strconv.Atoi(args[2+i]); err != nil {
				return 2
			}
		}
		err = writeRecords(args[1], n[0], n[1], n[2], n[3])
	case "meta": // meta ADDR KEYS OP NAME: OP (lookup, mkdir) of NAME in the root, sent to ADDR only
		if len(args) != 5 {
			return 2
		}
		err = metaCall(args[1], args[2], args[3], args[4])
		if err != nil {
			// The errno, then what the server (or transport) said.
			fmt.Println(errName(err), strings.ReplaceAll(err.Error(), "\n", " "))
			return 0
		}
	default:
		fmt.Fprintln(os.Stderr, "helper: unknown command", args[0])
		return 2
	}
	fmt.Println(errName(err))
	return 0
}

// writeRecords writes every record k (k%nproc == idx) of the ior-hard file.
func writeRecords(path string, nproc, idx, nrec, recsize int) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	buf := make([]byte, recsize)
	for k := idx; k < nrec; k += nproc {
		fillRecord(buf, k)
		if _, err := f.WriteAt(buf, int64(k)*int64(recsize)); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

// fillRecord fills record k with bytes that name k and their position, so
// that any misplaced byte is detected.
func fillRecord(buf []byte, k int) {
	for i := range buf {
		buf[i] = byte(k*131 + i*7 + i>>8)
	}
}

// errName is "ok" for nil and the errno's name (e.g. "EACCES") otherwise.
func errName(err error) string {
	if err == nil {
		return "ok"
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		if n := unix.ErrnoName(e); n != "" {
			return n
		}
		return fmt.Sprintf("errno%d", int(e))
	}
	return "error:" + strings.ReplaceAll(err.Error(), "\n", " ")
}

// runHelper runs a helper command, as cred's user when cred is not nil, and
// returns its one-line answer.
func runHelper(t testing.TB, cred *syscall.Credential, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	bin, err := helperBinary()
	if err != nil {
		t.Errorf("helper: %v", err)
		return "error:helper failed"
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		// Errorf, not Fatalf: helpers also run from goroutines.
		t.Errorf("helper %v: %v\n%s", args, err, stderr.String())
		return "error:helper failed"
	}
	return strings.TrimSpace(string(out))
}

// helperCopy is a copy of the test binary that other users can execute
// (go test builds it in a directory only root may enter).
var helperCopy struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func helperBinary() (string, error) {
	helperCopy.once.Do(func() {
		self, err := os.Executable()
		if err != nil {
			helperCopy.err = err
			return
		}
		dir, err := os.MkdirTemp("", "weft-it-helper-")
		if err != nil {
			helperCopy.err = err
			return
		}
		helperCopy.dir = dir
		os.Chmod(dir, 0o755)
		b, err := os.ReadFile(self)
		if err != nil {
			helperCopy.err = err
			return
		}
		helperCopy.path = filepath.Join(dir, "weft-tests-helper")
		helperCopy.err = os.WriteFile(helperCopy.path, b, 0o755)
	})
	return helperCopy.path, helperCopy.err
}

func removeHelperBinary() {
	if helperCopy.dir != "" {
		os.RemoveAll(helperCopy.dir)
	}
}

// nobody is the credential of the unprivileged user tests switch to.
var nobody = &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}

// pattern returns n deterministic pseudo-random bytes for file offset off
// of a file identified by seed: any byte at the wrong offset or from the
// wrong file shows.
func pattern(seed uint32, off int64, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		p := uint64(off) + uint64(i)
		x := uint32(p>>2)*2654435761 ^ seed*40503
		x ^= x >> 13
		b[i] = byte(x >> (8 * (p & 3)))
	}
	return b
}

// firstDiff describes where got and want differ, for failure messages.
func firstDiff(got, want []byte) string {
	n := min(len(got), len(want))
	for i := 0; i < n; i++ {
		if got[i] != want[i] {
			j := i
			for j < n && got[j] != want[j] {
				j++
			}
			return fmt.Sprintf("first difference at byte %d (got %#x, want %#x; %d bytes differ from there), len got %d want %d, crc got %08x want %08x",
				i, got[i], want[i], j-i, len(got), len(want), crc32.ChecksumIEEE(got), crc32.ChecksumIEEE(want))
		}
	}
	if len(got) != len(want) {
		return fmt.Sprintf("length got %d want %d (equal prefix)", len(got), len(want))
	}
	return "equal"
}

// hangGuard is the outer bound of every wait in these tests: it only
// turns a hang into a failure that says what hung. No test asserts how
// long anything took (the machine may be loaded: a load average of 10 on
// 2 cores must not fail a test); durations are logged instead.
const hangGuard = 10 * time.Minute

// within runs f and fails the test if it has not returned after hangGuard:
// a FUSE call that hangs must be reported, not hang the suite. The
// goroutine stays blocked until the cluster's cleanup kills the daemon.
func within(t testing.TB, what string, f func() error) error {
	t.Helper()
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	select {
	case err := <-ch:
		return err
	case <-time.After(hangGuard):
		t.Fatalf("%s did not return within %v (hangs)", what, hangGuard)
		return nil
	}
}

// targetServers returns `weft df` through mnt and which of the cluster's
// first two storage servers holds each target (by target ID).
func targetServers(t testing.TB, c *testcluster.Cluster, mnt string) ([]testcluster.TargetInfo, map[uint32]int) {
	t.Helper()
	df, err := testcluster.DF(mnt)
	if err != nil {
		t.Fatal(err)
	}
	server := map[uint32]int{}
	for _, ti := range df {
		for i := 0; i < 2; i++ {
			if ti.Addr == c.StorageAddr(i) {
				server[ti.ID] = i
			}
		}
	}
	return df, server
}

func errnoOf(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return 0
}
