package vfs

import (
	"io"
	"path/filepath"
	"testing"
)

// TestNextData: a real sparse file's holes are skipped; a file that cannot
// tell (in memory, or wrapped) reports data from off to its end, never less.
func TestNextData(t *testing.T) {
	const gib = 1 << 30
	for _, tc := range []struct {
		name   string
		fs     FS
		dir    string
		sparse bool
	}{
		{"os", Default, t.TempDir(), true},
		{"faulty os", NewFaulty(Default), t.TempDir(), true},
		{"mem", NewMem(1 << 30), "/", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			size := int64(gib)
			if !tc.sparse {
				size = 1 << 20
			}
			f, err := tc.fs.Create(filepath.Join(tc.dir, "f"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt([]byte("x"), size/2); err != nil {
				t.Fatal(err)
			}
			if err := f.Truncate(size); err != nil {
				t.Fatal(err)
			}
			start, end, err := NextData(f, 0)
			if err != nil {
				t.Fatal(err)
			}
			if start > size/2 || end <= size/2 {
				t.Fatalf("data range [%d, %d) misses the byte at %d", start, end, size/2)
			}
			if tc.sparse && (start == 0 || end-start > 1<<20) {
				t.Fatalf("sparse file: data range [%d, %d), want a small one around %d", start, end, size/2)
			}
			if _, _, err := NextData(f, end); tc.sparse && err != io.EOF {
				t.Fatalf("past the data: %v, want io.EOF", err)
			}
			if _, _, err := NextData(f, size); err != io.EOF {
				t.Fatalf("at the end: %v, want io.EOF", err)
			}
		})
	}
}
