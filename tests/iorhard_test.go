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
	c := testcluster.Start(t, testcluster.Options{Servers: 2, Targets: 4, Mounts: 2})
	name := "ior-hard.dat"
	f, err := os.Create(filepath.Join(c.Mount(0), name))
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	runIORHard(t, c, name)
}

// TestIORHardMirror runs the same on a mirror 2 file (2 stripes, 2 copies
// each): both mounts' writers reach both copies of every stripe, and every
// byte reads back from both mounts and from each copy alone.
func TestIORHardMirror(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Servers: 2, Targets: 4, Mounts: 2})
	name := "ior-hard.dat"
	weft(t, c, "setstripe", "--mirror", "2", "-c", "2", "-S", "1M", filepath.Join(c.Mount(0), name))
	runIORHard(t, c, name)
	if l, err := testcluster.GetLayout(filepath.Join(c.Mount(0), name)); err != nil || l.Kind != "mirror" || len(l.Stale) != 0 {
		t.Fatalf("layout after the run: %+v %v", l, err)
	}
	// Each server alone holds one copy of every stripe: read with the
	// other stopped, from a new mount.
	for s := range 2 {
		c.StopStorage(s)
		m := c.AddMount()
		checkIORHard(t, c.Mount(m), name, 1)
		c.StopMount(m)
		c.StartStorage(s)
		c.WaitTargetsUp(4)
	}
}

const (
	iorRecsize = 47008
	iorPerProc = 30
	iorMounts  = 2
	iorProcs   = 3
	iorNproc   = iorMounts * iorProcs
	iorNrec    = iorNproc * iorPerProc // 180 records, 8.1 MiB
)

// runIORHard writes the ior-hard pattern into name through the cluster's
// first two mounts and checks every byte from both.
func runIORHard(t *testing.T, c *testcluster.Cluster, name string) {
	const (
		recsize = iorRecsize
		mounts  = iorMounts
		nproc   = iorNproc
		nrec    = iorNrec
	)
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
	for m := 0; m < mounts; m++ {
		checkIORHard(t, c.Mount(m), name, m)
	}
}

// checkIORHard reads name through the mount at mnt and compares every
// record.
func checkIORHard(t *testing.T, mnt, name string, m int) {
	t.Helper()
	const recsize, nrec = iorRecsize, iorNrec
	want := make([]byte, nrec*recsize)
	for k := 0; k < nrec; k++ {
		fillRecord(want[k*recsize:(k+1)*recsize], k)
	}
	got, size, err := readAllFstat(filepath.Join(mnt, name))
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
