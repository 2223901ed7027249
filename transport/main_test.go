package transport

import (
	"context"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/weft-fs/weft/internal/testutil"
)

func TestMain(m *testing.M) {
	if os.Getenv(benchServerEnv) != "" {
		os.Exit(benchServerMain())
	}
	goleak.VerifyTestMain(m)
}

// newTestTransport returns a TCP transport whose log is kept and printed if
// the test fails.
func newTestTransport(t testing.TB) (Transport, *testutil.LogBuffer) {
	log, lb := testutil.NewLogger()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("transport log:\n%s", lb.String())
		}
	})
	return NewTCPWith(TCPOptions{Logger: log}), lb
}

// serve starts a listener on a free loopback port, closed at cleanup.
func serve(t testing.TB, tr Transport, h Handler) Listener {
	t.Helper()
	l, err := tr.Listen("127.0.0.1:0", h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// dial connects to addr, closed at cleanup.
func dial(t testing.TB, tr Transport, addr string) Conn {
	t.Helper()
	c, err := tr.Dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func echo(ctx context.Context, op uint16, req []byte) ([]byte, error) { return req, nil }
