package testutil

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// ContentLen is len(b) without the zeros at its end. A pebble write-ahead
// log is prefilled with zeros (package walprefill), so its file size says
// nothing of how much was written; its records end where the zeros start.
func ContentLen(b []byte) int64 {
	return int64(len(bytes.TrimRight(b, "\x00")))
}

// Largest returns the file in dir of fs (vfs.Default: the OS's) whose name
// ends in suffix with the most content (ContentLen), and that length: the
// log or table a test damages.
func Largest(t testing.TB, fs vfs.FS, dir, suffix string) (string, int64) {
	t.Helper()
	names, err := fs.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	best, size := "", int64(-1)
	for _, n := range names {
		if !strings.HasSuffix(n, suffix) {
			continue
		}
		path := fs.PathJoin(dir, n)
		f, err := fs.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if l := ContentLen(b); l > size {
			best, size = path, l
		}
	}
	if best == "" {
		t.Fatalf("no *%s file in %s", suffix, dir)
	}
	return best, size
}
