package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weft-fs/weft/internal/testcluster"
)

// quotaHelper runs a helper command of the quota tests (as another user):
//
//	creates DIR N   creates DIR/f0..f(N-1); prints "ok=A EDQUOT=B other=C"
//	write PATH SIZE creates PATH, writes SIZE bytes, closes it; prints the
//	                errno name of the first failure, or ok
//	writesync PATH SIZE
//	                creates PATH, writes SIZE bytes, fsyncs, writes 1 MiB
//	                more; prints "fsync=ERR write=ERR"
func quotaHelper(cmd, a, b string) string {
	n, err := strconv.Atoi(b)
	if err != nil {
		return "error:bad number"
	}
	switch cmd {
	case "creates":
		counts := map[string]int{}
		for i := range n {
			f, err := os.OpenFile(filepath.Join(a, fmt.Sprint("f", i)), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
			if err == nil {
				err = f.Close()
			}
			switch name := errName(err); name {
			case "ok", "EDQUOT":
				counts[name]++
			default:
				counts["other"]++
			}
		}
		return fmt.Sprintf("ok=%d EDQUOT=%d other=%d", counts["ok"], counts["EDQUOT"], counts["other"])
	default:
		f, err := os.OpenFile(a, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			return errName(err)
		}
		buf := make([]byte, 1<<20)
		for left := n; left > 0 && err == nil; left -= len(buf) {
			_, err = f.Write(buf[:min(left, len(buf))])
		}
		if cmd == "writesync" {
			defer f.Close()
			if err != nil {
				return "write:" + errName(err)
			}
			serr := f.Sync()
			_, werr := f.Write(buf)
			return fmt.Sprintf("fsync=%s write=%s", errName(serr), errName(werr))
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return errName(err)
	}
}

type quotaShown struct {
	Kind       string `json:"kind"`
	ID         uint32 `json:"id"`
	Inodes     uint64 `json:"inodes"`
	InodeLimit uint64 `json:"inode_limit"`
	Bytes      uint64 `json:"bytes"`
	ByteLimit  uint64 `json:"byte_limit"`
}

// quotaShow runs weft quota show --json for one account.
func quotaShow(t *testing.T, c *testcluster.Cluster, path string, flag, id string) quotaShown {
	t.Helper()
	out := weft(t, c, "quota", "show", "--keys", c.Keys("client"), "--json", flag, id, path)
	var qs []quotaShown
	if err := json.Unmarshal([]byte(out), &qs); err != nil || len(qs) != 1 {
		t.Fatalf("quota show: %v: %s", err, out)
	}
	return qs[0]
}

// quotaCheck fails t unless weft quota check finds every account's usage
// equal to a recount.
func quotaCheck(t *testing.T, c *testcluster.Cluster, path string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if out, err := c.Weft(ctx, "quota", "check", "--keys", c.Keys("client"), path); err != nil {
		t.Fatalf("quota check: %v", err)
	} else if !strings.Contains(out, ": ok") {
		t.Fatalf("quota check printed no account: %s", out)
	}
}

func parseCounts(t *testing.T, s string) (ok, dq int) {
	t.Helper()
	var other int
	if _, err := fmt.Sscanf(s, "ok=%d EDQUOT=%d other=%d", &ok, &dq, &other); err != nil || other != 0 {
		t.Fatalf("helper said %q", s)
	}
	return ok, dq
}

// TestQuotaInodeLimitTwoMounts: an unprivileged user creating files from
// two mounts at once gets exactly its inode limit, then EDQUOT, and usage
// equals the limit.
func TestQuotaInodeLimitTwoMounts(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Servers: 1, Targets: 2, Mounts: 2})
	root := filepath.Join(c.Mount(0), "q")
	for i := range 2 {
		if err := os.MkdirAll(filepath.Join(root, fmt.Sprint("m", i)), 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(root, fmt.Sprint("m", i)), 0o777); err != nil {
			t.Fatal(err)
		}
	}
	const limit, each = 30, 25
	weft(t, c, "quota", "set", "--keys", c.Keys("client"), "--user", fmt.Sprint(nobody.Uid), "--inodes", fmt.Sprint(limit), root)
	res := make([]string, 2)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i] = runHelper(t, nobody, "creates", filepath.Join(c.Mount(i), "q", fmt.Sprint("m", i)), fmt.Sprint(each))
		}()
	}
	wg.Wait()
	ok0, dq0 := parseCounts(t, res[0])
	ok1, dq1 := parseCounts(t, res[1])
	if ok0+ok1 != limit || dq0+dq1 != 2*each-limit {
		t.Fatalf("creates: %s and %s, want %d ok in all", res[0], res[1], limit)
	}
	q := quotaShow(t, c, root, "--user", fmt.Sprint(nobody.Uid))
	if q.Inodes != limit || q.InodeLimit != limit {
		t.Fatalf("quota show: %+v, want %d inodes of %d", q, limit, limit)
	}
	// Root is exempt.
	if err := os.WriteFile(filepath.Join(root, "m0", "root"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	quotaCheck(t, c, root)
}

// TestQuotaByteLimitTwoWriters: two writers on two mounts whose files
// together exceed the user's byte limit: the one whose size is recorded
// second gets EDQUOT (at close), and usage stays within the limit.
func TestQuotaByteLimitTwoWriters(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Servers: 1, Targets: 2, Mounts: 2})
	root := filepath.Join(c.Mount(0), "b")
	if err := os.Mkdir(root, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(root, 0o777); err != nil {
		t.Fatal(err)
	}
	const limit, size = 8 << 20, 6 << 20
	weft(t, c, "quota", "set", "--keys", c.Keys("client"), "--user", fmt.Sprint(nobody.Uid), "--bytes", "8MiB", root)
	res := make([]string, 2)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i] = runHelper(t, nobody, "write", filepath.Join(c.Mount(i), "b", fmt.Sprint("w", i)), fmt.Sprint(size))
		}()
	}
	wg.Wait()
	oks, dqs := 0, 0
	for _, r := range res {
		switch r {
		case "ok":
			oks++
		case "EDQUOT":
			dqs++
		}
	}
	if oks != 1 || dqs != 1 {
		t.Fatalf("writers said %v, want one ok and one EDQUOT", res)
	}
	q := quotaShow(t, c, root, "--user", fmt.Sprint(nobody.Uid))
	if q.Bytes != size || q.ByteLimit != limit {
		t.Fatalf("quota show: %+v, want %d bytes used of %d", q, size, limit)
	}
	// Once a size was refused, write(2) itself fails past the recorded size.
	if got := runHelper(t, nobody, "writesync", filepath.Join(root, "w2"), fmt.Sprint(4<<20)); got != "fsync=EDQUOT write=EDQUOT" {
		t.Fatalf("write, fsync over the limit, write: %s", got)
	}
	quotaCheck(t, c, root)
}

// TestQuotaProjectTree: weft project set tags a tree that holds files;
// its usage shows at once, new files inherit the project, and the
// project's inode limit binds.
func TestQuotaProjectTree(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Servers: 1, Targets: 2})
	root := filepath.Join(c.Mount(0), "proj")
	if err := os.MkdirAll(filepath.Join(root, "a", "b"), 0o777); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(root, "a", "b")
	if err := os.Chmod(sub, 0o777); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := os.WriteFile(filepath.Join(root, "a", fmt.Sprint("f", i)), make([]byte, 1000), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := weft(t, c, "project", "set", "--keys", c.Keys("client"), "42", root)
	if !strings.Contains(out, "6 inodes tagged") { // proj, a, b, 3 files
		t.Fatalf("project set: %s", out)
	}
	q := quotaShow(t, c, root, "--project", "42")
	if q.Inodes != 6 || q.Bytes != 3000 {
		t.Fatalf("project 42 after tagging: %+v, want 6 inodes, 3000 bytes", q)
	}
	weft(t, c, "quota", "set", "--keys", c.Keys("client"), "--project", "42", "--inodes", "8", root)
	got := runHelper(t, nobody, "creates", sub, "3")
	if ok, dq := parseCounts(t, got); ok != 2 || dq != 1 {
		t.Fatalf("creates in the project: %s, want 2 ok, 1 EDQUOT", got)
	}
	// Outside the tree the project's limit does not bind.
	other := filepath.Join(c.Mount(0), "other")
	if err := os.Mkdir(other, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(other, 0o777); err != nil {
		t.Fatal(err)
	}
	if got := runHelper(t, nobody, "creates", other, "2"); got != "ok=2 EDQUOT=0 other=0" {
		t.Fatalf("creates outside the project: %s", got)
	}
	if q := quotaShow(t, c, root, "--project", "42"); q.Inodes != 8 {
		t.Fatalf("project 42: %+v, want 8 inodes", q)
	}
	quotaCheck(t, c, root)
}

// TestQuotaExactAfterMetaKill: kill -9 of the metadata server during a
// load of creates and deletes from two mounts; after its restart, weft
// quota check finds the recorded usage equal to a recount.
func TestQuotaExactAfterMetaKill(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Servers: 1, Targets: 2, Mounts: 2})
	quotaLoadThrough(t, c, func() {
		c.StopMeta() // kill -9
		c.StartMeta()
	})
}

// TestQuotaExactAfterLeaderKill: the same with a replicated metadata
// group whose leader is killed (-9) under the load: the new leader's
// accounts match a recount.
func TestQuotaExactAfterLeaderKill(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Servers: 1, Targets: 2, Mounts: 2, MetaReplicas: 3, Timeout: "30s"})
	quotaLoadThrough(t, c, func() {
		c.StopMetaMember(c.WaitMetaLeader()) // kill -9
		c.WaitMetaLeader()
	})
}

// quotaLoadThrough runs creates, writes and deletes from every mount,
// calls disrupt once they are under way, lets them go on for a while
// after, stops them and runs weft quota check.
func quotaLoadThrough(t *testing.T, c *testcluster.Cluster, disrupt func()) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	done := 0
	for i := range c.NumMounts() {
		dir := filepath.Join(c.Mount(i), fmt.Sprint("load", i))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				// Errors are expected while no server leads.
				p := filepath.Join(dir, fmt.Sprint("f", k%50))
				if os.WriteFile(p, make([]byte, k%3*4096), 0o644) == nil && k%2 == 0 {
					os.Remove(p)
				}
				mu.Lock()
				done++
				mu.Unlock()
			}
		}()
	}
	// Stop the load on every way out (a failed wait included).
	end := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer end()
	progress := func(n int) {
		t.Helper()
		deadline := time.Now().Add(hangGuard) // against hangs only
		for time.Now().Before(deadline) {
			mu.Lock()
			d := done
			mu.Unlock()
			if d >= n {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("the load made no progress")
	}
	progress(100)
	disrupt()
	mu.Lock()
	after := done
	mu.Unlock()
	progress(after + 100)
	end()
	quotaCheck(t, c, c.Mount(0))
}
