package tests

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/weft-fs/weft/internal/testcluster"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(helperMain(os.Args[1:]))
	}
	code := testcluster.Main(m)
	removeHelperBinary()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
