package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weft-fs/weft/internal/testcluster"
)

// TestFind: weft find, asking the metadata service, prints the same paths
// find(1) finds by crawling the mount, for each kind of condition, also
// through a directory bigger than one directory read (paging through
// replies is tested in package meta).
func TestFind(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Servers: 1, Targets: 2})
	mnt := c.Mount(0)
	root := filepath.Join(mnt, "tree")
	for _, d := range []string{"a/b", "a/c", "big"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	weft(t, c, "setstripe", "-c", "1", filepath.Join(root, "a/c"))
	files := map[string]int{"a/x.h5": 3 << 20, "a/b/y.h5": 10, "a/b/z.txt": 0, "a/c/w.h5": 2 << 20}
	for p, size := range files {
		if err := os.WriteFile(filepath.Join(root, p), make([]byte, size), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 1500 { // more than one directory read (1,024 entries)
		f, err := os.Create(filepath.Join(root, "big", fmt.Sprintf("f%05d", i)))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	if err := os.Symlink("x.h5", filepath.Join(root, "a/link")); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-72 * time.Hour)
	if err := os.Chtimes(filepath.Join(root, "a/b/y.h5"), old, old); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(root, "a/b/z.txt"), 4242, 4343); err != nil {
		t.Fatal(err)
	}
	lines := func(s string) []string {
		l := strings.Fields(s)
		slices.Sort(l)
		return l
	}
	for _, tc := range []struct {
		weft, find []string // conditions, weft find's and find(1)'s
	}{
		{[]string{"-name", "*.h5"}, []string{"-name", "*.h5"}},
		{[]string{"--type", "d"}, []string{"-type", "d"}},
		{[]string{"-type", "l"}, []string{"-type", "l"}},
		{[]string{"--size", "+1M", "--type", "f"}, []string{"-size", "+1048576c", "-type", "f"}},
		{[]string{"--mtime", "+1"}, []string{"-mtime", "+1"}},
		{[]string{"--uid", "4242"}, []string{"-uid", "4242"}},
		{[]string{"--gid", "4343"}, []string{"-gid", "4343"}},
		{[]string{"--maxdepth", "1"}, []string{"-maxdepth", "1"}},
		{nil, nil},
	} {
		got := lines(weft(t, c, append([]string{"find", root, "--keys", c.Keys("client")}, tc.weft...)...))
		out, err := exec.Command("find", append([]string{root}, tc.find...)...).Output()
		if err != nil {
			t.Fatalf("find(1) %v: %v", tc.find, err)
		}
		if want := lines(string(out)); !slices.Equal(got, want) {
			t.Errorf("weft find %v: %d paths, find(1) %v: %d paths; first differences: %v",
				tc.weft, len(got), tc.find, len(want), pathDiff(got, want))
		}
	}
	// Layout conditions, which find(1) cannot check: a/c's file is on one target.
	if got := lines(weft(t, c, "find", root, "--keys", c.Keys("client"), "--stripe-count", "1", "--type", "f")); !slices.Equal(got, []string{filepath.Join(root, "a/c/w.h5")}) {
		t.Errorf("--stripe-count 1: %v", got)
	}
	l, err := testcluster.GetLayout(filepath.Join(root, "a/c/w.h5"))
	if err != nil {
		t.Fatal(err)
	}
	if got := lines(weft(t, c, "find", root, "--keys", c.Keys("client"), "--target", fmt.Sprint(l.Targets[0]), "--name", "w.h5")); len(got) != 1 {
		t.Errorf("--target %d: %v", l.Targets[0], got)
	}
}

// pathDiff lists up to five paths in only one of a (+) and b (-).
func pathDiff(a, b []string) []string {
	var d []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			d = append(d, "+"+x)
		}
	}
	for _, x := range b {
		if !slices.Contains(a, x) {
			d = append(d, "-"+x)
		}
	}
	return d[:min(len(d), 5)]
}
