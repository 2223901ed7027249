package raftlog

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/weft-fs/weft/internal/testutil"
	pb "go.etcd.io/raft/v3/raftpb"
)

// writeLog saves n entries of 300 bytes, each synced, and flushes the
// log's memtable to a table if flush.
func writeLog(t *testing.T, dir string, n int, flush bool) {
	t.Helper()
	s, err := OpenStorage(dir, StorageOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		if err := s.Save(nil, []*pb.Entry{ent(uint64(i), 1, strings.Repeat("v", 300))}, nil, true); err != nil {
			t.Fatal(err)
		}
	}
	if flush {
		if err := s.db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func flip(t *testing.T, path string, off int64) {
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

// TestStorageCorruptRefused: a byte flipped in the middle of the log's
// WAL (synced records after it) or in a table makes OpenStorage fail with
// ErrCorrupt and the re-sync hint; never a panic, never a shorter log.
func TestStorageCorruptRefused(t *testing.T) {
	for _, tc := range []struct {
		name, suffix string
		flush        bool
	}{{"wal", ".log", false}, {"sst", ".sst", true}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeLog(t, dir, 301, tc.flush)
			path, size := testutil.Largest(t, vfs.Default, dir, tc.suffix)
			if tc.suffix == ".log" && size < 64<<10 {
				t.Fatalf("%s of %d bytes: too small", path, size)
			}
			flip(t, path, size/2)
			s, err := OpenStorage(dir, StorageOptions{})
			if err == nil {
				last, _ := s.LastIndex()
				s.Close()
				t.Fatalf("opened a damaged log; it holds %d of 301 entries", last)
			}
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "re-sync") {
				t.Fatalf("open: %v, want ErrCorrupt with the hint", err)
			}
		})
	}
	// An intact log opens whole.
	dir := t.TempDir()
	writeLog(t, dir, 50, true)
	s, err := OpenStorage(dir, StorageOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	es, err := s.Entries(1, 51, 1<<30)
	if err != nil || len(es) != 50 || !bytes.Equal(es[49].GetData(), bytes.Repeat([]byte("v"), 300)) {
		t.Fatalf("intact log: %d entries, %v", len(es), err)
	}
}
