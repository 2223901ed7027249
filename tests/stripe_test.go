package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/weft-fs/weft/internal/testcluster"
)

func weft(t testing.TB, c *testcluster.Cluster, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	out, err := c.Weft(ctx, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestStriping checks setstripe/getstripe/df and that data striped over 4
// targets on 2 servers reads back, also from a mount that never cached it.
func TestStriping(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Servers: 2, Targets: 4, Mounts: 2})
	mnt := c.Mount(0)
	d := filepath.Join(mnt, "striped")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	weft(t, c, "setstripe", "-c", "4", "-S", "1M", d)
	p := filepath.Join(d, "f")
	want := pattern(7, 0, 9<<20+12345)
	if err := os.WriteFile(p, want, 0o644); err != nil {
		t.Fatal(err)
	}

	var l testcluster.Layout
	out := weft(t, c, "getstripe", "--json", p)
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("getstripe --json: %v: %q", err, out)
	}
	seen := map[uint32]bool{}
	for _, id := range l.Targets {
		seen[id] = true
	}
	if l.StripeCount != 4 || l.StripeSize != 1<<20 || len(seen) != 4 || len(l.Targets) != 4 {
		t.Errorf("getstripe: %+v, want 4 distinct targets, 1 MiB stripes", l)
	}
	if dl, err := testcluster.GetLayout(d); err != nil || dl.StripeCount != 4 || dl.StripeSize != 1<<20 {
		t.Errorf("directory layout: %+v %v", dl, err)
	}
	// On the directory: its default, then its file; -d: only the directory.
	if out := weft(t, c, "getstripe", "--json", d); strings.Count(out, "\n") != 2 || !strings.Contains(out, `"path":"`+p+`"`) {
		t.Errorf("getstripe --json DIR: %q", out)
	}
	if out := weft(t, c, "getstripe", "-d", "--json", d); strings.Count(out, "\n") != 1 || !strings.Contains(out, `"path":"`+d+`"`) {
		t.Errorf("getstripe -d --json DIR: %q", out)
	}
	if out := weft(t, c, "getstripe", "-r", mnt); !strings.Contains(out, p+"\n") {
		t.Errorf("getstripe -r of the mount does not show %s: %q", p, out)
	}
	if txt := weft(t, c, "getstripe", p); !strings.Contains(txt, "1") {
		t.Errorf("getstripe (text): %q", txt)
	}

	for i := 0; i < 2; i++ {
		got, err := os.ReadFile(filepath.Join(c.Mount(i), "striped", "f"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("mount %d: read back: %s", i, firstDiff(got, want))
		}
	}

	// The data really is on 4 targets: every target dir holds part of it.
	var sum int64
	for _, td := range c.AllTargetDirs() {
		var n int64
		filepath.WalkDir(td, func(path string, de fs.DirEntry, err error) error {
			if err == nil && de.Type().IsRegular() && strings.Contains(path, "objects") {
				if fi, err := de.Info(); err == nil {
					n += fi.Size()
				}
			}
			return nil
		})
		if n < 2<<20 {
			t.Errorf("%s holds %d bytes of objects, want at least 2 MiB of the 9 MiB file", td, n)
		}
		sum += n
	}
	t.Logf("object bytes on all targets: %d (file %d)", sum, len(want))

	var dfOut struct {
		Targets []testcluster.TargetInfo `json:"targets"`
		Summary struct {
			Total   uint64 `json:"total"`
			Targets int    `json:"targets"`
			Up      int    `json:"up"`
		} `json:"summary"`
	}
	out = weft(t, c, "df", "--json", mnt)
	if err := json.Unmarshal([]byte(out), &dfOut); err != nil {
		t.Fatalf("df --json: %v: %q", err, out)
	}
	df := dfOut.Targets
	if s := dfOut.Summary; s.Targets != 4 || s.Up != 4 || s.Total == 0 {
		t.Errorf("df --json summary: %+v", s)
	}
	ids := map[uint32]bool{}
	for _, ti := range df {
		ids[ti.ID] = true
		if !ti.Up || ti.Total == 0 || ti.Addr == "" {
			t.Errorf("df entry %+v", ti)
		}
	}
	if len(df) != 4 || len(ids) != 4 {
		t.Errorf("df lists %d targets (%d ids), want 4", len(df), len(ids))
	}
	for id := range seen {
		if !ids[id] {
			t.Errorf("layout target %d is not in df", id)
		}
	}
	weft(t, c, "df", mnt) // the table form works too

	// The four targets live on one file system (the test's temporary
	// directory): df and statfs(2) count it once, not four times.
	if df[0].Device == "" || df[1].Device != df[0].Device {
		t.Errorf("targets on one file system report devices %q and %q", df[0].Device, df[1].Device)
	}
	if s := dfOut.Summary; s.Total != df[0].Total {
		t.Errorf("df summary total %d, want the one file system's %d", s.Total, df[0].Total)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(mnt, &st); err != nil || uint64(st.Blocks)*uint64(st.Bsize) > df[0].Total+df[0].Total/100 {
		t.Errorf("statfs of the mount: %d blocks of %d (%v), more than the one file system's %d bytes", st.Blocks, st.Bsize, err, df[0].Total)
	}
	if out := weft(t, c, "df", "-i", mnt); !strings.Contains(out, "metadata") || !strings.Contains(out, fmt.Sprintf("target-%d ", df[0].ID)) {
		t.Errorf("df -i: %q", out)
	}

	// A new file in the dir inherits; a file with its own layout keeps it.
	p2 := filepath.Join(d, "g")
	os.WriteFile(p2, []byte("x"), 0o644)
	if l2, err := testcluster.GetLayout(p2); err != nil || l2.StripeCount != 4 || len(l2.Targets) != 4 {
		t.Errorf("inherited layout: %+v %v", l2, err)
	}
	empty := filepath.Join(d, "empty")
	os.WriteFile(empty, nil, 0o644)
	weft(t, c, "setstripe", "-c", "2", "-S", "64K", empty)
	if l3, err := testcluster.GetLayout(empty); err != nil || l3.StripeCount != 2 || l3.StripeSize != 64<<10 || len(l3.Targets) != 2 {
		t.Errorf("setstripe on an empty file: %+v %v", l3, err)
	}
	// A written file cannot change layout: its data is already placed.
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if out, err := c.Weft(ctx, "setstripe", "-c", "2", "-S", "64K", p); err == nil {
		t.Errorf("setstripe on a written file succeeded: %s", out)
	}

	// -d gives a directory the file system's default (the root's layout)
	// again; on the root itself, the built-in default.
	weft(t, c, "setstripe", "-c", "3", "-S", "128K", mnt)
	weft(t, c, "setstripe", "-d", d)
	if dl, err := testcluster.GetLayout(d); err != nil || dl.StripeCount != 3 || dl.StripeSize != 128<<10 || len(dl.Targets) != 0 {
		t.Errorf("directory layout after -d: %+v %v, want the root's (3 x 128 KiB)", dl, err)
	}
	weft(t, c, "setstripe", "-d", mnt)
	if rl, err := testcluster.GetLayout(mnt); err != nil || rl.StripeCount == 3 || rl.StripeSize == 128<<10 {
		t.Errorf("root layout after -d: %+v %v, want the built-in default", rl, err)
	}
	if out, err := c.Weft(ctx, "setstripe", d); err == nil || !strings.Contains(out+err.Error(), "nothing to set") {
		t.Errorf("setstripe without options: %q %v", out, err)
	}
}
