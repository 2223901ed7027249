package tests

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weft-fs/weft/bench"
	"github.com/weft-fs/weft/internal/testcluster"
)

// Short-circuit local reads (storage/localread): the storage servers have
// local sockets, so the mount reads their object files itself.

// localReadCounts is a mount's weft_client_local_reads_total: direct
// counts the local reads that bypassed the page cache (large aligned
// reads: localread.Options.DirectMin).
type localReadCounts struct{ local, fallback, opens, direct float64 }

// localCounts scrapes a mount's weft_client_local_reads_total.
func localCounts(t *testing.T, addr string) localReadCounts {
	t.Helper()
	m := scrape(t, addr)
	v := func(result string) float64 { return value(m, "weft_client_local_reads_total", "", "result", result) }
	return localReadCounts{local: v("local"), fallback: v("fallback"), opens: v("open"), direct: v("direct")}
}

// readDirect reads [off, off+n) of path with O_DIRECT (so the kernel's page
// cache, which holds what this mount wrote, does not answer).
func readDirect(t *testing.T, path string, off int64, n int) ([]byte, error) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := bench.AlignedBuf(n)
	var got int
	err = within(t, "an O_DIRECT read", func() error {
		var err error
		got, err = f.ReadAt(buf, off)
		return err
	})
	if errors.Is(err, io.EOF) {
		err = nil // the file ends in the range
	}
	return buf[:got], err
}

// waitLocal reads path whole until the mount says it read locally (the
// first read of a target goes over RPC while the mount asks the target's
// server for its socket).
func waitLocal(t *testing.T, addr, path string, want []byte) {
	t.Helper()
	deadline := time.Now().Add(hangGuard)
	for {
		b, err := readDirect(t, path, 0, len(want))
		if err != nil || !bytes.Equal(b, want) {
			t.Fatalf("read of %s: %v (%s)", path, err, firstDiff(b, want))
		}
		if localCounts(t, addr).local > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the mount never read locally")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestLocalReads reads RAID-0 and mirrored files through a mount whose
// storage servers are on its host: reads of every alignment and size
// return the right bytes, from the object files (the mount's counters),
// none falls back to RPC, and a write through the mount is seen by the
// next read.
func TestLocalReads(t *testing.T) {
	t.Parallel()
	maddr := freeAddr(t)
	c := testcluster.Start(t, testcluster.Options{Servers: 2, Targets: 4, LocalReads: true, MountArgs: []string{"--metrics", maddr}})
	mnt := c.Mount(0)
	files := map[string][]byte{}
	for _, d := range []struct {
		name string
		args []string
		size int
	}{
		{"r", []string{"-c", "4", "-S", "1M"}, 9<<20 + 4321},
		{"m", []string{"-c", "1", "-S", "1M", "--mirror", "2"}, 3<<20 + 777},
	} {
		dir := filepath.Join(mnt, d.name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		weft(t, c, append(append([]string{"setstripe"}, d.args...), dir)...)
		p := filepath.Join(dir, "f")
		files[p] = pattern(uint32(len(files)+7), 0, d.size)
		if err := writeNew(p, files[p]); err != nil {
			t.Fatal(err)
		}
	}
	for p, want := range files {
		waitLocal(t, maddr, p, want)
	}
	n0 := localCounts(t, maddr)
	t.Logf("after the first reads: %+v", n0)

	rng := rand.New(rand.NewPCG(1, 2))
	reads := 0
	for p, want := range files {
		for range 100 {
			off := rng.Int64N(int64(len(want)))
			n := 1 + rng.IntN(300<<10)
			if rng.IntN(2) == 0 { // block-aligned, as most reads are
				off &^= 4095
				n = (n + 4095) &^ 4095
			}
			b, err := readDirect(t, p, off, n)
			end := min(int(off)+n, len(want))
			if err != nil || !bytes.Equal(b, want[off:end]) {
				t.Fatalf("%s [%d,+%d): %v (%s)", p, off, n, err, firstDiff(b, want[off:end]))
			}
			reads++
		}
	}
	n1 := localCounts(t, maddr)
	t.Logf("after %d random reads: %+v", reads, n1)
	if n1.local-n0.local < float64(reads) {
		t.Errorf("%d reads through the mount, %v read locally", reads, n1.local-n0.local)
	}
	if n1.fallback != 0 {
		t.Errorf("%v reads fell back to RPC, with nothing corrupt and no writer", n1.fallback)
	}
	// Reads of 128 KiB and more, aligned, bypass the page cache.
	if n1.direct <= n0.direct {
		t.Errorf("no read bypassed the page cache (direct reads %v before, %v after)", n0.direct, n1.direct)
	}

	// A 4 KiB read of a handle opened O_DIRECT bypasses this host's page
	// cache too, as its application asked (smaller reads than 128 KiB of
	// other handles keep it).
	p := filepath.Join(mnt, "r", "f")
	for i := range 8 {
		off := int64(i)<<20 + 8192
		b, err := readDirect(t, p, off, 4096)
		if want := files[p][off : off+4096]; err != nil || !bytes.Equal(b, want) {
			t.Fatalf("%s [%d,+4096): %v (%s)", p, off, err, firstDiff(b, want))
		}
	}
	n4k := localCounts(t, maddr)
	if got := n4k.direct - n1.direct; got != 8 {
		t.Errorf("%v of 8 O_DIRECT 4 KiB reads bypassed the page cache", got)
	}
	n1 = n4k

	// A write is seen by the next read (the descriptors are of the very
	// files the server writes).
	patch := bytes.Repeat([]byte("new bytes "), 1000)
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(patch, 1<<20-5); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	want := files[p]
	copy(want[1<<20-5:], patch)
	b, err := readDirect(t, p, 0, len(want))
	if err != nil || !bytes.Equal(b, want) {
		t.Fatalf("read after a write: %v (%s)", err, firstDiff(b, want))
	}
	n2 := localCounts(t, maddr)
	if n2.local <= n1.local {
		t.Errorf("the read after the write was not local (local reads %v before, %v after)", n1.local, n2.local)
	}
	if n2.direct <= n1.direct {
		t.Errorf("the read after the write did not bypass the page cache (direct reads %v before, %v after)", n1.direct, n2.direct)
	}
}

// TestLocalReadsCorrupt flips a byte of an object file on a target: a
// local read of the range checks it against the sidecar, falls back to the
// server's read, which reports the corruption; a RAID-0 file's read fails
// with EIO, a mirrored file's reads the other copy; both storage servers'
// logs name the corrupt object. Reads elsewhere stay local and right.
func TestLocalReadsCorrupt(t *testing.T) {
	t.Parallel()
	maddr := freeAddr(t)
	c := testcluster.Start(t, testcluster.Options{Servers: 2, Targets: 2, LocalReads: true, MountArgs: []string{"--metrics", maddr}})
	byTarget := serverTargets(t, c, 2)
	mnt := c.Mount(0)
	mk := func(name string, args ...string) (string, []byte) {
		dir := filepath.Join(mnt, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		weft(t, c, append(append([]string{"setstripe"}, args...), dir)...)
		p := filepath.Join(dir, "f")
		want := pattern(uint32(len(name)*31), 0, 4<<20)
		if err := writeNew(p, want); err != nil {
			t.Fatal(err)
		}
		return p, want
	}
	raid, raidWant := mk("r", "-c", "1", "-S", "8M")
	mir, mirWant := mk("mm", "-c", "1", "-S", "8M", "--mirror", "2")
	waitLocal(t, maddr, raid, raidWant)
	waitLocal(t, maddr, mir, mirWant)

	flip := func(p string, slot int) int {
		l, err := testcluster.GetLayout(p)
		if err != nil || len(l.Targets) <= slot {
			t.Fatalf("layout of %s: %+v, %v", p, l, err)
		}
		srv := byTarget[uint32(l.Targets[slot])]
		flipObject(t, objectPath(t, c.TargetDirs(srv)[0], p, slot))
		return srv
	}
	raidSrv := flip(raid, 0)
	mirSrv := flip(mir, 0)
	fallback0 := localCounts(t, maddr).fallback

	// flipObject flips the byte in the middle: 2 MiB into each object.
	if b, err := readDirect(t, raid, 2<<20-4096, 8192); !errors.Is(err, syscall.EIO) {
		if err == nil && bytes.Equal(b, raidWant[2<<20-4096:2<<20+4096]) {
			t.Errorf("the corrupt range of the RAID-0 file read back right: the flip missed it?")
		} else {
			t.Errorf("read of the corrupt range of the RAID-0 file: %v, want EIO", err)
		}
	}
	for _, off := range []int64{0, 3 << 20} {
		if b, err := readDirect(t, raid, off, 64<<10); err != nil || !bytes.Equal(b, raidWant[off:off+64<<10]) {
			t.Errorf("RAID-0 read at %d, away from the corruption: %v (%s)", off, err, firstDiff(b, raidWant[off:off+64<<10]))
		}
	}
	// Every copy read in turn: the corrupt one fails its check, its
	// server's read fails, the other copy answers.
	for range 4 {
		b, err := readDirect(t, mir, 0, len(mirWant))
		if err != nil || !bytes.Equal(b, mirWant) {
			t.Fatalf("mirrored file with one copy corrupt: %v (%s)", err, firstDiff(b, mirWant))
		}
	}
	if fallback := localCounts(t, maddr).fallback; fallback <= fallback0 {
		t.Errorf("no local read fell back to RPC (fallbacks %v before the corrupt reads, %v after)", fallback0, fallback)
	}
	for _, srv := range []int{raidSrv, mirSrv} {
		name := fmt.Sprintf("storage-%d", srv)
		if !strings.Contains(strings.ToLower(c.Log(name)), "corrupt object") {
			t.Errorf("%s's log does not report the corrupt object:\n%s", name, tailLines(c.Log(name), 20))
		}
	}
}
