package tests

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weft-fs/weft/internal/testcluster"
)

// upProc is a running `weft up`.
type upProc struct {
	cmd  *exec.Cmd
	done chan struct{}
	log  string
}

// freeBasePort finds a base port for `weft up` whose meta ports (base,
// +1, +2: three members by default) and storage ports (base+10, base+11,
// ...) are all free now. It picks them below the kernel's ephemeral range:
// a port in that range that is free now can be taken by any outgoing
// connection (of this test's other clusters, running in parallel) before
// weft up binds it (CI: "bind: address already in use" on port 48348).
func freeBasePort(t *testing.T, servers int) int {
	low := testcluster.EphemeralLow()
	for i := 0; i < 200; i++ {
		base := 10000 + rand.IntN(low-10000-20)
		ok := true
		for _, p := range append(seq(base, 3), seq(base+10, servers)...) {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
			if err != nil {
				ok = false
				break
			}
			l.Close()
		}
		if ok {
			return base
		}
	}
	t.Fatal("no free base port")
	return 0
}

func seq(from, n int) []int {
	var s []int
	for i := 0; i < n; i++ {
		s = append(s, from+i)
	}
	return s
}

// startUp runs `weft up` and waits until its mount shows 4 targets up.
func startUp(t *testing.T, bin, data, mnt string, base int, logPath string) *upProc {
	t.Helper()
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "up", "--data", data, "--mount", mnt, "--targets", "4", "--servers", "2", "--base-port", strconv.Itoa(base))
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	u := &upProc{cmd: cmd, done: make(chan struct{}), log: logPath}
	go func() { cmd.Wait(); lf.Close(); close(u.done) }()
	t.Cleanup(func() { u.kill() })
	deadline := time.Now().Add(hangGuard)
	for {
		ts, err := testcluster.DF(mnt)
		up := 0
		for _, ti := range ts {
			if ti.Up {
				up++
			}
		}
		if err == nil && up == 4 {
			return u
		}
		select {
		case <-u.done:
			b, _ := os.ReadFile(logPath)
			t.Fatalf("weft up exited: %v\n%s", cmd.ProcessState, b)
		default:
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logPath)
			t.Fatalf("weft up: mount %s not ready after %v (df: %d up, %v)\n%s", mnt, hangGuard, up, err, b)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// children lists the child pids of pid (processes weft up started).
func children(pid int) []int {
	var pids []int
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, task := range tasks {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, task.Name()))
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				pids = append(pids, n)
			}
		}
	}
	return pids
}

// stop sends SIGTERM and waits for a clean exit.
func (u *upProc) stop(t *testing.T) {
	t.Helper()
	u.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-u.done:
	case <-time.After(hangGuard):
		b, _ := os.ReadFile(u.log)
		t.Fatalf("weft up did not stop within %v of SIGTERM\n%s", hangGuard, b)
	}
	if code := u.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("weft up exited with %d after SIGTERM", code)
	}
}

// kill SIGKILLs weft up and the processes it started (they also get a
// SIGTERM from their parent-death signal).
func (u *upProc) kill() {
	select {
	case <-u.done:
		return
	default:
	}
	kids := children(u.cmd.Process.Pid)
	u.cmd.Process.Signal(syscall.SIGKILL)
	for _, k := range kids {
		syscall.Kill(k, syscall.SIGKILL)
	}
	<-u.done
}

// TestUpRestart stops a `weft up` cleanly with SIGTERM, runs it again on the
// same data directory and checks that every file came back.
func TestUpRestart(t *testing.T) {
	bin := testcluster.Binary(t)
	dir, err := os.MkdirTemp("", "weft-it-up-")
	if err != nil {
		t.Fatal(err)
	}
	data, mnt := filepath.Join(dir, "data"), filepath.Join(dir, "mnt")
	t.Cleanup(func() {
		exec.Command("fusermount3", "-u", "-z", mnt).Run()
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "up.log"))
			t.Logf("weft up output:\n%s", b)
			for _, n := range []string{"meta-1", "meta-2", "meta-3", "storage-0", "storage-1", "mount"} {
				b, _ := os.ReadFile(filepath.Join(data, "logs", n+".log"))
				t.Logf("---- %s.log ----\n%s", n, tailBytes(b, 40))
			}
		}
		os.RemoveAll(dir)
	})
	base := freeBasePort(t, 2)
	u := startUp(t, bin, data, mnt, base, filepath.Join(dir, "up.log"))

	files := map[string][]byte{}
	os.MkdirAll(filepath.Join(mnt, "x", "y"), 0o755)
	for i := 0; i < 30; i++ {
		name := filepath.Join("x", fmt.Sprintf("f%d", i))
		if i%3 == 0 {
			name = filepath.Join("x", "y", fmt.Sprintf("g%d", i))
		}
		b := pattern(uint32(300+i), 0, i*77_777)
		if err := os.WriteFile(filepath.Join(mnt, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
		files[name] = b
	}
	os.Symlink("x/f1", filepath.Join(mnt, "link"))
	u.stop(t)
	if b, _ := os.ReadFile("/proc/self/mountinfo"); bytes.Contains(b, []byte(" "+mnt+" ")) {
		t.Errorf("%s is still mounted after weft up stopped", mnt)
	}

	u = startUp(t, bin, data, mnt, base, filepath.Join(dir, "up.log"))
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(mnt, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s after restart: %v %s", name, err, firstDiff(got, want))
		}
	}
	// The first run made the file system's default layout survive the loss
	// of a storage server (weft up --mirror, default 2).
	if l, err := testcluster.GetLayout(mnt); err != nil || l.Kind != "mirror" || l.Mirror != 2 {
		t.Errorf("root layout after weft up: %+v %v, want mirror 2", l, err)
	}
	if l, err := os.Readlink(filepath.Join(mnt, "link")); l != "x/f1" {
		t.Errorf("symlink after restart: %q %v", l, err)
	}
	ents, _ := os.ReadDir(filepath.Join(mnt, "x"))
	if len(ents) != 21 { // 20 files f* and y
		t.Errorf("x has %d entries after restart, want 21", len(ents))
	}
	u.stop(t)
}

func tailBytes(b []byte, n int) []byte {
	lines := bytes.Split(b, []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return bytes.Join(lines, []byte("\n"))
}
