package tests

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weft-fs/weft/internal/testcluster"
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
	c := testcluster.Start(t, testcluster.Options{
		Servers: 1, Targets: 2, MetaReplicas: 3,
		// The mount's RPC timeout bounds how long it follows the group
		// through an election; generous, the machine is slow.
		Timeout: "30s",
	})
	mnt := c.Mount(0)
	old := c.WaitMetaLeader()

	const workers = 4
	var (
		acked   [workers][]string
		errs    []error
		errMu   sync.Mutex
		total   atomic.Int64
		stop    atomic.Bool
		wg      sync.WaitGroup
		content = func(w int, name string) []byte { return []byte(fmt.Sprintf("%d/%s\n", w, name)) }
	)
	for w := range workers {
		dir := filepath.Join(mnt, fmt.Sprintf("w%d", w))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				name := fmt.Sprintf("f%06d", i)
				if err := os.WriteFile(filepath.Join(dir, name), content(w, name), 0o644); err != nil {
					errMu.Lock()
					errs = append(errs, fmt.Errorf("worker %d: create %s: %w", w, name, err))
					errMu.Unlock()
					return
				}
				acked[w] = append(acked[w], name)
				total.Add(1)
			}
		}()
	}
	// waitCreates waits until n more creates were acknowledged (or a
	// worker failed: the check below reports it).
	waitCreates := func(n int64, what string) {
		t.Helper()
		want := total.Load() + n
		deadline := time.Now().Add(3 * time.Minute) // against hangs only
		for total.Load() < want {
			errMu.Lock()
			failed := len(errs) > 0
			errMu.Unlock()
			if failed {
				return
			}
			if time.Now().After(deadline) {
				stop.Store(true)
				t.Fatalf("%s: only %d of %d creates acknowledged", what, total.Load(), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitCreates(200, "before the kill")
	t.Logf("killing leader meta-%d (pid %d) after %d creates", old+1, c.MetaMemberPID(old), total.Load())
	c.StopMetaMember(old)
	waitCreates(200, "after the kill")
	stop.Store(true)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("the application saw errors across the failover: %v", errs)
	}
	leader := c.WaitMetaLeader()
	if leader == old {
		t.Fatalf("meta-%d was killed but is reported leader", old+1)
	}

	for w := range workers {
		dir := filepath.Join(mnt, fmt.Sprintf("w%d", w))
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		slices.Sort(names)
		want := slices.Clone(acked[w])
		slices.Sort(want)
		if !slices.Equal(names, want) {
			t.Errorf("w%d: %d entries, %d creates acknowledged; extra %v, missing %v", w, len(names), len(want),
				missingFrom(names, want), missingFrom(want, names))
		}
		for _, name := range acked[w] {
			got, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Errorf("w%d/%s: %v", w, name, err)
				continue
			}
			if !bytes.Equal(got, content(w, name)) {
				t.Errorf("w%d/%s holds %q, want %q", w, name, got, content(w, name))
			}
		}
	}
	t.Logf("%d creates acknowledged, all there once; new leader meta-%d", total.Load(), leader+1)

	// The killed member comes back as a follower and catches up; the
	// group keeps serving.
	c.StartMetaMember(old)
	if err := os.WriteFile(filepath.Join(mnt, "after-restart"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
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
