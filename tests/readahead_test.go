package tests

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/weft-fs/weft/internal/testcluster"
)

// TestSmallFilesReadAhead: a mount that holds leases on small files (it
// listed them with stat) and reads them in the order they were made opens
// most of them from copies it brought ahead (proto.CopyPrefetcher,
// client/ahead.go), reads the bytes the other mount wrote, and reads the
// new bytes of a file the other mount rewrote after the read-ahead may
// have brought the old ones (close-to-open: the rewrite broke the lease
// first). docs/caching.md, "Small files read ahead".
func TestSmallFilesReadAhead(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{Mounts: 2})
	a, b := c.Mount(0), c.Mount(1)
	rng := rand.New(rand.NewPCG(9, 10))
	// Each round: A writes a directory of files; B stats them all (its
	// lookups take leases, and, not followed by opens, bring no copies),
	// then reads them in order, A rewriting one of the later files half
	// way. B's lease cache is trusted only while its polls are answered in
	// time, which a busy machine may delay (then its opens ask the
	// leader): a round that read too few files from the cache is done
	// again with new files. Before each round B stats files it will not
	// read, so that its lookups are not bringing copies (client
	// copyDemand) and the opens are the read-ahead's.
	const files = 200
	for round, deadline := 0, time.Now().Add(3*time.Minute); ; round++ {
		dir := fmt.Sprintf("round%d", round)
		for _, d := range []string{dir, dir + "-unread"} {
			if err := os.Mkdir(filepath.Join(a, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		data := make([][]byte, files)
		for i := range data {
			data[i] = smallContent(rng)
			writeSmall(t, filepath.Join(a, dir, fmt.Sprint(i)), data[i], 0o644)
			writeSmall(t, filepath.Join(a, dir+"-unread", fmt.Sprint(i)), data[i], 0o644)
		}
		for i := range files {
			lstat(t, filepath.Join(b, dir+"-unread", fmt.Sprint(i)))
		}
		for i := range files {
			lstat(t, filepath.Join(b, dir, fmt.Sprint(i)))
		}
		before := mountLeases(t, b)
		rewritten := files * 3 / 4
		for i := range data {
			if i == files/2 {
				data[rewritten] = smallContent(rng)
				writeSmall(t, filepath.Join(a, dir, fmt.Sprint(rewritten)), data[rewritten], 0o644)
			}
			readSmall(t, filepath.Join(b, dir, fmt.Sprint(i)), data[i])
		}
		after := mountLeases(t, b)
		opens, ahead := after.Opens-before.Opens, after.Ahead-before.Ahead
		t.Logf("round %d: %d of %d files opened from B's cache, %d copies brought ahead (%+v)", round, opens, files, ahead, after)
		if opens >= files/2 && ahead >= files/2 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("B opened %d of %d small files it holds leases on from its cache, with %d copies brought ahead", opens, files, ahead)
		}
	}
}

// TestSmallFilesListedAhead: a mount that never saw a directory and reads
// its small files in order, each name missing its cache, lists the
// directory after a few lookups (client/statahead.go), answers the
// lookups that follow from its cache, and opens the files from copies
// brought ahead; every file reads as written. docs/caching.md, "Names
// listed ahead".
func TestSmallFilesListedAhead(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{Mounts: 2})
	a, b := c.Mount(0), c.Mount(1)
	rng := rand.New(rand.NewPCG(11, 12))
	const files = 300
	for round, deadline := 0, time.Now().Add(3*time.Minute); ; round++ {
		dir := fmt.Sprintf("round%d", round)
		if err := os.Mkdir(filepath.Join(a, dir), 0o755); err != nil {
			t.Fatal(err)
		}
		data := make([][]byte, files)
		for i := range data {
			data[i] = smallContent(rng)
			writeSmall(t, filepath.Join(a, dir, fmt.Sprint(i)), data[i], 0o644)
		}
		before := mountLeases(t, b)
		for i := range data {
			readSmall(t, filepath.Join(b, dir, fmt.Sprint(i)), data[i])
		}
		after := mountLeases(t, b)
		listed, hits := after.Listed-before.Listed, after.Hits-before.Hits
		t.Logf("round %d: %d entries listed ahead, %d lookups and stats answered from the cache, %d opens from it", round, listed, hits, after.Opens-before.Opens)
		if listed >= files && hits >= files/2 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("B listed %d entries ahead and answered %d lookups and stats from its cache reading %d files of a directory it never saw", listed, hits, files)
		}
	}
}
