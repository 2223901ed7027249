package tests

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/reedsolomon"

	"github.com/weft-fs/weft/internal/testcluster"
)

// requireTool fails (never skips) when an external test tool is missing.
func requireTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is not installed (not on PATH=%s): run scripts/install-deps.sh", name, os.Getenv("PATH"))
	}
	return p
}

var ansi = regexp.MustCompile("\x1b\\[[0-9;]*m")

// pjdResult is one line of pjdfstest's report.
type pjdResult struct {
	name, status, detail string
}

// parsePjdfstest reads pjdfstest's output: "NAME<spaces>ok|skipped|FAILED|
// ..." lines, each followed by tab-indented details.
func parsePjdfstest(out string) []pjdResult {
	var rs []pjdResult
	sc := bufio.NewScanner(strings.NewReader(ansi.ReplaceAllString(out, "")))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	line := regexp.MustCompile(`^(\S+::\S+)\s+(ok|skipped|FAILED|PASSED UNEXPECTEDLY|failed as expected)\s*$`)
	for sc.Scan() {
		l := sc.Text()
		if m := line.FindStringSubmatch(l); m != nil {
			rs = append(rs, pjdResult{name: m[1], status: m[2]})
			continue
		}
		if strings.HasPrefix(l, "\t") && len(rs) > 0 {
			r := &rs[len(rs)-1]
			r.detail += strings.TrimSpace(l) + " "
		}
	}
	return rs
}

// pjdExceptions reads the tests listed in docs/pjdfstest.md, lines of the
// form "- `name` — reason".
func pjdExceptions(t *testing.T) map[string]string {
	_, file, _, _ := runtime.Caller(0)
	path := filepath.Join(filepath.Dir(file), "..", "docs", "pjdfstest.md")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ex := map[string]string{}
	re := regexp.MustCompile("^- `([^`]+)`\\s*[—:-]+\\s*(.+)$")
	for _, l := range strings.Split(string(b), "\n") {
		if m := re.FindStringSubmatch(strings.TrimSpace(l)); m != nil {
			ex[m[1]] = m[2]
		}
	}
	return ex
}

// TestPjdfstest runs the POSIX conformance suite pjdfstest as root on a weft
// mount. Every failure fails the test unless docs/pjdfstest.md lists it
// with a reason; an exception that passes fails it too, so the list stays
// as short as the truth.
func TestPjdfstest(t *testing.T) {
	t.Parallel() // waits on FUSE round trips, on a cluster of its own
	bin := requireTool(t, "pjdfstest")
	for _, name := range []string{"tests", "nobody"} {
		if _, err := user.Lookup(name); err != nil {
			t.Fatalf("pjdfstest needs a user %q (%v): run scripts/install-deps.sh", name, err)
		}
		if _, err := user.LookupGroup(name); err != nil && name == "tests" {
			t.Fatalf("pjdfstest needs a group %q (%v): run scripts/install-deps.sh", name, err)
		}
	}
	exceptions := pjdExceptions(t)
	c := testcluster.Start(t, testcluster.Options{Servers: 2, Targets: 4})
	dir := filepath.Join(c.Mount(0), "pjd")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	cfg := filepath.Join(c.Dir(), "pjdfstest.toml")
	// The features Linux has (as for ext4 in pjdfstest's CI) and
	// rename_ctime (weft, like ext4, updates ctime on rename). naptime must
	// exceed the timestamp granularity: weft keeps nanoseconds. The
	// secondary file system (for EXDEV) is the local disk.
	os.WriteFile(cfg, []byte(`[features]
posix_fallocate = {}
rename_ctime = {}
utime_now = {}
utimensat = {}

[settings]
naptime = 0.01
`), 0o644)
	secondary := filepath.Join(c.Dir(), "pjd-secondary")
	os.Mkdir(secondary, 0o755)
	// No time limit but the test binary's own (go test -timeout): a slow
	// run on a loaded machine is not a failure.
	cmd := exec.Command(bin, "-c", cfg, "-p", dir, "-s", secondary)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NO_COLOR=1", "CLICOLOR=0")
	start := time.Now()
	outb, err := cmd.CombinedOutput()
	out := string(outb)
	el := time.Since(start)
	rs := parsePjdfstest(out)
	counts := map[string]int{}
	var unexpected, expected []string
	seen := map[string]bool{}
	for _, r := range rs {
		counts[r.status]++
		seen[r.name] = true
		if r.status != "FAILED" {
			if _, ok := exceptions[r.name]; ok && r.status == "ok" {
				t.Errorf("%s passes but docs/pjdfstest.md lists it as an exception: remove it", r.name)
			}
			continue
		}
		if _, ok := exceptions[r.name]; ok {
			expected = append(expected, r.name)
		} else {
			unexpected = append(unexpected, fmt.Sprintf("%s: %s", r.name, r.detail))
		}
	}
	t.Logf("pjdfstest on weft: %d passed, %d failed (%d listed exceptions), %d skipped, in %v",
		counts["ok"], counts["FAILED"], len(expected), counts["skipped"], el.Round(time.Second))
	if len(rs) < 300 {
		t.Fatalf("pjdfstest reported only %d results (exit %v); output:\n%s", len(rs), err, tailString(out, 60))
	}
	for _, r := range rs {
		if r.status == "skipped" {
			t.Logf("skipped %s: %s", r.name, r.detail)
		}
	}
	sort.Strings(unexpected)
	for _, u := range unexpected {
		t.Errorf("pjdfstest FAILED %s", u)
	}
	if len(unexpected) == 0 && err != nil && len(expected) == 0 {
		t.Errorf("pjdfstest exited with %v but no test failed:\n%s", err, tailString(out, 30))
	}
	for name := range exceptions {
		if !seen[name] {
			t.Logf("exception %s was not run", name)
		}
	}
}

// TestFsx runs fsx for 100,000 operations on a file striped over 4
// targets in 64 KiB units, with a 1 MiB maximum length so that reads,
// writes, truncates and mmaps cross stripe and object boundaries, with
// every operation fsx has that weft supports: posix_fallocate and
// punch_hole (weft's Space on the targets), copy_file_range (the kernel's
// copy through the mount), sendfile, fadvise, fsync and fdatasync.
func TestFsx(t *testing.T) {
	t.Parallel() // fsx waits on FUSE round trips, on a cluster of its own
	bin := requireTool(t, "fsx")
	c := testcluster.Start(t, testcluster.Options{Servers: 2, Targets: 4})
	file := runFsx(t, c, bin, "-c", "4", "-S", "64K")
	if l, err := testcluster.GetLayout(file); err != nil || l.StripeCount != 4 || len(l.Targets) != 4 {
		t.Errorf("fsx file layout: %+v %v (want 4 targets)", l, err)
	}
}

// TestFsxMirror runs the same on a mirror 2 file of 2 stripes, and then
// checks that the two copies of each stripe hold the same bytes.
func TestFsxMirror(t *testing.T) {
	t.Parallel() // fsx waits on FUSE round trips, on a cluster of its own
	bin := requireTool(t, "fsx")
	c := testcluster.Start(t, testcluster.Options{Servers: 2, Targets: 4})
	file := runFsx(t, c, bin, "--mirror", "2", "-c", "2", "-S", "64K")
	l, err := testcluster.GetLayout(file)
	if err != nil || l.Kind != "mirror" || l.StripeCount != 2 || len(l.Targets) != 4 || len(l.Stale) != 0 {
		t.Fatalf("fsx file layout: %+v %v (want mirror 2 over 4 targets, none stale)", l, err)
	}
	checkObjectsAgree(t, c, file)
}

// TestFsxEC runs the same on an ec 2+1 file over three servers, whose
// partial writes read, merge and re-encode rows, and then checks that the
// parity shard is the parity of the data shards.
func TestFsxEC(t *testing.T) {
	t.Parallel() // fsx waits on FUSE round trips, on a cluster of its own
	bin := requireTool(t, "fsx")
	c := testcluster.Start(t, testcluster.Options{Servers: 3, Targets: 3})
	file := runFsx(t, c, bin, "--ec", "2+1", "-c", "1", "-S", "64K")
	l, err := testcluster.GetLayout(file)
	if err != nil || l.Kind != "ec" || len(l.Targets) != 3 || len(l.Stale) != 0 {
		t.Fatalf("fsx file layout: %+v %v (want ec 2+1 over 3 targets, none stale)", l, err)
	}
	checkObjectsAgree(t, c, file)
}

// checkObjectsAgree reads the objects of file from the target directories
// and checks that the copies of each mirrored stripe hold the same bytes,
// and that the parity shards of each EC stripe are the parity of its data
// shards (objects shorter than others read as zeros past their end, as
// the client reads them). The file must have no stale object.
func checkObjectsAgree(t *testing.T, c *testcluster.Cluster, file string) {
	t.Helper()
	l, err := testcluster.GetLayout(file)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Stale) != 0 {
		t.Fatalf("%s: stale objects %v with every server up", file, l.Stale)
	}
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	ino := fi.Sys().(*syscall.Stat_t).Ino
	objs := map[int][]byte{} // slot -> the object's bytes, trailing zeros cut
	for _, td := range c.AllTargetDirs() {
		matches, _ := filepath.Glob(filepath.Join(td, "objects", "*", fmt.Sprintf("%d.*", ino)))
		for _, m := range matches {
			if strings.HasSuffix(m, ".crc") || strings.HasSuffix(m, ".ver") {
				continue // the sidecar, the version file
			}
			var slot int
			if _, err := fmt.Sscanf(m[strings.LastIndex(m, ".")+1:], "%d", &slot); err != nil {
				t.Fatalf("object name %s: %v", m, err)
			}
			b, err := os.ReadFile(m)
			if err != nil {
				t.Fatal(err)
			}
			objs[slot] = bytes.TrimRight(b, "\x00")
		}
	}
	switch l.Kind {
	case "mirror":
		for s := range int(l.StripeCount) {
			for j := 1; j < l.Mirror; j++ {
				a, b := objs[s*l.Mirror], objs[s*l.Mirror+j]
				if !bytes.Equal(a, b) {
					t.Errorf("%s: stripe %d: copies 0 and %d differ: %s", file, s, j, firstDiff(b, a))
				}
			}
		}
	case "ec":
		w := l.ECData + l.ECParity
		enc, err := reedsolomon.New(l.ECData, l.ECParity)
		if err != nil {
			t.Fatal(err)
		}
		for s := range int(l.StripeCount) {
			n := 0
			for j := range w {
				n = max(n, len(objs[s*w+j]))
			}
			n = (n + 63) &^ 63
			shards := make([][]byte, w)
			for j := range w {
				shards[j] = make([]byte, n)
				copy(shards[j], objs[s*w+j])
			}
			if ok, err := enc.Verify(shards); err != nil || !ok {
				t.Errorf("%s: stripe %d: its parity is not the parity of its data (%v)", file, s, err)
			}
		}
	}
}

// runFsx runs fsx for 100,000 operations on a file in a new directory
// with the given setstripe flags, and returns the file's path.
func runFsx(t *testing.T, c *testcluster.Cluster, bin string, stripe ...string) string {
	t.Helper()
	dir := filepath.Join(c.Mount(0), "fsx")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	weft(t, c, append(append([]string{"setstripe"}, stripe...), dir)...)
	// Every layout takes the space calls (on an EC file copy_file_range
	// copies whole rows that line up on the storage servers, the ends
	// through the client; anything else is EOPNOTSUPP to the mount, and
	// the kernel copies through it).
	space := "posix_fallocate = 2\npunch_hole = 2\ncopy_file_range = 2\n"
	cfg := filepath.Join(c.Dir(), "fsx.toml")
	os.WriteFile(cfg, []byte(`flen = 1048576
[opsize]
max = 131072
[weights]
close_open = 2
read = 10
write = 10
mapread = 5
mapwrite = 5
invalidate = 1
truncate = 3
fsync = 1
fdatasync = 1
sendfile = 1
posix_fadvise = 1
`+space), 0o644)
	artifacts := filepath.Join(c.Dir(), "fsx-artifacts")
	os.Mkdir(artifacts, 0o755)
	file := filepath.Join(dir, "fsx.bin")
	// No time limit but the test binary's own (go test -timeout): fsx
	// fails the test only when it finds a wrong byte or an error, never
	// because a loaded machine made it slow. Its rate is logged.
	start := time.Now()
	cmd := exec.Command(bin, "-f", cfg, "-N", "100000", "-S", "4242", "-P", artifacts, file)
	out, err := cmd.CombinedOutput()
	el := time.Since(start)
	t.Logf("fsx: 100000 ops in %v (%.0f ops/s)", el.Round(time.Millisecond), 100000/el.Seconds())
	if err != nil {
		t.Fatalf("fsx failed: %v\nwhat it found:\n%s\nthe operations before:\n%s", err, fsxFindings(string(out), 30), tailString(string(out), 40))
	}
	// With every server up, no object was ever found short, no copy or
	// shard was given up on or rebuilt.
	for _, bad := range []string{"shorter than", "stale", "reconstructing", "read from a copy failed"} {
		if log := c.Log("mount-0"); strings.Contains(log, bad) {
			t.Errorf("the mount logged %q with every server up:\n%s", bad, tailString(log, 20))
		}
	}
	return file
}

// fsxOp matches a line of the operation log fsx prints after a failure.
var fsxOp = regexp.MustCompile(`^\[ERROR fsx\]\s+\d+ `)

// fsxFindings returns the first n lines of fsx's output that are not its
// operation log: what it found wrong (the log's tail alone hides it).
func fsxFindings(s string, n int) string {
	var found []string
	for _, l := range strings.Split(s, "\n") {
		if l != "" && !fsxOp.MatchString(l) && len(found) < n {
			found = append(found, l)
		}
	}
	return strings.Join(found, "\n")
}

func tailString(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
