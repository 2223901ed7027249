package store

import (
	"log/slog"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// crashReopen stops s as a power loss would (only what was synced
// survives) and opens the copy of its file system with o.
func crashReopen(t *testing.T, fs *vfs.MemFS, s *Pebble, o PebbleOptions) (*vfs.MemFS, *Pebble) {
	t.Helper()
	crashed := fs.CrashClone(vfs.CrashCloneCfg{})
	s.Close()
	o.FS = crashed
	o.Logger = slog.New(slog.DiscardHandler)
	p, err := OpenPebble("db", o)
	if err != nil {
		t.Fatalf("open after a crash: %v", err)
	}
	return crashed, p
}

// TestPebbleNoWAL: without a WAL a commit survives a crash only once a
// flush made it durable (Flush, Sync, Commit(true), Checkpoint, and
// Close, which a clean stop goes through); what survives is a prefix of
// the batches, whole; and the store opens after a crash without any
// integrity check taking the missing tail for damage.
func TestPebbleNoWAL(t *testing.T) {
	o := PebbleOptions{NoWAL: true}
	fs := vfs.NewCrashableMem()
	s, err := OpenPebble("db", PebbleOptions{FS: fs, NoWAL: true})
	if err != nil {
		t.Fatal(err)
	}
	if !s.NoWAL() {
		t.Fatal("NoWAL() false for a store opened without a WAL")
	}
	put(t, s, "a", "1")
	wantValue(t, s, "a", "1") // visible at once
	fs, s = crashReopen(t, fs, s, o)
	wantValue(t, s, "a", "") // never flushed: gone

	// Each durability point flushes every commit before it.
	points := []struct {
		name string
		do   func(s *Pebble) error
	}{
		{"sync", func(s *Pebble) error { return s.Sync() }},
		{"flush", func(s *Pebble) error { return s.Flush() }},
		{"commit-sync", func(s *Pebble) error {
			b := s.NewBatch()
			b.Set([]byte("synced"), []byte("yes"))
			return b.Commit(true)
		}},
		{"checkpoint", func(s *Pebble) error { return s.Checkpoint("cp") }},
	}
	for _, pt := range points {
		put(t, s, "k", pt.name)
		put(t, s, "multi-1", pt.name)
		if err := pt.do(s); err != nil {
			t.Fatalf("%s: %v", pt.name, err)
		}
		put(t, s, "k", pt.name+"-after") // committed after the point: lost
		fs, s = crashReopen(t, fs, s, o)
		wantValue(t, s, "k", pt.name)
		wantValue(t, s, "multi-1", pt.name)
	}
	wantValue(t, s, "synced", "yes")
	// The checkpoint holds what was committed before it, though no WAL did.
	cp, err := OpenPebble("cp", PebbleOptions{FS: fs, NoWAL: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	wantValue(t, cp, "k", "checkpoint")
	cp.Close()

	// A clean stop keeps everything.
	put(t, s, "k", "closed")
	s.Close()
	s, err = OpenPebble("db", PebbleOptions{FS: fs, NoWAL: true})
	if err != nil {
		t.Fatal(err)
	}
	wantValue(t, s, "k", "closed")
	s.Close()
}

// TestPebbleNoWALSwitch: a store that had a WAL opens without one with
// every commit its WAL synced (replayed, then flushed at open, so a crash
// right after loses none of it), and a store without a WAL opens with one.
func TestPebbleNoWALSwitch(t *testing.T) {
	fs := vfs.NewCrashableMem()
	s, err := OpenPebble("db", PebbleOptions{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	put(t, s, "k", "in-the-wal")
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	fs, s = crashReopen(t, fs, s, PebbleOptions{NoWAL: true})
	wantValue(t, s, "k", "in-the-wal")
	fs, s = crashReopen(t, fs, s, PebbleOptions{NoWAL: true})
	wantValue(t, s, "k", "in-the-wal")
	put(t, s, "k", "no-wal")
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	_, s = crashReopen(t, fs, s, PebbleOptions{})
	wantValue(t, s, "k", "no-wal")
	if s.NoWAL() {
		t.Fatal("NoWAL() true for a store opened with a WAL")
	}
	s.Close()
}
