package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestRun writes, reads and randomly reads a file on the local file
// system with direct I/O and checks what each run says it did.
func TestRun(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	do := func(args ...string) result {
		t.Helper()
		var out bytes.Buffer
		if err := run(args, &out); err != nil {
			t.Fatalf("run %v: %v", args, err)
		}
		var r result
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			t.Fatalf("run %v printed %q: %v", args, out.String(), err)
		}
		return r
	}
	w := do("write", path, "--size", "3MiB", "--bs", "1MiB")
	if w.Op != "write" || w.Bytes != 3<<20 || w.Ops != 3 || w.MiBs <= 0 {
		t.Errorf("write: %+v", w)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != 3<<20 {
		t.Fatalf("after write: %v, %v", fi, err)
	}
	r := do("read", path, "--bs", "1MiB")
	if r.Bytes != 3<<20 || r.Ops != 3 {
		t.Errorf("read: %+v", r)
	}
	rr := do("randread", path, "--jobs", "2", "--time", "50ms")
	if rr.Ops < 1 || rr.Bytes != rr.Ops*4096 || rr.IOPS <= 0 {
		t.Errorf("randread: %+v", rr)
	}
}

func TestRunRefuses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	for _, args := range [][]string{
		{},
		{"frob", path},
		{"write"},
		{"write", path, "--bs", "1000"},
		{"read", path + "-missing"},
		{"randread", path + "-missing"},
	} {
		if err := run(args, &bytes.Buffer{}); err == nil {
			t.Errorf("run %q succeeded", args)
		}
	}
	if err := os.WriteFile(path, []byte("short"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"randread", path, "--direct=false"}, &bytes.Buffer{}); err == nil {
		t.Error("randread of a file shorter than a block succeeded")
	}
}
