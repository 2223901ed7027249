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

// TestSmallFilesFromLookup: a mount reading small files it has not looked
// at before gets each one's copy with its lookup and opens the file from
// its lease cache (one round trip per file instead of a lookup and an
// open: proto.LookupCopier, client.OpenCached), reads the bytes the other
// mount wrote, and once the other mount has rewritten a file, reads the
// new bytes (close-to-open: the rewrite broke the lease first). A file
// only its owner may read is never opened from the cache (docs/caching.md,
// "Small files from the lookup").
func TestSmallFilesFromLookup(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{Mounts: 2})
	a, b := c.Mount(0), c.Mount(1)
	rng := rand.New(rand.NewPCG(7, 8))
	// B reads a fresh directory of files A wrote, each once, until most
	// of a round's opens were made from its cache: its lease cache is
	// trusted only while its polls are answered in time, which a busy
	// machine may delay (then the opens ask the leader, and the round is
	// read again with new files).
	const files = 40
	var dir string
	var data [][]byte
	for round, deadline := 0, time.Now().Add(2*time.Minute); ; round++ {
		dir = fmt.Sprintf("round%d", round)
		if err := os.Mkdir(filepath.Join(a, dir), 0o755); err != nil {
			t.Fatal(err)
		}
		data = make([][]byte, files)
		for i := range data {
			data[i] = smallContent(rng)
			writeSmall(t, filepath.Join(a, dir, fmt.Sprint(i)), data[i], 0o644)
		}
		before := mountLeases(t, b)
		for i := range data {
			readSmall(t, filepath.Join(b, dir, fmt.Sprint(i)), data[i])
		}
		opens := mountLeases(t, b).Opens - before.Opens
		if opens >= files/2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("B made %d of %d opens of small files it looked up from its cache", opens, files)
		}
	}

	t.Run("rewritten elsewhere", func(t *testing.T) {
		// The last file: read once the lookups were bringing copies.
		last := fmt.Sprint(files - 1)
		newer := smallContent(rng)
		writeSmall(t, filepath.Join(a, dir, last), newer, 0o644)
		readSmall(t, filepath.Join(b, dir, last), newer)
	})

	t.Run("not readable by every class", func(t *testing.T) {
		private := smallContent(rng)
		writeSmall(t, filepath.Join(a, dir, "private"), private, 0o600)
		before := mountLeases(t, b)
		readSmall(t, filepath.Join(b, dir, "private"), private)
		if opens := mountLeases(t, b).Opens - before.Opens; opens != 0 {
			t.Errorf("B opened a 0600 file from its cache")
		}
	})
}
