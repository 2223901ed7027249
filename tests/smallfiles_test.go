package tests

import (
	"bytes"
	"math/rand/v2"
	"os"
	"testing"
)

// smallContent returns a small file's worth of random bytes from rng: the
// size of mdtest-hard's files, which fit the metadata service's copies.
func smallContent(rng *rand.Rand) []byte {
	p := make([]byte, 3901)
	for i := range p {
		p[i] = byte(rng.Uint32())
	}
	return p
}

// writeSmall writes p to path with mode, whatever the umask.
func writeSmall(t *testing.T, path string, p []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, p, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// readSmall reads path and fails the test unless it holds want.
func readSmall(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: read %d bytes unlike the %d written", path, len(got), len(want))
	}
}
