package testcluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// builder builds the weft binary at most once per test binary. It is the one
// piece of state shared by all clusters of a test binary: building takes
// seconds, and every cluster runs the same code.
type builder struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

var defaultBuilder builder

func (b *builder) build() (string, error) {
	b.once.Do(func() {
		if bin := os.Getenv("WEFT_BIN"); bin != "" {
			b.bin = bin
			return
		}
		dir, err := os.MkdirTemp("", "weft-testcluster-bin-")
		if err != nil {
			b.err = fmt.Errorf("testcluster: %w", err)
			return
		}
		b.dir = dir
		bin := filepath.Join(dir, "weft")
		cmd := exec.Command("go", "build", "-o", bin, "github.com/weft-fs/weft/cmd/weft")
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.err = fmt.Errorf("testcluster: go build ./cmd/weft: %w\n%s", err, out)
			return
		}
		b.bin = bin
	})
	return b.bin, b.err
}

func (b *builder) cleanup() {
	if b.dir != "" {
		os.RemoveAll(b.dir)
	}
}

// Binary returns the path of the weft binary, building it on first use.
func Binary(t testing.TB) string {
	t.Helper()
	bin, err := defaultBuilder.build()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// Main runs the tests of m and then removes the built binary. Call it from
// TestMain: os.Exit(testcluster.Main(m)).
func Main(m *testing.M) int {
	code := m.Run()
	defaultBuilder.cleanup()
	return code
}
