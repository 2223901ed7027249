package tests

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/weft-fs/weft/internal/testcluster"
)

// TestCopyFileRangeEC copies with copy_file_range(2) between
// erasure-coded files (2+1, rows of 128 KiB) on weft and between twins on
// the local file system, and compares. Whole rows between EC files of one
// geometry are copied on the storage servers, shard by shard: the mount
// reads and writes no data meanwhile (its read, read_row and write_row
// requests carry none) and sends a copy_row request per shard. Ranges
// with partial rows at the ends, rows that do not line up, another
// geometry, and EC to or from a mirror give the same bytes as the local
// copies (the ends through the client, the rest copied by the kernel);
// so does cp of a whole EC file, whose rows go on the servers.
// The results read right through a fresh mount, with every parity shard
// the parity of its data, and again through another fresh mount after a
// storage server is killed: every copied row decodes from the two shards
// left, so its shards carry one version.
func TestCopyFileRangeEC(t *testing.T) {
	metrics := freeAddr(t)
	c := testcluster.Start(t, testcluster.Options{Servers: 3, Targets: 6, MountArgs: []string{"--metrics", metrics}})
	mnt := c.Mount(0)
	for _, d := range []struct {
		name  string
		flags []string
	}{
		{"e", []string{"--ec", "2+1", "-c", "2", "-S", "64K"}},
		{"f", []string{"--ec", "2+1", "-c", "1", "-S", "64K"}}, // same rows, another stripe count
		{"w", []string{"--ec", "2+1", "-c", "1", "-S", "128K"}},
		{"m", []string{"--mirror", "2", "-c", "2", "-S", "64K"}},
	} {
		if err := os.Mkdir(filepath.Join(mnt, d.name), 0o755); err != nil {
			t.Fatal(err)
		}
		weft(t, c, append(append([]string{"setstripe"}, d.flags...), filepath.Join(mnt, d.name))...)
	}
	tmp := t.TempDir()
	const K, M, row = 1 << 10, 1 << 20, 128 << 10
	names := []string{"e/src", "f/dst", "w/wide", "m/mir"}
	contents := map[string][]byte{"e/src": pattern(31, 0, 3*M+777), "f/dst": pattern(32, 0, 1*M), "w/wide": pattern(33, 0, 1*M), "m/mir": pattern(34, 0, 1*M)}
	local := func(name string) string { return filepath.Join(tmp, strings.ReplaceAll(name, "/", "_")) }
	files := map[string][2]*os.File{} // name -> {local, weft}
	for _, name := range names {
		var pair [2]*os.File
		for side, p := range []string{local(name), filepath.Join(mnt, name)} {
			if err := os.WriteFile(p, contents[name], 0o644); err != nil {
				t.Fatal(err)
			}
			f, err := os.OpenFile(p, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })
			pair[side] = f
		}
		files[name] = pair
	}
	run := func(copies []copyCall) { copyOnBoth(t, files, copies) }

	before := scrape(t, metrics)
	onServers := []copyCall{
		{"e/src", "f/dst", 0, 2 * row, 1 * M},          // 8 whole rows
		{"e/src", "f/dst", 10 * row, 11 * row, 1 * M},  // 8 more, past dst's end (a hole before them)
		{"f/dst", "f/dst", 3 * row, 30 * row, 4 * row}, // within one file, past its end
		{"e/src", "f/dst", 0, 40 * row, 2 * row},       // and again
	}
	run(onServers)
	after := scrape(t, metrics)
	const name = "weft_rpc_client_requests_total"
	if b, a := value(before, name, "read"), value(after, name, "read"); a != b {
		t.Errorf("the mount sent %v read requests during the copies: data went through it", a-b)
	}
	if b, a := value(before, name, "write"), value(after, name, "write"); a != b {
		t.Errorf("the mount sent %v write requests during the copies: data went through it", a-b)
	}
	// The mount's only storage reads are the versions of the source rows
	// (9 bytes each, no data); it writes no row.
	bytesOf := func(fams string, op string) float64 {
		return max(value(after, fams, op), 0) - max(value(before, fams, op), 0)
	}
	if got := bytesOf("weft_rpc_client_response_bytes_total", "read_row"); got > 4*K {
		t.Errorf("the mount read %v bytes with row versions during the copies: data went through it", got)
	}
	if got := bytesOf(name, "write_row"); got != 0 {
		t.Errorf("the mount sent %v write_row requests during the copies: data went through it", got)
	}
	if got := bytesOf(name, "copy_row"); got < 3*(8+8+4+2) {
		t.Errorf("the mount sent %v copy_row requests, want one per shard of the 22 whole rows", got)
	}

	run([]copyCall{
		{"e/src", "f/dst", 3*M - row, 24 * row, 1 * M},     // the last whole row; the 777 bytes after it through the client
		{"e/src", "f/dst", 300*K + 1, 44*K + 1, 700*K + 5}, // rows line up: head and tail through the client
		{"e/src", "f/dst", 1, 2, 500 * K},                  // they do not: the kernel copies
		{"e/src", "w/wide", 0, 0, 512 * K},                 // another geometry
		{"e/src", "m/mir", 7, 2*M + 5, 200 * K},            // EC to mirror
		{"m/mir", "e/src", 0, 3 * row, 4 * row},            // mirror to EC
	})
	for _, n := range names {
		if err := files[n][1].Sync(); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range names {
		for _, f := range files[n] {
			f.Close()
		}
	}
	// cp (coreutils 9 copies with copy_file_range): the rows of an EC
	// file go on the servers, its last partial row through the client.
	before = scrape(t, metrics)
	for _, to := range [][2]string{{local("e/src"), local("e/cp")}, {filepath.Join(mnt, "e/src"), filepath.Join(mnt, "e/cp")}} {
		if out, err := exec.Command("cp", to[0], to[1]).CombinedOutput(); err != nil {
			t.Fatalf("cp %s %s: %v: %s", to[0], to[1], err, out)
		}
	}
	after = scrape(t, metrics)
	rows := len(contents["e/src"]) / row // whole rows then (the mirror copy above wrote inside the file)
	if got := max(value(after, name, "copy_row"), 0) - max(value(before, name, "copy_row"), 0); got < float64(3*rows) {
		t.Errorf("cp of e/src: %v copy_row requests, want one per shard of its %d whole rows", got, rows)
	}
	names = append(names, "e/cp")
	check := func(mnt, when string) {
		t.Helper()
		for _, n := range names {
			want, _ := os.ReadFile(local(n))
			got, err := os.ReadFile(filepath.Join(mnt, n))
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("%s %s: %v, %d bytes, want %d: %s", n, when, err, len(got), len(want), firstDiff(got, want))
			}
		}
	}
	// A fresh mount (the first one's metrics address is freed first).
	c.StopMount(0)
	fresh := c.Mount(c.AddMount())
	check(fresh, "through a fresh mount")
	for _, n := range names {
		checkObjectsAgree(t, c, filepath.Join(fresh, n))
	}
	// Another, after the storage server of f/dst's first data shard is
	// killed: each of its rows decodes from the two other shards.
	victim := serverOfSlot(t, c, 3, filepath.Join(fresh, "f/dst"), 0)
	c.StopMount(1)
	c.StopStorage(victim)
	check(c.Mount(c.AddMountUp(4)), fmt.Sprintf("with storage server %d killed", victim))
}

// serverOfSlot returns the storage server (of the first servers) whose
// target holds the object of slot of file.
func serverOfSlot(t *testing.T, c *testcluster.Cluster, servers int, file string, slot int) int {
	t.Helper()
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	ino := fi.Sys().(*syscall.Stat_t).Ino
	for i := range servers {
		for _, td := range c.TargetDirs(i) {
			// <ino>.<slot>, or <ino>.<generation>.<slot>
			m1, _ := filepath.Glob(filepath.Join(td, "objects", "*", fmt.Sprintf("%d.%d", ino, slot)))
			m2, _ := filepath.Glob(filepath.Join(td, "objects", "*", fmt.Sprintf("%d.*.%d", ino, slot)))
			if len(m1)+len(m2) > 0 {
				return i
			}
		}
	}
	t.Fatalf("%s: no target holds slot %d", file, slot)
	return -1
}
