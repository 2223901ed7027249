package storage

import (
	"log/slog"
	"testing"

	"go.uber.org/goleak"

	"github.com/weft-fs/weft/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newLogger() (*slog.Logger, *testutil.LogBuffer) { return testutil.NewLogger() }
