package testutil

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ContentLen is len(b) without the zeros at its end. A pebble write-ahead
// log is prefilled with zeros (package walprefill), so its file size says
// nothing of how much was written; its records end where the zeros start.
func ContentLen(b []byte) int64 {
	return int64(len(bytes.TrimRight(b, "\x00")))
}

// Largest returns the file in dir whose name ends in suffix with the most
// content (ContentLen), and that length: the log or table a test damages.
func Largest(t testing.TB, dir, suffix string) (string, int64) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	best, size := "", int64(-1)
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), suffix) || !e.Type().IsRegular() {
			continue
		}
		path := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if n := ContentLen(b); n > size {
			best, size = path, n
		}
	}
	if best == "" {
		t.Fatalf("no *%s file in %s", suffix, dir)
	}
	return best, size
}
