package tests

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weft-fs/weft/internal/testcluster"
)

// rebuildSizes are the sizes of the files the rebuild tests write: empty,
// smaller than a block, around stripe units, several units.
var rebuildSizes = []int{0, 1, 4095, 1 << 20, 1<<20 + 7, 3<<20 + 100, 9 << 20}

// writeRebuildFiles writes files of rebuildSizes (random bytes) under d and
// returns their SHA-256 by name.
func writeRebuildFiles(t *testing.T, d string, seed uint64) map[string][32]byte {
	t.Helper()
	sums := map[string][32]byte{}
	r := rand.New(rand.NewPCG(seed, seed))
	for i, n := range rebuildSizes {
		b := make([]byte, n)
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		name := fmt.Sprintf("f%d", i)
		if err := writeNew(filepath.Join(d, name), b); err != nil {
			t.Fatal(err)
		}
		sums[name] = sha256.Sum256(b)
	}
	return sums
}

// writeNew creates path with b, synced.
func writeNew(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// checkSums reads every file of sums under d and compares.
func checkSums(t *testing.T, d string, sums map[string][32]byte) {
	t.Helper()
	for name, want := range sums {
		b, err := os.ReadFile(filepath.Join(d, name))
		if err != nil {
			t.Fatalf("read %s: %v", name, err)
		}
		if sha256.Sum256(b) != want {
			t.Fatalf("%s: %d bytes read back differ from what was written", name, len(b))
		}
	}
}

// targetAdmin runs `weft target ARGS` against the cluster's metadata
// server with the metadata server's key (root).
func targetAdmin(t *testing.T, c *testcluster.Cluster, args ...string) string {
	t.Helper()
	return weft(t, c, append(append([]string{"target"}, args...), "--meta", c.MetaAddr(), "--keys", c.Keys("meta"))...)
}

type targetListJSON struct {
	Targets []struct {
		ID      uint32 `json:"id"`
		State   string `json:"state"`
		Up      bool   `json:"up"`
		Objects uint64 `json:"objects"`
		Pending uint64 `json:"pending"`
	} `json:"targets"`
	Rebuild struct {
		Active    bool   `json:"active"`
		Passes    uint64 `json:"passes"`
		Objects   uint64 `json:"objects"`
		Done      uint64 `json:"done"`
		BytesDone uint64 `json:"bytes_done"`
		Failed    uint64 `json:"failed"`
		Lost      uint64 `json:"lost"`
	} `json:"rebuild"`
}

func targetList(t *testing.T, c *testcluster.Cluster) targetListJSON {
	t.Helper()
	var l targetListJSON
	out := targetAdmin(t, c, "list", "--json")
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("target list --json: %v: %q", err, out)
	}
	return l
}

// filesOn lists the files under root with an object on target id, asking
// the metadata server (weft find --target), not a mount's cache.
func filesOn(t *testing.T, c *testcluster.Cluster, root string, id uint32) []string {
	t.Helper()
	out := weft(t, c, "find", root, "--type", "f", "--target", strconv.Itoa(int(id)), "--keys", c.Keys("client"))
	var files []string
	for _, l := range strings.Split(out, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			files = append(files, l)
		}
	}
	return files
}

// waitMovedOff waits until no file under root names target id and the
// rebuild is idle.
func waitMovedOff(t *testing.T, c *testcluster.Cluster, root string, id uint32) targetListJSON {
	t.Helper()
	// Generous: a few small files take seconds; only a hang takes this.
	const guard = 4 * time.Minute
	deadline := time.Now().Add(guard)
	for {
		l := targetList(t, c)
		if !l.Rebuild.Active && len(filesOn(t, c, root, id)) == 0 {
			return l
		}
		if time.Now().After(deadline) {
			t.Fatalf("files still on target %d after %v: %v; target list %+v; meta log:\n%s", id, guard,
				filesOn(t, c, root, id), l, tailLines(c.Log("meta"), 40))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func tailLines(s string, n int) string {
	ls := strings.Split(s, "\n")
	return strings.Join(ls[max(0, len(ls)-n):], "\n")
}

// getstripeJSON is `weft getstripe --json`.
type getstripeJSON struct {
	Kind    string `json:"kind"`
	Stripes []struct {
		Targets []uint32 `json:"targets"`
		Stale   []uint32 `json:"stale"`
	} `json:"stripes"`
}

// checkNoSlotOn checks with getstripe (on a mount that never saw the old
// layouts) that no file of sums under d has an object on target id, and
// none is stale.
func checkNoSlotOn(t *testing.T, c *testcluster.Cluster, d string, sums map[string][32]byte, id uint32) {
	t.Helper()
	for name := range sums {
		out := weft(t, c, "getstripe", "--json", filepath.Join(d, name))
		var g getstripeJSON
		if err := json.Unmarshal([]byte(out), &g); err != nil {
			t.Fatalf("getstripe --json: %v: %q", err, out)
		}
		for _, s := range g.Stripes {
			if slices.Contains(s.Targets, id) || len(s.Stale) > 0 {
				t.Fatalf("%s after the rebuild: %s", name, out)
			}
		}
	}
}

// serverTargets maps each target id to the index of its storage server.
func serverTargets(t testing.TB, c *testcluster.Cluster, servers int) map[uint32]int {
	t.Helper()
	df, err := testcluster.DF(c.Mount(0))
	if err != nil {
		t.Fatal(err)
	}
	m := map[uint32]int{}
	for _, ti := range df {
		for i := range servers {
			if ti.Addr == c.StorageAddr(i) {
				m[ti.ID] = i
			}
		}
	}
	return m
}

// lostTargetRebuild: a storage server's target directory is deleted with
// the server killed, the target is marked out, the metadata service
// rebuilds its objects on the other servers storage to storage, and every
// file reads back right with that server gone; getstripe shows no object
// on the lost target and none stale. The lost target is the one of the
// 1-byte file's slot 1 (with EC 2+1 a data shard holding no byte, only
// its row's version), and the second server stopped holds that file's
// slot 0: reading it back needs the rebuilt object.
func lostTargetRebuild(t *testing.T, servers int, flags ...string) {
	c := testcluster.Start(t, testcluster.Options{Servers: servers, Targets: servers, Timeout: "10s"})
	d := filepath.Join(c.Mount(0), "r")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	weft(t, c, append(append([]string{"setstripe", "-S", "1M"}, flags...), d)...)
	sums := writeRebuildFiles(t, d, 1)
	byTarget := serverTargets(t, c, servers)
	const probe = "f1" // rebuildSizes[1]: 1 byte
	lost := stripeTargets(t, c, filepath.Join(d, probe))[1]
	lostServer := byTarget[lost]
	c.StopStorage(lostServer)
	for _, dir := range c.TargetDirs(lostServer) {
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
	}
	targetAdmin(t, c, "out", strconv.Itoa(int(lost)))
	l := waitMovedOff(t, c, d, lost)
	if l.Rebuild.Lost != 0 || l.Rebuild.Passes == 0 {
		t.Fatalf("rebuild: %+v", l.Rebuild)
	}
	for _, tg := range l.Targets {
		if tg.ID == lost && (tg.State != "out" || tg.Pending != 0) {
			t.Fatalf("lost target after the rebuild: %+v", tg)
		}
	}
	mnt := c.Mount(c.AddMountUp(servers - 1))
	nd := filepath.Join(mnt, "r")
	checkSums(t, nd, sums)
	checkNoSlotOn(t, c, nd, sums, lost)
	// Fully protected again: with one more server gone, every file still
	// reads back (from a mount that has nothing cached).
	c.StopStorage(byTarget[stripeTargets(t, c, filepath.Join(nd, probe))[0]])
	checkSums(t, filepath.Join(c.Mount(c.AddMountUp(servers-2)), "r"), sums)
	// A lost target cannot be removed while... it holds nothing now:
	// remove succeeds, and it may not come back.
	targetAdmin(t, c, "remove", strconv.Itoa(int(lost)))
}

// stripeTargets is the targets of a file's first stripe (getstripe).
func stripeTargets(t *testing.T, c *testcluster.Cluster, path string) []uint32 {
	t.Helper()
	out := weft(t, c, "getstripe", "--json", path)
	var g getstripeJSON
	if err := json.Unmarshal([]byte(out), &g); err != nil || len(g.Stripes) == 0 || len(g.Stripes[0].Targets) < 2 {
		t.Fatalf("getstripe --json %s: %v: %q", path, err, out)
	}
	return g.Stripes[0].Targets
}

// TestRebuildMirrorLostTarget: lostTargetRebuild on mirror 2 files over 4
// servers.
func TestRebuildMirrorLostTarget(t *testing.T) {
	lostTargetRebuild(t, 4, "--mirror", "2", "-c", "1")
}

// TestRebuildECLostTarget: lostTargetRebuild on ec 2+1 files over 5
// servers: the lost shards are decoded by their new servers.
func TestRebuildECLostTarget(t *testing.T) {
	lostTargetRebuild(t, 5, "--ec", "2+1", "-c", "1")
}

// objectFiles counts the object data files (not their .crc sidecars) in
// a target directory.
func objectFiles(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(filepath.Join(dir, "objects"), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && !strings.HasSuffix(p, ".crc") {
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestTargetDrain: a target is drained while a reader reads every file
// over and over: every read returns the right bytes, no file names the
// target afterwards, its objects are removed after the grace for readers
// of the old layout, and it can then be removed. RAID-0 files move too
// (striped over 2 of the 3 targets: a file uses a target once, so a file
// striped over all of them could not move).
func TestTargetDrain(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Servers: 3, Targets: 3, Timeout: "10s",
		MetaArgs: []string{"--moved-object-grace", "2s"}})
	dm := filepath.Join(c.Mount(0), "m")
	dr := filepath.Join(c.Mount(0), "r0")
	for _, d := range []string{dm, dr} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	weft(t, c, "setstripe", "-S", "1M", "--mirror", "2", "-c", "1", dm)
	weft(t, c, "setstripe", "-S", "1M", "-c", "2", "--raid0", dr)
	sumsM := writeRebuildFiles(t, dm, 2)
	sumsR := writeRebuildFiles(t, dr, 3)
	byTarget := serverTargets(t, c, 3)
	var drained uint32
	for id, i := range byTarget {
		if i == 0 {
			drained = id
		}
	}
	if len(filesOn(t, c, c.Mount(0), drained)) == 0 {
		t.Fatalf("no file on target %d", drained)
	}
	// Remove is refused while the target holds the only copy of RAID-0
	// objects.
	out := weftFails(t, c, "target", "remove", strconv.Itoa(int(drained)), "--meta", c.MetaAddr(), "--keys", c.Keys("meta"))
	if !strings.Contains(out, "only readable copy") {
		t.Fatalf("remove of a target with the only copy: %q", out)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var readErr error
	reads := 0
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, set := range []struct {
				d    string
				sums map[string][32]byte
			}{{dm, sumsM}, {dr, sumsR}} {
				for name, want := range set.sums {
					b, err := os.ReadFile(filepath.Join(set.d, name))
					if err == nil && sha256.Sum256(b) != want {
						err = fmt.Errorf("%s/%s: %d bytes read back differ", set.d, name, len(b))
					}
					if err != nil {
						readErr = err
						return
					}
					reads++
				}
			}
		}
	})
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()
	targetAdmin(t, c, "drain", strconv.Itoa(int(drained)))
	waitMovedOff(t, c, c.Mount(0), drained)
	close(stop)
	wg.Wait()
	if readErr != nil {
		t.Fatalf("a read during the drain failed: %v", readErr)
	}
	if reads == 0 {
		t.Fatal("the reader read nothing")
	}
	mnt := c.Mount(c.AddMount())
	checkSums(t, filepath.Join(mnt, "m"), sumsM)
	checkSums(t, filepath.Join(mnt, "r0"), sumsR)
	checkNoSlotOn(t, c, filepath.Join(mnt, "m"), sumsM, drained)
	checkNoSlotOn(t, c, filepath.Join(mnt, "r0"), sumsR, drained)
	// The target ends empty: its objects are removed from its directory
	// after the grace for readers of the old layout.
	dir := c.TargetDirs(byTarget[drained])[0]
	if n := objectFiles(t, dir); n == 0 {
		t.Fatalf("target %d's directory %s holds no object right after the drain: the test checks nothing", drained, dir)
	}
	deadline := time.Now().Add(hangGuard)
	for n := objectFiles(t, dir); n > 0; n = objectFiles(t, dir) {
		if time.Now().After(deadline) {
			t.Fatalf("target %d still holds %d objects after its drain", drained, n)
		}
		time.Sleep(500 * time.Millisecond)
	}
	targetAdmin(t, c, "remove", strconv.Itoa(int(drained)))
	l := targetList(t, c)
	for _, tg := range l.Targets {
		if tg.ID == drained && tg.State != "removed" {
			t.Fatalf("target %d after remove: %+v", drained, tg)
		}
	}
	// A new file goes to the other targets only.
	p := filepath.Join(mnt, "m", "new")
	if err := writeNew(p, bytes.Repeat([]byte("x"), 5000)); err != nil {
		t.Fatal(err)
	}
	var g getstripeJSON
	if err := json.Unmarshal([]byte(weft(t, c, "getstripe", "--json", p)), &g); err != nil {
		t.Fatal(err)
	}
	for _, s := range g.Stripes {
		if slices.Contains(s.Targets, drained) {
			t.Fatalf("a new file was placed on removed target %d: %+v", drained, g)
		}
	}
}
