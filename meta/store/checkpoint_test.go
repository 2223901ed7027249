package store

import (
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func put(t *testing.T, s Store, k, v string) {
	t.Helper()
	b := s.NewBatch()
	b.Set([]byte(k), []byte(v))
	if err := b.Commit(false); err != nil {
		t.Fatal(err)
	}
}

func wantValue(t *testing.T, s Store, k, want string) {
	t.Helper()
	v, err := s.Get([]byte(k))
	if want == "" {
		if !errors.Is(err, ErrNotFound) {
			t.Fatalf("%s: %q, %v; want not found", k, v, err)
		}
		return
	}
	if err != nil || string(v) != want {
		t.Fatalf("%s: %q, %v; want %q", k, v, err, want)
	}
}

// TestCheckpointReplace: a checkpoint holds what was committed (synced or
// not) when it was taken; Replace makes it the store's whole content,
// leaves the checkpoint's files as they were (a second store is replaced
// from the same checkpoint), and a batch made before the Replace is
// refused rather than applied to the new database.
func TestCheckpointReplace(t *testing.T) {
	fs := vfs.NewMem()
	a, err := OpenPebble("a", PebbleOptions{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	put(t, a, "k", "1")
	put(t, a, "gone", "x")
	if err := a.Checkpoint("cp"); err != nil {
		t.Fatal(err)
	}
	put(t, a, "k", "2")
	put(t, a, "later", "y")

	b, err := OpenPebble("b", PebbleOptions{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	put(t, b, "other", "z")
	stale := b.NewBatch()
	stale.Set([]byte("stale"), []byte("1"))
	for _, s := range []*Pebble{b, a} {
		if err := s.Replace("cp"); err != nil {
			t.Fatal(err)
		}
		wantValue(t, s, "k", "1")
		wantValue(t, s, "gone", "x")
		wantValue(t, s, "later", "")
		wantValue(t, s, "other", "")
		put(t, s, "after", "1")
		wantValue(t, s, "after", "1")
	}
	if err := stale.Commit(false); err == nil {
		t.Fatal("a batch made before Replace was committed to the new database")
	}
	wantValue(t, b, "stale", "")
	// The checkpoint itself did not change: it opens as it was.
	c, err := OpenPebble("cp", PebbleOptions{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	wantValue(t, c, "k", "1")
	wantValue(t, c, "after", "")
	c.Close()
}

// TestReplaceCrash: a crash before Replace's commit point (dir.tmp
// complete or not) leaves the old store; after it (dir.new in place, the
// old store renamed or not) the next open finishes the replacement.
func TestReplaceCrash(t *testing.T) {
	for _, stage := range []string{"tmp", "new", "old+new"} {
		t.Run(stage, func(t *testing.T) {
			fs := vfs.NewMem()
			s, err := OpenPebble("s", PebbleOptions{FS: fs})
			if err != nil {
				t.Fatal(err)
			}
			put(t, s, "k", "new")
			if err := s.Checkpoint("cp"); err != nil {
				t.Fatal(err)
			}
			s.Close()
			s, err = OpenPebble("s", PebbleOptions{FS: fs})
			if err != nil {
				t.Fatal(err)
			}
			put(t, s, "k", "old")
			if err := s.Sync(); err != nil {
				t.Fatal(err)
			}
			s.Close()
			// What Replace leaves at each stage.
			copyDir(t, fs, "cp", "s"+map[string]string{"tmp": replaceTmp, "new": replaceNew, "old+new": replaceNew}[stage])
			if stage == "old+new" {
				if err := fs.Rename("s", "s"+replaceOld); err != nil {
					t.Fatal(err)
				}
			}
			s, err = OpenPebble("s", PebbleOptions{FS: fs})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			want := "new"
			if stage == "tmp" {
				want = "old"
			}
			wantValue(t, s, "k", want)
			for _, suffix := range []string{replaceTmp, replaceNew, replaceOld} {
				if _, err := fs.Stat("s" + suffix); err == nil {
					t.Fatalf("s%s left behind", suffix)
				}
			}
		})
	}
}

func copyDir(t *testing.T, fs vfs.FS, from, to string) {
	t.Helper()
	names, err := fs.List(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.MkdirAll(to, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if err := vfs.Copy(fs, fs.PathJoin(from, n), fs.PathJoin(to, n)); err != nil {
			t.Fatal(err)
		}
	}
}
