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
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/weft-fs/weft/internal/testcluster"
)

// getstripeOf returns a file's layout as getstripe --json shows it.
func getstripeOf(t *testing.T, c *testcluster.Cluster, path string) getstripeJSON {
	t.Helper()
	out := weft(t, c, "getstripe", "--json", path)
	var g getstripeJSON
	if err := json.Unmarshal([]byte(out), &g); err != nil {
		t.Fatalf("getstripe --json %s: %v: %q", path, err, out)
	}
	return g
}

// targetsOf lists every target of a layout.
func targetsOf(g getstripeJSON) []uint32 {
	var out []uint32
	for _, s := range g.Stripes {
		out = append(out, s.Targets...)
	}
	slices.Sort(out)
	return out
}

// dataObjects counts the objects in a target directory: their data
// files, not the checksum (.crc) or row version (.ver) sidecars.
func dataObjects(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(filepath.Join(dir, "objects"), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && !strings.HasSuffix(p, ".crc") && !strings.HasSuffix(p, ".ver") {
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// waitObjectsOnlyOn waits until exactly the targets in want hold object
// files (the cluster holds one file, which uses a target once), each one:
// the old objects of a migrated file are gone from the other targets.
func waitObjectsOnlyOn(t *testing.T, c *testcluster.Cluster, byTarget map[uint32]int, want []uint32) {
	t.Helper()
	deadline := time.Now().Add(hangGuard)
	for {
		var holding []uint32
		extra := 0
		for id, i := range byTarget {
			if n := dataObjects(t, c.TargetDirs(i)[0]); n > 0 {
				holding = append(holding, id)
				extra += n - 1
			}
		}
		slices.Sort(holding)
		if slices.Equal(holding, want) && extra == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("objects on targets %v (%d more than one on some), want one on each of %v", holding, extra, want)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// TestMigrate restripes a file that holds data RAID-0 → mirror 2 → EC
// 2+1 while another mount reads it in a loop: every read returns the right
// bytes, getstripe shows each new layout, the old objects leave their
// targets after the moved-object grace, and with the server of one EC
// shard killed the file still reads back right.
func TestMigrate(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{Servers: 4, Targets: 4, Mounts: 2, Timeout: "10s",
		MetaArgs: []string{"--moved-object-grace", "2s"}})
	d := filepath.Join(c.Mount(0), "d")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	weft(t, c, "setstripe", "-S", "1M", "-c", "2", "--raid0", d)
	data := make([]byte, 5<<20+4321)
	r := rand.New(rand.NewPCG(7, 7))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	want := sha256.Sum256(data)
	f := filepath.Join(d, "f")
	if err := writeNew(f, data); err != nil {
		t.Fatal(err)
	}
	byTarget := serverTargets(t, c, 4)
	if g := getstripeOf(t, c, f); g.Kind != "raid0" || len(targetsOf(g)) != 2 {
		t.Fatalf("before: %+v", g)
	}

	// The reader reads through the other mount, opening the file anew
	// every time.
	rf := filepath.Join(c.Mount(1), "d", "f")
	rd := startLoopReader(func() error {
		b, err := os.ReadFile(rf)
		if err == nil && sha256.Sum256(b) != want {
			err = fmt.Errorf("%d bytes read back differ (want %d): %s", len(b), len(data), firstDiff(b, data))
		}
		return err
	})
	defer rd.stop()
	rd.waitReads(t, 1)

	out := weft(t, c, "migrate", "--mirror", "2", "-c", "1", f)
	if !strings.Contains(out, "migrated to mirror 2") {
		t.Fatalf("migrate: %q", out)
	}
	g := getstripeOf(t, c, f)
	if g.Kind != "mirror" || len(g.Stripes) != 1 || len(g.Stripes[0].Targets) != 2 {
		t.Fatalf("after migrate to mirror 2: %+v", g)
	}
	n := rd.reads.Load()
	rd.waitReads(t, n+2) // reads through the new layout too
	waitObjectsOnlyOn(t, c, byTarget, targetsOf(g))
	// st_blocks counts what the new objects hold: both copies.
	var st syscall.Stat_t
	if err := syscall.Stat(f, &st); err != nil || st.Blocks*512 < int64(2*len(data)) {
		t.Fatalf("st_blocks %d after migrate to mirror 2 of %d bytes: %v", st.Blocks, len(data), err)
	}

	weft(t, c, "migrate", "--ec", "2+1", f)
	g = getstripeOf(t, c, f)
	if g.Kind != "ec" || len(g.Stripes) != 1 || len(g.Stripes[0].Targets) != 3 {
		t.Fatalf("after migrate to ec 2+1: %+v", g)
	}
	n = rd.reads.Load()
	rd.waitReads(t, n+2)
	rd.stop()
	if err := rd.err(); err != nil {
		t.Fatalf("a read during the migrations failed: %v", err)
	}
	t.Logf("%d reads during the migrations", rd.reads.Load())
	waitObjectsOnlyOn(t, c, byTarget, targetsOf(g))

	// Protected: with the server of a data shard killed, a mount that
	// never read the file reads it back right.
	c.StopStorage(byTarget[g.Stripes[0].Targets[0]])
	b, err := os.ReadFile(filepath.Join(c.Mount(c.AddMountUp(3)), "d", "f"))
	if err != nil || sha256.Sum256(b) != want {
		t.Fatalf("read with a shard's server killed: %v (%d bytes)", err, len(b))
	}
}

// TestMigrateWriter: a file open for writing is not migrated (a clear
// error, the file unchanged); migrations that run while another process
// keeps writing the file either fail cleanly or include every byte
// written: at the end the file holds exactly what the writer wrote, and
// the targets hold only the final layout's objects.
func TestMigrateWriter(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{Servers: 3, Targets: 3, Timeout: "10s",
		MetaArgs: []string{"--moved-object-grace", "1s"}})
	f := filepath.Join(c.Mount(0), "f")
	const rec = 64 << 10
	record := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i%26)}, rec) }
	if err := writeNew(f, record(0)); err != nil {
		t.Fatal(err)
	}
	h, err := os.OpenFile(f, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := weftFails(t, c, "migrate", "--mirror", "2", f)
	h.Close()
	if !strings.Contains(out, "open for writing") {
		t.Fatalf("migrate of a file open for writing: %q", out)
	}
	if g := getstripeOf(t, c, f); g.Kind != "raid0" {
		t.Fatalf("refused migrate changed the layout: %+v", g)
	}

	// The writer appends records, each with its own open and close.
	const records = 60
	done := make(chan error, 1)
	go func() {
		for i := 1; i < records; i++ {
			h, err := os.OpenFile(f, os.O_WRONLY, 0)
			if err == nil {
				_, err = h.WriteAt(record(i), int64(i)*rec)
				if cerr := h.Close(); err == nil {
					err = cerr
				}
			}
			if err != nil {
				done <- fmt.Errorf("record %d: %w", i, err)
				return
			}
		}
		done <- nil
	}()
	kinds := [][]string{{"--mirror", "2"}, {"--ec", "2+1"}, {"--raid0", "-c", "2"}}
	migrated, refused := 0, 0
	for i := 0; ; i++ {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("writer: %v", err)
			}
			t.Logf("%d migrations done, %d refused while the writer wrote", migrated, refused)
			goto check
		default:
		}
		ctxOut, err := c.Weft(t.Context(), append(append([]string{"migrate"}, kinds[i%len(kinds)]...), f)...)
		switch {
		case err == nil:
			migrated++
		case strings.Contains(ctxOut, "open for writing or written during the migration"):
			refused++
		default:
			t.Fatalf("migrate while writing: %v: %q", err, ctxOut)
		}
	}
check:
	// One more migration with the writer done succeeds.
	weft(t, c, "migrate", "--ec", "2+1", f)
	var want []byte
	for i := range records {
		want = append(want, record(i)...)
	}
	for _, mnt := range []string{c.Mount(0), c.Mount(c.AddMount())} {
		b, err := os.ReadFile(filepath.Join(mnt, "f"))
		if err != nil || !bytes.Equal(b, want) {
			t.Fatalf("after the migrations: %v: %s", err, firstDiff(b, want))
		}
	}
	// Nothing is left of the refused and replaced migrations: one object
	// on each target of the final layout, none elsewhere.
	waitObjectsOnlyOn(t, c, serverTargets(t, c, 3), targetsOf(getstripeOf(t, c, f)))
}

// TestMigrateBadInput: what the cluster cannot give, unknown targets, a
// directory without -r and a special file are refused with a clear error
// and change nothing.
func TestMigrateBadInput(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{Servers: 2, Targets: 2, Timeout: "10s"})
	d := filepath.Join(c.Mount(0), "d")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(d, "f")
	data := bytes.Repeat([]byte("weft"), 50000)
	if err := writeNew(f, data); err != nil {
		t.Fatal(err)
	}
	before := getstripeOf(t, c, f)
	p := filepath.Join(d, "p")
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--mirror", "3", f}, "needs 3 storage servers"},
		{[]string{"--ec", "2+1", f}, "needs 3 storage servers"},
		{[]string{"-o", "99", f}, "refused as invalid"},
		{[]string{"--raid0", d}, "is a directory: give -r"},
		{[]string{"--raid0", p}, "not a regular file"},
		{[]string{f}, "nothing to change"},
	} {
		out := weftFails(t, c, append([]string{"migrate"}, tc.args...)...)
		if !strings.Contains(out, tc.want) {
			t.Errorf("migrate %v: %q, want %q", tc.args, out, tc.want)
		}
	}
	if after := getstripeOf(t, c, f); !slices.Equal(targetsOf(after), targetsOf(before)) || after.Kind != before.Kind {
		t.Fatalf("refused migrations changed the layout: %+v, was %+v", after, before)
	}
	b, err := os.ReadFile(f)
	if err != nil || !bytes.Equal(b, data) {
		t.Fatalf("after refused migrations: %v", err)
	}
	// -r migrates the files in the directory (the fifo is skipped).
	out := weft(t, c, "migrate", "-r", "--mirror", "2", d)
	if !strings.Contains(out, "migrated to mirror 2") {
		t.Fatalf("migrate -r: %q", out)
	}
	if g := getstripeOf(t, c, f); g.Kind != "mirror" {
		t.Fatalf("after migrate -r: %+v", g)
	}
	b, err = os.ReadFile(filepath.Join(c.Mount(c.AddMount()), "d", "f"))
	if err != nil || !bytes.Equal(b, data) {
		t.Fatalf("after migrate -r: %v", err)
	}
}

// TestMigrateOpenReader: a handle opened before a migration keeps
// reading in a loop across the commit and past the grace that removes the
// objects it opened, every read right (it follows the file to its new
// objects, never ESTALE, EIO or zeros); and after another mount writes new
// bytes through the new layout of a second migration, the old handle's
// next read once a stat here shows the write returns the new bytes, not
// the old objects'.
func TestMigrateOpenReader(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{Servers: 3, Targets: 3, Mounts: 2, Timeout: "10s",
		MetaArgs: []string{"--moved-object-grace", "1s"}})
	d := filepath.Join(c.Mount(0), "d")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	weft(t, c, "setstripe", "-S", "1M", "-c", "2", "--raid0", d)
	data := make([]byte, 4<<20)
	for i := range data {
		data[i] = byte(i/4096 + 1) // no zero byte anywhere
	}
	f := filepath.Join(d, "f")
	if err := writeNew(f, data); err != nil {
		t.Fatal(err)
	}
	byTarget := serverTargets(t, c, 3)
	h, err := os.Open(filepath.Join(c.Mount(1), "d", "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	fd := int(h.Fd())
	// No kernel read-ahead, and the page cache dropped before every read:
	// each read reaches the mount.
	if err := unix.Fadvise(fd, 0, 0, unix.FADV_RANDOM); err != nil {
		t.Fatal(err)
	}
	readAt := func(off, n int) ([]byte, error) {
		if err := unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED); err != nil {
			return nil, err
		}
		buf := make([]byte, n)
		_, err := h.ReadAt(buf, int64(off))
		return buf, err
	}

	r := rand.New(rand.NewPCG(3, 3))
	rd := startLoopReader(func() error {
		off, n := r.IntN(len(data)-1), 1+r.IntN(256<<10)
		n = min(n, len(data)-off)
		b, err := readAt(off, n)
		if err == nil && !bytes.Equal(b, data[off:off+n]) {
			err = fmt.Errorf("[%d,+%d) read wrong bytes: %s", off, n, firstDiff(b, data[off:off+n]))
		}
		return err
	})
	defer rd.stop()
	rd.waitReads(t, 5)
	weft(t, c, "migrate", "--mirror", "2", "-c", "1", f)
	rd.waitReads(t, rd.reads.Load()+5)
	waitObjectsOnlyOn(t, c, byTarget, targetsOf(getstripeOf(t, c, f)))
	rd.waitReads(t, rd.reads.Load()+20) // past the grace: the objects it opened are gone
	rd.stop()
	if err := rd.err(); err != nil {
		t.Fatalf("the open handle's reads across the migration: %v", err)
	}
	t.Logf("%d reads through the handle across the migration and the grace", rd.reads.Load())

	// A second migration; then mount 0 writes through the new layout.
	weft(t, c, "migrate", "--ec", "2+1", f)
	patch := bytes.Repeat([]byte{0xa5}, 300<<10)
	w, err := os.OpenFile(f, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteAt(patch, 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	var ws syscall.Stat_t
	if err := syscall.Stat(f, &ws); err != nil {
		t.Fatal(err)
	}
	// The old handle's attributes: once a stat through it shows the write
	// (the kernel's attribute cache expired), the mount has seen the new
	// generation.
	deadline := time.Now().Add(hangGuard)
	for {
		var hs syscall.Stat_t
		if err := syscall.Fstat(fd, &hs); err != nil {
			t.Fatal(err)
		}
		if hs.Mtim == ws.Mtim {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the open handle's stat never showed the write (mtime %v, want %v)", hs.Mtim, ws.Mtim)
		}
		time.Sleep(50 * time.Millisecond)
	}
	want := bytes.Clone(data)
	copy(want[1<<20:], patch)
	for _, r := range [][2]int{{1 << 20, len(patch)}, {1<<20 - 4096, 8192}, {0, len(want)}} {
		b, err := readAt(r[0], r[1])
		if err != nil || !bytes.Equal(b, want[r[0]:r[0]+r[1]]) {
			t.Fatalf("the old handle after the write through the new layout, [%d,+%d): %v: %s", r[0], r[1], err, firstDiff(b, want[r[0]:r[0]+r[1]]))
		}
	}
	b, err := os.ReadFile(filepath.Join(c.Mount(1), "d", "f"))
	if err != nil || !bytes.Equal(b, want) {
		t.Fatalf("a new open after the migrations: %v", err)
	}
}

// loopReader calls a read function in a loop on a goroutine of its own
// until it is stopped or a read fails, counting the reads that succeeded.
type loopReader struct {
	quit     chan struct{}
	wg       sync.WaitGroup
	firstErr atomic.Value
	reads    atomic.Int64
}

func startLoopReader(read func() error) *loopReader {
	r := &loopReader{quit: make(chan struct{})}
	r.wg.Go(func() {
		for {
			select {
			case <-r.quit:
				return
			default:
			}
			if err := read(); err != nil {
				r.firstErr.Store(err)
				return
			}
			r.reads.Add(1)
		}
	})
	return r
}

// stop ends the loop and waits for it; stopping twice is harmless.
func (r *loopReader) stop() {
	select {
	case <-r.quit:
	default:
		close(r.quit)
	}
	r.wg.Wait()
}

// err is the read error that ended the loop, or nil.
func (r *loopReader) err() error {
	if e, ok := r.firstErr.Load().(error); ok {
		return e
	}
	return nil
}

// waitReads waits until n reads succeeded or one failed.
func (r *loopReader) waitReads(t *testing.T, n int64) {
	t.Helper()
	deadline := time.Now().Add(hangGuard)
	for r.reads.Load() < n && r.err() == nil {
		if time.Now().After(deadline) {
			t.Fatalf("the reader made %d reads", r.reads.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMigrateReplicatedMeta: `weft migrate` works against a replicated
// metadata group (its ops share the members' listener with raft's).
func TestMigrateReplicatedMeta(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{Servers: 2, Targets: 2, MetaReplicas: 3, Timeout: "30s"})
	f := filepath.Join(c.Mount(0), "f")
	data := bytes.Repeat([]byte("weft"), 50000)
	if err := writeNew(f, data); err != nil {
		t.Fatal(err)
	}
	out := weft(t, c, "migrate", "--mirror", "2", f)
	if !strings.Contains(out, "migrated to mirror 2") {
		t.Fatalf("migrate: %q", out)
	}
	if g := getstripeOf(t, c, f); g.Kind != "mirror" {
		t.Fatalf("after migrate: %+v", g)
	}
	b, err := os.ReadFile(filepath.Join(c.Mount(c.AddMount()), "f"))
	if err != nil || !bytes.Equal(b, data) {
		t.Fatalf("after migrate: equal %v, %v", bytes.Equal(b, data), err)
	}
}
