package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestMigrateFlags checks what migrate refuses before it touches a file.
// The migration itself is tested on a real cluster (tests/migrate_test.go).
func TestMigrateFlags(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "f")
	if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "p")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	wantErr(t, execute(newMigrateCmd()), "requires at least 1 arg")
	wantErr(t, execute(newMigrateCmd(), f), "nothing to change")
	wantErr(t, execute(newMigrateCmd(), "--mirror", "9", f), "--mirror 9: want 2..5 copies")
	wantErr(t, execute(newMigrateCmd(), "--mirror", "2", "--ec", "2+1", f), "exclude each other")
	wantErr(t, execute(newMigrateCmd(), "-c", "0", f), "-c 0")
	wantErr(t, execute(newMigrateCmd(), "-o", "1,1", f), "given twice")
	wantErr(t, execute(newMigrateCmd(), "--target", "2,2", f), "given twice")
	wantErr(t, execute(newMigrateCmd(), "--raid0", dir), "is a directory", "-r")
	wantErr(t, execute(newMigrateCmd(), "--raid0", fifo), "not a regular file")
	wantErr(t, execute(newMigrateCmd(), "--raid0", filepath.Join(dir, "missing")), "no such file")
	// Not on weft: the file says so.
	wantErr(t, execute(newMigrateCmd(), "--raid0", f), "not on a weft file system")
	wantErr(t, execute(newMigrateCmd(), "-r", "--raid0", dir), "1 files not migrated")
}
