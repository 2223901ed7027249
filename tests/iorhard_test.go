package tests

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/weft-fs/weft/internal/testcluster"
)

// TestIORHard runs the IO500 ior-hard pattern: writers on two mounts, three
// processes per mount, write disjoint interleaved 47,008-byte records into
// one shared file. Records share pages and stripes with records of other
// writers, so any read-modify-write of a whole page or stripe by a client
// clobbers someone else's bytes. Every byte is checked from both mounts.
func TestIORHard(t *testing.T) {
	const (
		recsize = 47008
		perProc = 30
		mounts  = 2
		procs   = 3
		nproc   = mounts * procs
		nrec    = nproc * perProc // 180 records, 8.1 MiB
	)
	c := testcluster.Start(t, testcluster.Options{Servers: 2, Targets: 4, Mounts: mounts})
	name := "ior-hard.dat"
	f, err := os.Create(filepath.Join(c.Mount(0), name))
	if err != nil {
		t.Fatal(err)
	}
	f.Close()

	start := time.Now()
	var wg sync.WaitGroup
	results := make([]string, nproc)
	for i := 0; i < nproc; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			path := filepath.Join(c.Mount(i%mounts), name)
			results[i] = runHelper(t, nil, "records", path, strconv.Itoa(nproc), strconv.Itoa(i), strconv.Itoa(nrec), strconv.Itoa(recsize))
		}(i)
	}
	wg.Wait()
	el := time.Since(start)
	t.Logf("%d processes on %d mounts wrote %d records of %d bytes in %v (%.1f MiB/s)",
		nproc, mounts, nrec, recsize, el, float64(nrec*recsize)/(1<<20)/el.Seconds())
	for i, r := range results {
		if r != "ok" {
			t.Errorf("writer %d: %s", i, r)
		}
	}

	want := make([]byte, nrec*recsize)
	for k := 0; k < nrec; k++ {
		fillRecord(want[k*recsize:(k+1)*recsize], k)
	}
	for m := 0; m < mounts; m++ {
		got, size, err := readAllFstat(filepath.Join(c.Mount(m), name))
		if err != nil {
			t.Fatalf("mount %d: %v", m, err)
		}
		if size != int64(len(want)) {
			t.Errorf("mount %d: size %d, want %d", m, size, len(want))
		}
		if !bytes.Equal(got, want) {
			t.Errorf("mount %d: %s; bad records: %s", m, firstDiff(got, want), badRecords(got, want, recsize))
		}
	}
}

// badRecords lists which records differ and which writer owned them.
func badRecords(got, want []byte, recsize int) string {
	var s []string
	for k := 0; k*recsize < len(want); k++ {
		end := min((k+1)*recsize, len(got))
		if k*recsize >= len(got) || !bytes.Equal(got[k*recsize:end], want[k*recsize:(k+1)*recsize]) {
			s = append(s, strconv.Itoa(k))
		}
	}
	if len(s) > 20 {
		return fmt.Sprintf("%d records, first %v", len(s), s[:20])
	}
	return fmt.Sprint(s)
}
