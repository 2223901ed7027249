package tests

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/weft-fs/weft/internal/testcluster"
)

// scrubJSON is `weft scrub --json`.
type scrubJSON struct {
	Targets []struct {
		ID       uint32 `json:"id"`
		Running  bool   `json:"running"`
		End      int64  `json:"end"`
		Bytes    uint64 `json:"bytes"`
		Passes   uint64 `json:"passes"`
		Reported uint64 `json:"reported"`
		Repaired uint64 `json:"repaired"`
		Lost     uint64 `json:"lost"`
	} `json:"targets"`
	Lost []struct {
		Target uint32 `json:"target"`
		Ino    uint64 `json:"ino"`
		Slot   uint32 `json:"slot"`
	} `json:"lost"`
}

func scrubStatus(t *testing.T, c *testcluster.Cluster) scrubJSON {
	t.Helper()
	out := weft(t, c, "scrub", "--json", "--meta", c.MetaAddr(), "--keys", c.Keys("meta"))
	var s scrubJSON
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("scrub --json: %v: %q", err, out)
	}
	return s
}

// waitScrub polls `weft scrub --json` until cond holds (hangGuard).
func waitScrub(t *testing.T, c *testcluster.Cluster, what string, cond func(scrubJSON) bool) scrubJSON {
	t.Helper()
	deadline := time.Now().Add(hangGuard)
	for {
		s := scrubStatus(t, c)
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: scrub status %+v\nmeta log:\n%s", what, s, tailLines(c.Log("meta"), 40))
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// objectPath finds the data file of slot of the file at path in a target
// directory: objects/<xx>/<ino>.<gen>.<slot>.
func objectPath(t *testing.T, dir, path string, slot int) string {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	ino := fi.Sys().(*syscall.Stat_t).Ino
	matches, err := filepath.Glob(filepath.Join(dir, "objects", fmt.Sprintf("%02x", ino&0xff), fmt.Sprintf("%d.*.%d", ino, slot)))
	if err != nil {
		t.Fatal(err)
	}
	var objs []string
	for _, m := range matches {
		if !strings.HasSuffix(m, ".crc") && !strings.HasSuffix(m, ".ver") && strings.Count(filepath.Base(m), ".") == 2 {
			objs = append(objs, m)
		}
	}
	if len(objs) != 1 {
		t.Fatalf("object of inode %d slot %d in %s: %v", ino, slot, dir, matches)
	}
	return objs[0]
}

// flipObject flips a byte in the middle of an object's data file (its
// sidecar untouched: the CRCs no longer match).
func flipObject(t *testing.T, obj string) {
	t.Helper()
	f, err := os.OpenFile(obj, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Size() == 0 {
		t.Fatalf("object %s: %v, %v", obj, fi, err)
	}
	off := fi.Size() / 2
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x5a
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// slotOn is the slot of the file's first stripe whose target is tg.
func slotOn(t *testing.T, c *testcluster.Cluster, path string, tg uint32) int {
	t.Helper()
	i := slices.Index(stripeTargets(t, c, path), tg)
	if i < 0 {
		t.Fatalf("%s has no object on target %d", path, tg)
	}
	return i
}

// scrubTarget is the entry of target id.
func (s scrubJSON) target(id uint32) (r struct {
	Reported, Repaired, Lost, Passes uint64
}) {
	for _, t := range s.Targets {
		if t.ID == id {
			r.Reported, r.Repaired, r.Lost, r.Passes = t.Reported, t.Repaired, t.Lost, t.Passes
		}
	}
	return r
}

// TestScrubRepairs: bytes flipped in an object of a mirror 2 file and in a
// shard of an EC 2+1 file (their data files, not the sidecars) are found
// by `weft scrub --now`, reported, and repaired in place from the files'
// redundancy: the mirror's object equals its other copy again, and a fresh
// mount reads both files right with the server of the other copy stopped
// (so the repaired objects are what it reads). An object of a RAID-0 file
// corrupted the same way is reported lost, and reading it fails with EIO,
// never with other bytes.
func TestScrubRepairs(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{Servers: 3, Targets: 3, Timeout: "10s"})
	byTarget := serverTargets(t, c, 3)
	mnt := c.Mount(0)
	sums := map[string][32]byte{}
	for _, d := range []string{"m", "e", "r"} {
		if err := os.Mkdir(filepath.Join(mnt, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	weft(t, c, "setstripe", "-S", "1M", "--mirror", "2", "-c", "1", filepath.Join(mnt, "m"))
	weft(t, c, "setstripe", "-S", "1M", "--ec", "2+1", "-c", "1", filepath.Join(mnt, "e"))
	weft(t, c, "setstripe", "-S", "1M", "-c", "1", "--raid0", filepath.Join(mnt, "r"))
	data := map[string][]byte{"m/f": pattern(1, 0, 2<<20+300), "e/f": pattern(2, 0, 3<<20+700), "r/f": pattern(3, 0, 1<<20)}
	for name, b := range data {
		if err := writeNew(filepath.Join(mnt, name), b); err != nil {
			t.Fatal(err)
		}
		sums[name] = sha256.Sum256(b)
	}
	// Corrupt the mirror's and the EC file's objects on the server of the
	// mirror's first copy, and the RAID-0 file's only object.
	mt := stripeTargets(t, c, filepath.Join(mnt, "m/f"))
	bad, other := mt[0], mt[1]
	badDir := c.TargetDirs(byTarget[bad])[0]
	mObj := objectPath(t, badDir, filepath.Join(mnt, "m/f"), 0)
	eObj := objectPath(t, badDir, filepath.Join(mnt, "e/f"), slotOn(t, c, filepath.Join(mnt, "e/f"), bad))
	var g getstripeJSON
	if err := json.Unmarshal([]byte(weft(t, c, "getstripe", "--json", filepath.Join(mnt, "r/f"))), &g); err != nil || len(g.Stripes) != 1 || len(g.Stripes[0].Targets) != 1 {
		t.Fatalf("getstripe of the RAID-0 file: %+v, %v", g, err)
	}
	rt := g.Stripes[0].Targets[0]
	rObj := objectPath(t, c.TargetDirs(byTarget[rt])[0], filepath.Join(mnt, "r/f"), 0)
	mOther := objectPath(t, c.TargetDirs(byTarget[other])[0], filepath.Join(mnt, "m/f"), 1)
	eBefore, err := os.ReadFile(eObj)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []string{mObj, eObj, rObj} {
		flipObject(t, o)
	}

	out := weft(t, c, "scrub", "--now", "--meta", c.MetaAddr(), "--keys", c.Keys("meta"))
	if !strings.Contains(out, "scrub started on 3 targets") {
		t.Fatalf("scrub --now: %q", out)
	}
	s := waitScrub(t, c, "the repair of 2 objects and 1 lost", func(s scrubJSON) bool {
		b, r := s.target(bad), s.target(rt)
		if rt == bad {
			return b.Repaired == 2 && b.Lost == 1
		}
		return b.Repaired == 2 && r.Lost == 1
	})
	if len(s.Lost) != 1 || s.Lost[0].Target != rt || s.Lost[0].Slot != 0 {
		t.Fatalf("lost objects %+v, want the RAID-0 file's object on target %d", s.Lost, rt)
	}
	// The repaired mirror copy is its other copy again, byte for byte; the
	// EC shard is what it was before the flip.
	for _, p := range [][2]string{{mObj, mOther}, {eObj, ""}} {
		got, err := os.ReadFile(p[0])
		if err != nil {
			t.Fatal(err)
		}
		want := eBefore
		if p[1] != "" {
			if want, err = os.ReadFile(p[1]); err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s after the repair: %d bytes, differ from the good %d at %s", p[0], len(got), len(want), firstDiff(got, want))
		}
	}
	// `weft status` shows the scrub, and is unhealthy: an object is lost.
	st, err := c.Weft(t.Context(), "status", "--meta", c.MetaAddr(), "--keys", c.Keys("meta"))
	if err == nil || !strings.Contains(st, "scrub:") || !strings.Contains(st, "1 lost") {
		t.Fatalf("weft status after a lost object: %v\n%s", err, st)
	}
	// The RAID-0 file reads EIO, not other bytes.
	fresh := c.Mount(c.AddMount())
	if b, err := os.ReadFile(filepath.Join(fresh, "r/f")); !errors.Is(err, syscall.EIO) {
		t.Fatalf("read of the RAID-0 file with a lost object: %d bytes, %v; want EIO", len(b), err)
	}
	// With the other copy's server stopped, a mount that cached nothing
	// reads the repaired objects.
	c.StopStorage(byTarget[other])
	fresh = c.Mount(c.AddMountUp(2))
	for _, name := range []string{"m/f", "e/f"} {
		b, err := os.ReadFile(filepath.Join(fresh, name))
		if err != nil {
			t.Fatalf("read %s with target %d's server stopped: %v", name, other, err)
		}
		if sha256.Sum256(b) != sums[name] {
			t.Fatalf("%s read back wrong after the repair (%s)", name, firstDiff(b, data[name]))
		}
	}
}

// TestScrubReadRepairs: a corruption found by a client's read (no scrub
// pass) is reported by the storage server that found it and repaired the
// same way: with the good copy's server stopped the read fails (the only
// copy left is corrupt), the object is marked stale, and once that server
// is back the rebuild rewrites it; then it reads right with the good
// copy's server stopped again.
func TestScrubReadRepairs(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{Servers: 2, Targets: 2, Timeout: "10s"})
	byTarget := serverTargets(t, c, 2)
	mnt := c.Mount(0)
	d := filepath.Join(mnt, "m")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	weft(t, c, "setstripe", "-S", "1M", "--mirror", "2", "-c", "1", d)
	want := pattern(4, 0, 1<<20+5000)
	p := filepath.Join(d, "f")
	if err := writeNew(p, want); err != nil {
		t.Fatal(err)
	}
	mt := stripeTargets(t, c, p)
	bad, good := mt[0], mt[1]
	// A new target's first pass runs at its server's start; the next is
	// a week (scrub.interval) away. Once it is reported, no pass runs
	// during the test: only the read can find the corruption.
	passes := waitScrub(t, c, "the first pass", func(s scrubJSON) bool { return s.target(bad).Passes > 0 }).target(bad).Passes
	flipObject(t, objectPath(t, c.TargetDirs(byTarget[bad])[0], p, 0))

	start := time.Now()
	c.StopStorage(byTarget[good])
	// Until the metadata service sees the good copy's target down, its
	// return would not make the rebuild look again at once (it would in
	// its next periodic scan, a minute on).
	deadline := time.Now().Add(hangGuard)
	for down := false; !down; {
		for _, tg := range targetList(t, c).Targets {
			down = down || (tg.ID == good && !tg.Up)
		}
		if time.Now().After(deadline) {
			t.Fatalf("target %d still up with its server stopped", good)
		}
		time.Sleep(200 * time.Millisecond)
	}
	m := c.Mount(c.AddMountUp(1))
	t.Logf("%v: mounted with target %d's server stopped", time.Since(start), good)
	if b, err := os.ReadFile(filepath.Join(m, "m/f")); err == nil {
		t.Fatalf("read with only the corrupt copy up returned %d bytes", len(b))
	}
	t.Logf("%v: the read failed", time.Since(start))
	waitScrub(t, c, "the read's report", func(s scrubJSON) bool { return s.target(bad).Reported == 1 })
	t.Logf("%v: reported", time.Since(start))
	c.StartStorage(byTarget[good])
	s := waitScrub(t, c, "the repair", func(s scrubJSON) bool { return s.target(bad).Repaired == 1 })
	t.Logf("%v: repaired", time.Since(start))
	if got := s.target(bad); got.Passes != passes || got.Lost != 0 {
		t.Fatalf("a scrub pass ran, or the object counts lost: %+v (passes before %d)", got, passes)
	}
	c.StopStorage(byTarget[good])
	m = c.Mount(c.AddMountUp(1))
	b, err := os.ReadFile(filepath.Join(m, "m/f"))
	if err != nil || !bytes.Equal(b, want) {
		t.Fatalf("read of the repaired copy alone: %d bytes, %v (%s)", len(b), err, firstDiff(b, want))
	}
}

// sumMetric adds up every series of a counter (-1: no such metric).
func sumMetric(fams map[string]*dto.MetricFamily, name string) float64 {
	f := fams[name]
	if f == nil {
		return -1
	}
	var s float64
	for _, m := range f.GetMetric() {
		s += m.GetCounter().GetValue()
	}
	return s
}

// TestScrubMetrics: a storage server's --metrics counts the bytes its
// scrub checked and the corrupt objects found; `weft scrub` names the lost
// object of a RAID-0 file.
func TestScrubMetrics(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	c := testcluster.Start(t, testcluster.Options{Servers: 1, Targets: 2, StorageArgs: []string{"--metrics", addr}})
	p := filepath.Join(c.Mount(0), "f")
	const size = 3 << 20
	if err := writeNew(p, pattern(9, 0, size)); err != nil {
		t.Fatal(err)
	}
	l, err := testcluster.GetLayout(p)
	if err != nil || len(l.Targets) == 0 {
		t.Fatalf("layout %+v, %v", l, err)
	}
	// Slot 0's object, in whichever target directory holds it (the file
	// is the only one).
	var dir string
	for _, d := range c.AllTargetDirs() {
		if m, _ := filepath.Glob(filepath.Join(d, "objects", "*", "*.*.0")); len(m) > 0 {
			dir = d
		}
	}
	if dir == "" {
		t.Fatalf("no target directory holds slot 0 of %s", p)
	}
	flipObject(t, objectPath(t, dir, p, 0))
	// --wait returns once both targets' passes ended (a hang guard as its
	// timeout): the metrics count them by then.
	out := weft(t, c, "scrub", "--now", "--wait", "--timeout", hangGuard.String(), "--meta", c.MetaAddr(), "--keys", c.Keys("meta"))
	if !strings.Contains(out, "target-") || strings.Contains(out, "running") {
		t.Fatalf("weft scrub --now --wait:\n%s", out)
	}
	m := scrape(t, addr)
	if bytes, bad := sumMetric(m, "weft_scrub_bytes_total"), sumMetric(m, "weft_scrub_corrupt_total"); bad != 1 || bytes <= 0 {
		t.Fatalf("metrics after the pass: weft_scrub_bytes_total %v, weft_scrub_corrupt_total %v", bytes, bad)
	}
	waitScrub(t, c, "the lost object", func(s scrubJSON) bool { return len(s.Lost) == 1 })
	out = weft(t, c, "scrub", "--meta", c.MetaAddr(), "--keys", c.Keys("meta"))
	if !strings.Contains(out, "LOST: target-") || !strings.Contains(out, "slot 0") {
		t.Fatalf("weft scrub:\n%s", out)
	}
}
