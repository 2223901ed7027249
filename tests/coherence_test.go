package tests

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/weft-fs/weft/internal/testcluster"
)

// readAllFstat opens path, returns its content and the size fstat reports
// on the fresh descriptor.
func readAllFstat(path string) ([]byte, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	b, err := io.ReadAll(f)
	return b, fi.Size(), err
}

// TestCloseToOpen checks close-to-open consistency between two mounts: once
// a writer on one mount has closed a file, an open on the other mount sees
// all of its data and its size, whatever the reader had cached.
func TestCloseToOpen(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Servers: 2, Targets: 4, Mounts: 2})
	w, r := c.Mount(0), c.Mount(1)
	if err := os.Mkdir(filepath.Join(w, "s"), 0o755); err != nil {
		t.Fatal(err)
	}
	weft(t, c, "setstripe", "-c", "4", "-S", "64K", filepath.Join(w, "s"))

	for _, name := range []string{"plain", "s/striped"} {
		t.Run(name, func(t *testing.T) {
			check := func(step string, want []byte) {
				t.Helper()
				got, size, err := readAllFstat(filepath.Join(r, name))
				if err != nil {
					t.Fatalf("%s: reader: %v", step, err)
				}
				if size != int64(len(want)) {
					t.Errorf("%s: reader's fstat size %d, want %d", step, size, len(want))
				}
				if !bytes.Equal(got, want) {
					t.Errorf("%s: reader: %s", step, firstDiff(got, want))
				}
			}
			// 1. New file: the reader has never seen it.
			v1 := pattern(11, 0, 700<<10+3)
			if err := os.WriteFile(filepath.Join(w, name), v1, 0o644); err != nil {
				t.Fatal(err)
			}
			check("new file", v1)

			// 2. The reader has it cached (just read it), and keeps a
			// descriptor open; the writer overwrites part and extends it.
			held, err := os.Open(filepath.Join(r, name))
			if err != nil {
				t.Fatal(err)
			}
			defer held.Close()
			io.ReadAll(held)
			f, err := os.OpenFile(filepath.Join(w, name), os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			v2 := append([]byte(nil), v1...)
			patch := pattern(12, 100<<10, 300<<10)
			copy(v2[100<<10:], patch)
			ext := pattern(13, int64(len(v2)), 500<<10)
			v2 = append(v2, ext...)
			f.WriteAt(patch, 100<<10)
			f.WriteAt(ext, int64(len(v1)))
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			check("overwrite+extend while cached and held open", v2)

			// 3. Truncate down on the writer's side.
			if err := os.Truncate(filepath.Join(w, name), 123457); err != nil {
				t.Fatal(err)
			}
			check("truncate", v2[:123457])

			// 4. Replace by rename: the reader's open resolves the name anew.
			v3 := pattern(14, 0, 200<<10)
			tmp := filepath.Join(w, name+".tmp")
			os.WriteFile(tmp, v3, 0o644)
			if err := os.Rename(tmp, filepath.Join(w, name)); err != nil {
				t.Fatal(err)
			}
			failed := t.Failed()
			check("rename over", v3)
			if !failed && t.Failed() {
				// Say whether the reader is merely stale (a cached
				// name) or wrong for good.
				time.Sleep(1500 * time.Millisecond)
				got, _, err := readAllFstat(filepath.Join(r, name))
				t.Logf("rename over: 1.5s later the reader sees the new file: %v (%v)", bytes.Equal(got, v3), err)
			}

			// 5. The reader's page cache is kept across its own opens
			// while nothing changed; then the writer rewrites bytes in
			// place (same size) and puts the old mtime back, as rsync
			// or `touch -r` would: the next open must still see it.
			check("reopen, unchanged", v3)
			check("reopen again (cache kept)", v3)
			fi, err := os.Stat(filepath.Join(w, name))
			if err != nil {
				t.Fatal(err)
			}
			v4 := append([]byte(nil), v3...)
			copy(v4[1000:], pattern(15, 1000, 5000))
			f, err = os.OpenFile(filepath.Join(w, name), os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteAt(v4[1000:6000], 1000)
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(filepath.Join(w, name), fi.ModTime(), fi.ModTime()); err != nil {
				t.Fatal(err)
			}
			check("same-size rewrite with the old mtime put back", v4)
		})
	}

	// Many small files written on one mount, each read once on the other.
	t.Run("many", func(t *testing.T) {
		os.Mkdir(filepath.Join(w, "many"), 0o755)
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				for i := g; i < 200; i += 4 {
					p := "many/" + strconv.Itoa(i)
					want := pattern(uint32(i), 0, 1000+i*37)
					if err := os.WriteFile(filepath.Join(w, p), want, 0o644); err != nil {
						errs <- err
						return
					}
					got, size, err := readAllFstat(filepath.Join(r, p))
					if err != nil || size != int64(len(want)) || !bytes.Equal(got, want) {
						errs <- fmt.Errorf("%s: size %d, %v: %s", p, size, err, firstDiff(got, want))
						return
					}
				}
			}(g)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})
}
