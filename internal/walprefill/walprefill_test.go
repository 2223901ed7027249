package walprefill

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

const testSize = 1 << 20

func open(t *testing.T, fs vfs.FS, dir string) *pebble.DB {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{FS: Wrap(fs, testSize), FormatMajorVersion: pebble.FormatNewest})
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func logs(t *testing.T, fs vfs.FS, dir string) []string {
	t.Helper()
	names, err := fs.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range names {
		if strings.HasSuffix(n, ".log") {
			out = append(out, fs.PathJoin(dir, n))
		}
	}
	return out
}

func countKeys(t *testing.T, db *pebble.DB) int {
	t.Helper()
	it, err := db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for it.First(); it.Valid(); it.Next() {
		n++
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	return n
}

// A database on the wrapped FS gets logs of the prefill size, and what it
// synced into one is all there after a crash (the zeros after the last
// record read as the log's end, not as damage) and after a clean close.
func TestPrefilledLogReplays(t *testing.T) {
	fs := vfs.NewCrashableMem()
	db := open(t, fs, "db")
	ls := logs(t, fs, "db")
	if len(ls) == 0 {
		t.Fatal("no log file")
	}
	for _, l := range ls {
		st, err := fs.Stat(l)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() != testSize {
			t.Fatalf("%s has %d bytes, want %d (prefilled)", l, st.Size(), testSize)
		}
	}
	const n = 500
	for i := range n {
		if err := db.Set(fmt.Appendf(nil, "k%04d", i), []byte(strings.Repeat("v", 300)), pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for name, fs := range map[string]vfs.FS{"after a crash": crashed, "after close": fs} {
		db := open(t, fs, "db")
		if got := countKeys(t, db); got != n {
			t.Errorf("%s: %d of %d synced keys", name, got, n)
		}
		db.Close()
	}
}

// Only logs are prefilled: a table or any other file pebble creates is
// passed through as the wrapped FS makes it.
func TestOnlyLogsPrefilled(t *testing.T) {
	fs := Wrap(vfs.NewMem(), testSize)
	for _, c := range []vfs.DiskWriteCategory{"pebble-memtable-flush", vfs.WriteCategoryUnspecified} {
		f, err := fs.Create("f-"+string(c), c)
		if err != nil {
			t.Fatal(err)
		}
		st, _ := f.Stat()
		f.Close()
		if st.Size() != 0 {
			t.Errorf("a %q file was created with %d bytes", c, st.Size())
		}
	}
}

// A log that cannot be prefilled (the disk is full) is not created: the
// error says what failed and no file is left behind.
func TestPrefillFailureLeavesNoFile(t *testing.T) {
	fs := Wrap(fullFS{vfs.NewMem()}, testSize)
	_, err := fs.Create("000001.log", walCategory)
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "000001.log") {
		t.Fatalf("Create on a full disk: %v, want ENOSPC naming the file", err)
	}
	if _, err := fs.Stat("000001.log"); err == nil {
		t.Fatal("the log that could not be prefilled was left behind")
	}
}

// fullFS makes files whose writes fail with ENOSPC.
type fullFS struct{ vfs.FS }

func (fs fullFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	return fullFile{f}, err
}

type fullFile struct{ vfs.File }

func (fullFile) WriteAt([]byte, int64) (int, error) { return 0, syscall.ENOSPC }
