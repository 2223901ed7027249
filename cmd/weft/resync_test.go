package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestResyncFlags(t *testing.T) {
	wantErr(t, execute(newResyncCmd()), "requires at least 1 arg")
	// Not on weft: each file says so, and the command fails.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	wantErr(t, execute(newResyncCmd(), dir), "1 files not repaired")
	wantErr(t, execute(newResyncCmd(), filepath.Join(dir, "missing")), "no such file")
}
