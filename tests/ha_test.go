package tests

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weft-fs/weft/auth"
	"github.com/weft-fs/weft/internal/testcluster"
	"github.com/weft-fs/weft/meta/metarpc"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/transport"
)

// TestHAKillLeader runs an mdtest-style create load (each worker creates
// small files in its own directory, writing and closing each) from a FUSE
// mount against a replicated metadata group of three `weft meta`
// processes, SIGKILLs the leader in the middle of it, and checks that a new
// leader serves, that no application call failed, and that every
// acknowledged create is there exactly once with its content: a create
// retried across the failover neither failed (EEXIST) nor made a second
// entry.
func TestHAKillLeader(t *testing.T) {
	t.Parallel() // waits on elections, on a cluster of its own
	c := testcluster.Start(t, testcluster.Options{
		Servers: 1, Targets: 2, MetaReplicas: 3,
		// The mount's RPC timeout bounds how long it follows the group
		// through an election; generous, the machine is slow.
		Timeout: "30s",
	})
	mnt := c.Mount(0)
	old := c.WaitMetaLeader()

	load := startCreates(t, mnt, 4)
	load.wait(200, "before the kill")
	t.Logf("killing leader meta-%d (pid %d) after %d creates", old+1, c.MetaMemberPID(old), load.total.Load())
	c.StopMetaMember(old)
	load.wait(200, "after the kill")
	load.stop()
	leader := c.WaitMetaLeader()
	if leader == old {
		t.Fatalf("meta-%d was killed but is reported leader", old+1)
	}
	load.check()
	t.Logf("%d creates acknowledged, all there once; new leader meta-%d", load.total.Load(), leader+1)

	// The killed member comes back as a follower and catches up; the
	// group keeps serving.
	c.StartMetaMember(old)
	if err := os.WriteFile(filepath.Join(mnt, "after-restart"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// createLoad is an mdtest-style create load through a mount: each worker
// creates small files in its own directory (w<N>), writing and closing
// each, and records the ones acknowledged.
type createLoad struct {
	t       *testing.T
	mnt     string
	acked   [][]string
	errMu   sync.Mutex
	errs    []error
	total   atomic.Int64
	stopped atomic.Bool
	wg      sync.WaitGroup
}

func createContent(w int, name string) []byte { return []byte(fmt.Sprintf("%d/%s\n", w, name)) }

// startCreates starts workers creating files under mnt.
func startCreates(t *testing.T, mnt string, workers int) *createLoad {
	l := &createLoad{t: t, mnt: mnt, acked: make([][]string, workers)}
	for w := range workers {
		dir := filepath.Join(mnt, fmt.Sprintf("w%d", w))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; !l.stopped.Load(); i++ {
				name := fmt.Sprintf("f%06d", i)
				if err := os.WriteFile(filepath.Join(dir, name), createContent(w, name), 0o644); err != nil {
					l.errMu.Lock()
					l.errs = append(l.errs, fmt.Errorf("worker %d: create %s: %w", w, name, err))
					l.errMu.Unlock()
					return
				}
				l.acked[w] = append(l.acked[w], name)
				l.total.Add(1)
			}
		}()
	}
	t.Cleanup(func() { l.stopped.Store(true); l.wg.Wait() })
	return l
}

// wait waits until n more creates were acknowledged (or a worker failed:
// check reports it).
func (l *createLoad) wait(n int64, what string) {
	l.t.Helper()
	want := l.total.Load() + n
	deadline := time.Now().Add(3 * time.Minute) // against hangs only
	for l.total.Load() < want {
		l.errMu.Lock()
		failed := len(l.errs) > 0
		l.errMu.Unlock()
		if failed {
			return
		}
		if time.Now().After(deadline) {
			l.stopped.Store(true)
			l.t.Fatalf("%s: only %d of %d creates acknowledged", what, l.total.Load(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stop stops the workers and fails the test if any saw an error.
func (l *createLoad) stop() {
	l.t.Helper()
	l.stopped.Store(true)
	l.wg.Wait()
	if len(l.errs) > 0 {
		l.t.Fatalf("the application saw errors: %v", l.errs)
	}
}

// check checks, through the mount, that every acknowledged create is
// there exactly once, with its content, and nothing else is.
func (l *createLoad) check() {
	t := l.t
	t.Helper()
	for w := range l.acked {
		dir := filepath.Join(l.mnt, fmt.Sprintf("w%d", w))
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		slices.Sort(names)
		want := slices.Clone(l.acked[w])
		slices.Sort(want)
		if !slices.Equal(names, want) {
			t.Errorf("w%d: %d entries, %d creates acknowledged; extra %v, missing %v", w, len(names), len(want),
				missingFrom(names, want), missingFrom(want, names))
		}
		for _, name := range l.acked[w] {
			got, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Errorf("w%d/%s: %v", w, name, err)
				continue
			}
			if !bytes.Equal(got, createContent(w, name)) {
				t.Errorf("w%d/%s holds %q, want %q", w, name, got, createContent(w, name))
			}
		}
	}
}

// missingFrom returns the elements of a (sorted) not in b (sorted).
func missingFrom(a, b []string) []string {
	var out []string
	for _, x := range a {
		if _, ok := slices.BinarySearch(b, x); !ok {
			out = append(out, x)
		}
	}
	return out
}

// metaCall sends one request to the metadata server at addr over one
// connection (the helper "meta"; no following of the leader: the answer
// is that server's own), authenticated with the key bundle in keys, and
// gives up after 15 s.
func metaCall(addr, keys, op, name string) error {
	k, err := auth.Load(keys)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	conn, err := transport.NewTCPWith(transport.TCPOptions{Security: k.Security(false)}).Dial(ctx, addr)
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	defer conn.Close()
	c := metarpc.NewConnClient(conn)
	switch op {
	case "lookup":
		_, err = c.Lookup(ctx, proto.RootIno, name)
	case "mkdir":
		_, err = c.Mkdir(ctx, proto.RootIno, name, 0o755, 0, 0)
	default:
		return fmt.Errorf("unknown op %q", op)
	}
	return err
}

// runHelperIn runs a helper command inside network namespace ns.
func runHelperIn(t testing.TB, ns string, args ...string) string {
	t.Helper()
	bin, err := helperBinary()
	if err != nil {
		t.Fatalf("helper: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns, bin}, args...)...)
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper %v in %s: %v\n%s", args, ns, err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// TestHAPartitionLeader cuts the leader of a replicated metadata group of
// three real processes off the network (its network namespace's link
// goes down; it keeps running) while a mount works: the majority elects
// a new leader and the mount's creates go on; the cut-off leader never
// acknowledges a change (a mkdir sent to it from inside its namespace
// fails, and the directory never appears) and never answers a read with
// stale data (a lookup of a file the majority created meanwhile does not
// answer ENOENT); once healed it rejoins as a follower and every
// acknowledged create is there exactly once.
func TestHAPartitionLeader(t *testing.T) {
	t.Parallel() // waits on elections, on a cluster of its own
	c := testcluster.Start(t, testcluster.Options{
		Servers: 1, Targets: 2, MetaReplicas: 3, MetaNetNS: true, Timeout: "30s",
	})
	mnt := c.Mount(0)
	old := c.WaitMetaLeader()
	dir := filepath.Join(mnt, "d")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var acked []string
	create := func(name string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(name), 0o644); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		acked = append(acked, name)
	}
	for i := range 20 {
		create(fmt.Sprintf("before-%d", i))
	}

	t.Logf("cutting off leader meta-%d", old+1)
	c.PartitionMetaMember(old)
	ns, addr := c.MetaMemberNetNS(old), c.MetaMemberAddr(old)
	// The mount follows the majority's new leader: creates go on.
	for i := range 20 {
		create(fmt.Sprintf("during-%d", i))
	}
	if err := os.Mkdir(filepath.Join(mnt, "majority-dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	leader := c.WaitMetaLeader()
	if leader == old {
		t.Fatalf("the cut-off meta-%d is still reported leader", old+1)
	}
	// From inside its namespace, the cut-off member is asked directly: it
	// must neither acknowledge a change nor answer from its stale state.
	// It answers EAGAIN (it stepped down: no quorum), or nothing before
	// the helper gives up (ETIMEDOUT: a read or proposal it cannot
	// confirm with a quorum); never success, and never ENOENT.
	refused := func(got string) bool {
		return strings.HasPrefix(got, "EAGAIN ") || strings.HasPrefix(got, "ETIMEDOUT ")
	}
	if got := runHelperIn(t, ns, "meta", addr, c.Keys("client"), "mkdir", "minority-dir"); !refused(got) {
		t.Fatalf("the cut-off leader answered a mkdir with %s, want EAGAIN or ETIMEDOUT", got)
	} else {
		t.Logf("mkdir at the cut-off leader: %s", got)
	}
	if got := runHelperIn(t, ns, "meta", addr, c.Keys("client"), "lookup", "majority-dir"); !refused(got) {
		t.Fatalf("the cut-off leader answered a lookup of a directory the majority made with %s (want EAGAIN or ETIMEDOUT, never a stale answer)", got)
	} else {
		t.Logf("lookup at the cut-off leader: %s", got)
	}

	c.HealMetaMember(old)
	for i := range 10 {
		create(fmt.Sprintf("after-%d", i))
	}
	// Once healed, the old leader is a follower of the majority's leader:
	// it names it, and knows the majority's changes.
	deadline := time.Now().Add(time.Minute) // against hangs only
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		m, err := c.MetaMembers(ctx, old)
		cancel()
		if err == nil && m.Leader != 0 && m.Leader != uint64(old+1) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the healed meta-%d does not follow a leader: %+v, %v", old+1, m, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := os.Stat(filepath.Join(mnt, "minority-dir")); !os.IsNotExist(err) {
		t.Fatalf("the mkdir sent to the cut-off leader was applied: %v", err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	slices.Sort(acked)
	if !slices.Equal(names, acked) {
		t.Fatalf("%d entries, %d creates acknowledged; extra %v, missing %v", len(names), len(acked),
			missingFrom(names, acked), missingFrom(acked, names))
	}
}
