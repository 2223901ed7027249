package store

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/weft-fs/weft/internal/testutil"
)

// fill writes n synced entries of about 300 bytes each, one batch each, as
// the metadata service does, and closes the store.
func fill(t *testing.T, dir string, n int, flush bool) {
	t.Helper()
	p, err := OpenPebble(dir, PebbleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		b := p.NewBatch()
		b.Set([]byte(fmt.Sprintf("k%06d", i)), bytes.Repeat([]byte{'v'}, 300))
		if err := b.Commit(true); err != nil {
			t.Fatal(err)
		}
	}
	if flush {
		if err := p.db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

func flipByte(t *testing.T, path string, off int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[off] ^= 0x40
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func countKeys(t *testing.T, p *Pebble) int {
	n := 0
	if err := p.Scan([]byte("k"), []byte("l"), func(k, v []byte) bool { n++; return true }); err != nil {
		t.Fatal(err)
	}
	return n
}

// A byte flipped in the middle of the WAL, with synced records after it,
// is refused at open as corruption; before, pebble replayed up to the
// damage and opened with the rest silently dropped.
func TestPebbleCorruptWALRefused(t *testing.T) {
	dir := t.TempDir()
	fill(t, dir, 301, false)
	wal, size := testutil.Largest(t, vfs.Default, dir, ".log")
	if size < 64<<10 {
		t.Fatalf("WAL of %d bytes: too small to have records after the middle block", size)
	}
	flipByte(t, wal, int(size/2))
	var logs testutil.LogBuffer
	p, err := OpenPebble(dir, PebbleOptions{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err == nil {
		n := countKeys(t, p)
		p.Close()
		t.Fatalf("opened a store with a damaged WAL; %d of 301 entries", n)
	}
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("open: %v, want ErrCorrupt", err)
	}
	t.Logf("refused: %v", err)
}

// A flipped byte in a table is refused at open by the consistency check,
// with no panic (pebble's default reaction to corruption is Fatalf).
func TestPebbleCorruptSSTRefused(t *testing.T) {
	dir := t.TempDir()
	fill(t, dir, 3000, true)
	sst, size := testutil.Largest(t, vfs.Default, dir, ".sst")
	flipByte(t, sst, int(size/3))
	var logs testutil.LogBuffer
	p, err := OpenPebble(dir, PebbleOptions{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err == nil {
		p.Close()
		t.Fatal("opened a store with a damaged table")
	}
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("open: %v, want ErrCorrupt", err)
	}
	if !strings.Contains(logs.String(), "level=ERROR") {
		t.Fatalf("corruption not logged at error:\n%s", logs.String())
	}
	t.Logf("refused: %v", err)
}

// The same table damage with the check skipped: the first read of the
// damaged block fails with ErrCorrupt, and every call after it, instead
// of a panic.
func TestPebbleCorruptSSTReadFails(t *testing.T) {
	dir := t.TempDir()
	fill(t, dir, 3000, true)
	sst, size := testutil.Largest(t, vfs.Default, dir, ".sst")
	flipByte(t, sst, int(size/3))
	var logs testutil.LogBuffer
	p, err := OpenPebble(dir, PebbleOptions{SkipCheck: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatalf("open without check: %v", err)
	}
	defer p.Close()
	err = p.Scan([]byte("k"), []byte("l"), func(k, v []byte) bool { return true })
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("scan over a damaged block: %v, want ErrCorrupt", err)
	}
	if _, err := p.Get([]byte("k000001")); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("get after corruption: %v, want ErrCorrupt", err)
	}
	b := p.NewBatch()
	b.Set([]byte("z"), nil)
	if err := b.Commit(true); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("commit after corruption: %v, want ErrCorrupt", err)
	}
}

// A directory with someone else's files is not made a store.
func TestPebbleRefusesForeignDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "thesis.tex"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if p, err := OpenPebble(dir, PebbleOptions{}); !errors.Is(err, ErrNotStore) {
		if err == nil {
			p.Close()
		}
		t.Fatalf("open of a foreign directory: %v, want ErrNotStore", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "MANIFEST-000001")); err == nil {
		t.Fatal("a database was created beside the foreign files")
	}
}

// BenchmarkOpenCheck measures the consistency check at open on a store of
// 1M entries of metadata-sized values (about 120 bytes), flushed to tables.
func BenchmarkOpenCheck(b *testing.B) {
	dir := b.TempDir()
	p, err := OpenPebble(dir, PebbleOptions{})
	if err != nil {
		b.Fatal(err)
	}
	const n = 1_000_000
	val := bytes.Repeat([]byte{'v'}, 120)
	for i := 0; i < n; i += 1000 {
		bt := p.NewBatch()
		for j := i; j < i+1000; j++ {
			bt.Set([]byte(fmt.Sprintf("i%08d", j)), val)
		}
		if err := bt.Commit(false); err != nil {
			b.Fatal(err)
		}
	}
	if err := p.db.Flush(); err != nil {
		b.Fatal(err)
	}
	p.Close()
	b.ResetTimer()
	for range b.N {
		p, err := OpenPebble(dir, PebbleOptions{})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(p.Checked().Points), "points")
		b.ReportMetric(p.Checked().Took.Seconds(), "check-s")
		p.Close()
	}
}

func TestMarkRoundTripAndDamage(t *testing.T) {
	dir := t.TempDir()
	p, err := OpenPebble(dir, PebbleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, ok, err := p.ReadMark(); ok || err != nil {
		t.Fatalf("fresh store has a mark: %v %v", ok, err)
	}
	want := Mark{FSID: "6f1c7c8e-1b7a-4c1e-9a55-0d1d2c3b4a59", Applied: 1 << 40}
	if err := p.WriteMark(want); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := p.ReadMark(); !ok || err != nil || got != want {
		t.Fatalf("read %+v %v %v, want %+v", got, ok, err, want)
	}
	path := filepath.Join(dir, MarkFile)
	enc, _ := os.ReadFile(path)
	for i := range enc {
		flipByte(t, path, i)
		if _, _, err := p.ReadMark(); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("byte %d flipped: %v, want ErrCorrupt", i, err)
		}
		flipByte(t, path, i)
	}
}

func FuzzDecodeMark(f *testing.F) {
	f.Add(EncodeMark(Mark{FSID: "x", Applied: 7}))
	f.Add([]byte("weftmark"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeMark(b)
		if err == nil {
			if got, err := DecodeMark(EncodeMark(m)); err != nil || got != m {
				t.Fatalf("round trip of %+v: %+v %v", m, got, err)
			}
		}
	})
}

// A directory whose database was removed but whose mark is left is
// corrupt, not a place for a new empty store.
func TestPebbleMarkWithoutDatabase(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, MarkFile), EncodeMark(Mark{Applied: 9}), 0o644); err != nil {
		t.Fatal(err)
	}
	if p, err := OpenPebble(dir, PebbleOptions{}); !errors.Is(err, ErrCorrupt) {
		if err == nil {
			p.Close()
		}
		t.Fatalf("open: %v, want ErrCorrupt", err)
	}
}

// TestOpenInUse: a store another open holds fails with ErrInUse and a
// message that says what to do, not pebble's raw lock error.
func TestOpenInUse(t *testing.T) {
	dir := t.TempDir()
	p, err := OpenPebble(dir, PebbleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	_, err = OpenPebble(dir, PebbleOptions{})
	if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "stop it first") {
		t.Fatalf("second open: %v, want ErrInUse", err)
	}
}
