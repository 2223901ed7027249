package tests

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/weft-fs/weft/internal/testcluster"
)

// spaceStep is one operation applied to the local file and to weft's.
type spaceStep struct {
	what      string
	mode      uint32 // fallocate mode, for what == "fallocate"
	off, n    int64
	seekCheck bool // compare SEEK_DATA/SEEK_HOLE afterwards
}

// spaceLayouts are the layouts the space tests run on, as setstripe
// flags, on a cluster of 3 servers with 2 targets each: RAID-0 over 4
// targets, mirror 2 over 2 stripes (the default of `weft up`), and EC 2+1
// over 2 stripes (rows of 128 KiB).
var spaceLayouts = []struct {
	name  string
	flags []string
}{
	{"raid0", []string{"-c", "4", "-S", "64K"}},
	{"mirror", []string{"--mirror", "2", "-c", "2", "-S", "64K"}},
	{"ec", []string{"--ec", "2+1", "-c", "2", "-S", "64K"}},
}

var spaceCluster = testcluster.Options{Servers: 3, Targets: 6, Mounts: 2}

// TestSpaceCalls applies the same writes and fallocate calls (mode 0,
// KEEP_SIZE, PUNCH_HOLE, ZERO_RANGE) to a file on the local disk and to
// one on weft, for each of spaceLayouts, and compares after every step the
// size, every byte (read on the mount and on a second one), and, while
// only writes and punches shaped the file, where SEEK_DATA and SEEK_HOLE
// land from many offsets. (Ranges reserved by fallocate are data to weft,
// unwritten extents, i.e. holes, to ext4: there the answers differ by
// design.) Unsupported modes fail as on Linux. Then every copy of a
// mirrored stripe (and every EC shard, rebuilt from the others) must give
// the same bytes: each server is stopped in turn and the file read again.
func TestSpaceCalls(t *testing.T) {
	c := testcluster.Start(t, spaceCluster)
	for _, sl := range spaceLayouts {
		t.Run(sl.name, func(t *testing.T) { spaceCalls(t, c, sl.name, sl.flags) })
	}
}

func spaceCalls(t *testing.T, c *testcluster.Cluster, name string, flags []string) {
	mnt, other := c.Mount(0), c.Mount(1)
	if err := os.Mkdir(filepath.Join(mnt, name), 0o755); err != nil {
		t.Fatal(err)
	}
	weft(t, c, append(append([]string{"setstripe"}, flags...), filepath.Join(mnt, name))...)
	local, err := os.Create(filepath.Join(t.TempDir(), "local"))
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	remote, err := os.Create(filepath.Join(mnt, name, "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer remote.Close()

	const K, M = 1 << 10, 1 << 20
	keep, punch, zero := uint32(unix.FALLOC_FL_KEEP_SIZE), uint32(unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE), uint32(unix.FALLOC_FL_ZERO_RANGE)
	steps := []spaceStep{
		{what: "write", off: 0, n: 300 * K, seekCheck: true},
		{what: "write", off: 512 * K, n: 100 * K, seekCheck: true},
		{what: "write", off: 2*M + 5, n: 70*K + 3, seekCheck: true},
		{what: "fallocate", mode: punch, off: 64 * K, n: 128 * K, seekCheck: true},   // whole units of two stripes
		{what: "fallocate", mode: punch, off: 8*K + 100, n: 20 * K, seekCheck: true}, // unaligned edges
		{what: "fallocate", mode: punch, off: 2 * M, n: 4 * M, seekCheck: true},      // past the end: size stays
		{what: "fallocate", mode: punch, off: 600 * K, n: 4 * K, seekCheck: true},    // an aligned block
		{what: "fallocate", mode: keep, off: 3 * M, n: 256 * K},                      // reserve past the end: size stays
		{what: "fallocate", mode: 0, off: 2*M + 100*K, n: 300 * K},                   // grows the file
		{what: "fallocate", mode: zero, off: 10 * K, n: 200 * K},                     // zero, stays allocated
		{what: "fallocate", mode: zero | keep, off: 2*M + 380*K, n: 200 * K},         // past the end, keep size
		{what: "fallocate", mode: zero, off: 2*M + 390*K, n: 30 * K},                 // past the end: grows
		{what: "write", off: 2*M + 100*K + 7, n: 9 * K},                              // into a reserved range
		{what: "fallocate", mode: punch, off: 2*M + 100*K, n: 64 * K},                // punch a reserved range
	}
	buf := pattern(5, 0, 4*M)
	for i, s := range steps {
		for _, f := range []*os.File{local, remote} {
			var err error
			if s.what == "write" {
				_, err = f.WriteAt(buf[s.off:s.off+s.n], s.off)
			} else {
				err = unix.Fallocate(int(f.Fd()), s.mode, s.off, s.n)
			}
			if err != nil {
				t.Fatalf("step %d (%s %#x [%d,+%d)) on %s: %v", i, s.what, s.mode, s.off, s.n, f.Name(), err)
			}
		}
		compareFiles(t, i, local, remote, s.seekCheck)
		// A second mount sees the same bytes once the writer fsynced.
		if err := remote.Sync(); err != nil {
			t.Fatal(err)
		}
		want, _ := os.ReadFile(local.Name())
		got, err := os.ReadFile(filepath.Join(other, name, "f"))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("step %d: the other mount read %d bytes (%v), want %d: %s", i, len(got), err, len(want), firstDiff(got, want))
		}
	}

	// Modes weft does not support fail as Linux says.
	for _, tc := range []struct {
		mode uint32
		want syscall.Errno
	}{
		{unix.FALLOC_FL_PUNCH_HOLE, syscall.EOPNOTSUPP}, // without KEEP_SIZE (refused by the kernel already)
		{unix.FALLOC_FL_COLLAPSE_RANGE, syscall.EOPNOTSUPP},
		{unix.FALLOC_FL_INSERT_RANGE, syscall.EOPNOTSUPP},
	} {
		if err := unix.Fallocate(int(remote.Fd()), tc.mode, 0, 64*K); !errors.Is(err, tc.want) {
			t.Errorf("fallocate mode %#x: %v, want %v", tc.mode, err, tc.want)
		}
	}
	// SEEK_DATA at or past the end: ENXIO, as everywhere.
	fi, _ := remote.Stat()
	if _, err := unix.Seek(int(remote.Fd()), fi.Size(), unix.SEEK_DATA); !errors.Is(err, syscall.ENXIO) {
		t.Errorf("SEEK_DATA at the end: %v, want ENXIO", err)
	}
	// Every copy took every call; EC parity matches the data.
	if err := remote.Sync(); err != nil {
		t.Fatal(err)
	}
	checkObjectsAgree(t, c, remote.Name())
}

// compareFiles compares size and bytes of the two files and, if seek, the
// answers of SEEK_DATA and SEEK_HOLE from offsets every 4 KiB + 1.
func compareFiles(t *testing.T, step int, local, remote *os.File, seek bool) {
	t.Helper()
	lfi, _ := local.Stat()
	rfi, err := remote.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if lfi.Size() != rfi.Size() {
		t.Fatalf("step %d: size %d, local file system %d", step, rfi.Size(), lfi.Size())
	}
	want := make([]byte, lfi.Size())
	got := make([]byte, rfi.Size())
	if _, err := local.ReadAt(want, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := remote.ReadAt(got, 0); err != nil {
		t.Fatalf("step %d: read: %v", step, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("step %d: content: %s", step, firstDiff(got, want))
	}
	if !seek {
		return
	}
	bad := 0
	for off := int64(0); off <= lfi.Size()+1; off += 4<<10 + 1 {
		for _, whence := range []int{unix.SEEK_DATA, unix.SEEK_HOLE} {
			w, werr := unix.Seek(int(local.Fd()), off, whence)
			g, gerr := unix.Seek(int(remote.Fd()), off, whence)
			if w != g || errnoOf(werr) != errnoOf(gerr) {
				bad++
				if bad <= 10 {
					t.Errorf("step %d: lseek(%d, %s) = %d, %v; local file system: %d, %v", step, off, map[int]string{unix.SEEK_DATA: "SEEK_DATA", unix.SEEK_HOLE: "SEEK_HOLE"}[whence], g, gerr, w, werr)
				}
			}
		}
	}
	if bad > 0 {
		t.Fatalf("step %d: %d lseek answers differ", step, bad)
	}
}

// TestBlocks checks st_blocks (and so du) of a sparse file: a 1 GiB file
// with a few written blocks, after a punch, a zeroed (allocated) range and
// an ftruncate, on the writing mount and on a second one, for each of
// spaceLayouts. weft counts exactly the blocks the targets hold; the
// local file system (ext4) says the same or a few blocks more (its extent
// tree blocks count too) of a file with one copy of the data. Every copy
// counts: a mirror 2 file counts twice its data; an EC 2+1 file counts its
// data and at most one 64 KiB parity unit per row written (4 rows here).
func TestBlocks(t *testing.T) {
	c := testcluster.Start(t, spaceCluster)
	for _, sl := range spaceLayouts {
		t.Run(sl.name, func(t *testing.T) { blocks(t, c, sl.name, sl.flags) })
	}
}

func blocks(t *testing.T, c *testcluster.Cluster, name string, flags []string) {
	mnt, other := c.Mount(0), c.Mount(1)
	if err := os.Mkdir(filepath.Join(mnt, name), 0o755); err != nil {
		t.Fatal(err)
	}
	weft(t, c, append(append([]string{"setstripe"}, flags...), filepath.Join(mnt, name))...)
	local, err := os.Create(filepath.Join(t.TempDir(), "local"))
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	remote, err := os.Create(filepath.Join(mnt, name, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	defer remote.Close()
	// What weft should count for data blocks of one copy.
	inRange := func(got, data int64) bool {
		switch name {
		case "mirror":
			return got == 2*data
		case "ec":
			return got >= data && got <= data+4*(64<<10)/512
		}
		return got == data
	}
	const K, M, G = 1 << 10, 1 << 20, 1 << 30
	data := pattern(3, 0, 200*K)
	steps := []struct {
		what   string
		blocks int64 // 512-byte units of data
		do     func(f *os.File) error
	}{
		{"writes at 0, 300 MiB and the last 4 KiB of 1 GiB", (4*K + 100*K + 4*K) / 512, func(f *os.File) error {
			_, e1 := f.WriteAt(data[:4*K], 0)
			_, e2 := f.WriteAt(data[:100*K], 300*M)
			_, e3 := f.WriteAt(data[:4*K], G-4*K)
			return errors.Join(e1, e2, e3)
		}},
		{"punch 8 KiB inside", (100*K - 8*K + 8*K) / 512, func(f *os.File) error {
			return unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 300*M+32*K, 8*K)
		}},
		{"zero 64 KiB of a hole", (100*K + 64*K) / 512, func(f *os.File) error {
			return unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_ZERO_RANGE, 500*M, 64*K)
		}},
		{"ftruncate to 400 MiB", (4*K + 92*K) / 512, func(f *os.File) error { return f.Truncate(400 * M) }},
	}
	for _, s := range steps {
		for _, f := range []*os.File{local, remote} {
			if err := s.do(f); err != nil {
				t.Fatalf("%s on %s: %v", s.what, f.Name(), err)
			}
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
		}
		var ls, rs, os2 unix.Stat_t
		if err := unix.Fstat(int(local.Fd()), &ls); err != nil {
			t.Fatal(err)
		}
		if err := unix.Stat(remote.Name(), &rs); err != nil {
			t.Fatal(err)
		}
		if err := unix.Stat(filepath.Join(other, name, "sparse"), &os2); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: st_blocks %d (other mount %d), local file system %d, size %d", s.what, rs.Blocks, os2.Blocks, ls.Blocks, rs.Size)
		if rs.Size != ls.Size || !inRange(rs.Blocks, s.blocks) || os2.Blocks != rs.Blocks {
			t.Errorf("%s: size %d st_blocks %d (other mount %d), want size %d and st_blocks for %d blocks of data", s.what, rs.Size, rs.Blocks, os2.Blocks, ls.Size, s.blocks)
		}
		if ls.Blocks < s.blocks || ls.Blocks > s.blocks+16 {
			t.Errorf("%s: the local file system says st_blocks %d: the test's expectation %d is wrong", s.what, ls.Blocks, s.blocks)
		}
	}
	var last unix.Stat_t
	if err := unix.Stat(remote.Name(), &last); err != nil {
		t.Fatal(err)
	}
	want := strconv.FormatInt(last.Blocks*512, 10)
	// du agrees (it adds up st_blocks).
	out := func(args ...string) string {
		b, err := exec.Command("du", args...).Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.Fields(string(b))[0]
	}
	if r := out("-B1", remote.Name()); r != want {
		t.Errorf("du: %s bytes on weft, want %s (local file system: %s)", r, want, out("-B1", local.Name()))
	}
}

// TestCopyFileRange copies ranges between files of different layouts and
// within one file with copy_file_range(2), on weft and on the local file
// system, and compares the results. Between RAID-0 and mirrored files the
// bytes do not pass through the mount: its read requests stay as they
// were, and it sent copy requests to the storage servers (every copy of a
// mirrored destination is written; the copies then agree). The copies from
// and to the erasure-coded file here (a mirror on the other side, rows
// that do not line up) are answered EOPNOTSUPP and the kernel copies
// through the mount: the calls still succeed with the same bytes.
// (Between EC files: TestCopyFileRangeEC.)
func TestCopyFileRange(t *testing.T) {
	metrics := freeAddr(t)
	c := testcluster.Start(t, testcluster.Options{Servers: 3, Targets: 6, MountArgs: []string{"--metrics", metrics}})
	mnt := c.Mount(0)
	for _, d := range []struct {
		name  string
		flags []string
	}{
		{"a", []string{"-c", "4", "-S", "64K"}},
		{"b", []string{"-c", "2", "-S", "128K"}},
		{"m", []string{"--mirror", "2", "-c", "2", "-S", "64K"}},
		{"n", []string{"--mirror", "2", "-c", "1", "-S", "128K"}},
		{"e", []string{"--ec", "2+1", "-c", "2", "-S", "64K"}},
	} {
		if err := os.Mkdir(filepath.Join(mnt, d.name), 0o755); err != nil {
			t.Fatal(err)
		}
		weft(t, c, append(append([]string{"setstripe"}, d.flags...), filepath.Join(mnt, d.name))...)
	}
	tmp := t.TempDir()
	const K, M = 1 << 10, 1 << 20
	srcData := pattern(21, 0, 3*M+777)
	dstData := pattern(22, 0, 1*M)
	open := func(p string, data []byte) *os.File {
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	files := map[string][2]*os.File{} // name -> {local, weft}
	for _, f := range []struct {
		name string
		data []byte
	}{{"a/src", srcData}, {"b/dst", dstData}, {"m/src", srcData}, {"n/dst", dstData}, {"e/ec", dstData}} {
		files[f.name] = [2]*os.File{open(filepath.Join(tmp, strings.ReplaceAll(f.name, "/", "_")), f.data), open(filepath.Join(mnt, f.name), f.data)}
	}
	run := func(copies []copyCall) { copyOnBoth(t, files, copies) }
	before := scrape(t, metrics)
	onStorage := []copyCall{
		{"a/src", "b/dst", 100*K + 3, 50*K + 7, 2 * M},  // unaligned, across units of both layouts, grows dst
		{"a/src", "b/dst", 3*M + 700, 10, 4 * K},        // runs into src's end: short
		{"a/src", "a/src", 0, 3*M + 777 + 5*K, 300 * K}, // within one file, past its end
		{"b/dst", "a/src", 1*M + 1, 64 * K, 200*K + 9},  // back the other way
		{"m/src", "n/dst", 70*K + 1, 30 * K, 1*M + 5},   // mirror to mirror, different units
		{"a/src", "m/src", 5 * K, 3 * M, 400 * K},       // raid0 to mirror, grows it
		{"n/dst", "b/dst", 0, 2 * M, 300 * K},           // mirror to raid0
	}
	run(onStorage)
	after := scrape(t, metrics)
	for _, name := range []string{"weft_rpc_client_requests_total"} {
		if b, a := value(before, name, "read"), value(after, name, "read"); a != b {
			t.Errorf("the mount sent %v read requests during the copies: the data went through it", a-b)
		}
		if b, a := value(before, name, "copy"), value(after, name, "copy"); a-max(b, 0) < float64(len(onStorage)) {
			t.Errorf("the mount sent %v copy requests, want at least %d", a-max(b, 0), len(onStorage))
		}
	}
	run([]copyCall{
		{"m/src", "e/ec", 1, 100 * K, 500 * K}, // into an EC file: the kernel copies
		{"e/ec", "n/dst", 7, 2*M + 5, 200 * K}, // out of one
		{"e/ec", "e/ec", 0, 900 * K, 300 * K},  // within one, growing it
	})
	for name, fs := range files {
		if err := fs[1].Sync(); err != nil {
			t.Fatal(err)
		}
		want, _ := os.ReadFile(fs[0].Name())
		got, err := os.ReadFile(filepath.Join(mnt, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: %v, %d bytes, want %d: %s", name, err, len(got), len(want), firstDiff(got, want))
		}
		checkObjectsAgree(t, c, fs[1].Name())
	}
}

// copyCall is one copy_file_range of a test: files by name, offsets, length.
type copyCall struct {
	src, dst       string
	srcOff, dstOff int64
	n              int
}

// copyOnBoth runs each copy on the local file system and on weft
// (files: name -> {local, weft}) and checks that both copied as much.
func copyOnBoth(t *testing.T, files map[string][2]*os.File, copies []copyCall) {
	t.Helper()
	for i, cp := range copies {
		var got [2]int
		for side := range 2 {
			// copy_file_range may copy less than asked (ext4 here
			// sometimes stops at 64 KiB): call again, as cp does, until
			// the count is done or the source ends.
			so, do := cp.srcOff, cp.dstOff
			for got[side] < cp.n {
				n, err := unix.CopyFileRange(int(files[cp.src][side].Fd()), &so, int(files[cp.dst][side].Fd()), &do, cp.n-got[side], 0)
				if err != nil {
					t.Fatalf("copy %d (%s to %s) on %s: %v", i, cp.src, cp.dst, []string{"the local file system", "weft"}[side], err)
				}
				if n == 0 {
					break
				}
				got[side] += n
			}
		}
		if got[0] != got[1] {
			t.Errorf("copy %d (%s to %s): weft copied %d bytes, the local file system %d", i, cp.src, cp.dst, got[1], got[0])
		}
	}
}
