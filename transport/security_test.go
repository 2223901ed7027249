package transport_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/weft-fs/weft/auth"
	"github.com/weft-fs/weft/internal/testutil"
	"github.com/weft-fs/weft/transport"
)

// cluster makes a key set once per test binary (ed25519 keys are cheap,
// but there is no need to make many).
var (
	clusterOnce sync.Once
	clusterDir  string
	otherDir    string
	clusterErr  error
)

func makeTemp() (string, error) { return os.MkdirTemp("", "weft-transport-keys") }

func keys(t testing.TB, role string) *auth.Keys {
	t.Helper()
	clusterOnce.Do(func() {
		base, err := makeTemp()
		if err != nil {
			clusterErr = err
			return
		}
		clusterDir, otherDir = filepath.Join(base, "c"), filepath.Join(base, "o")
		if clusterErr = auth.GenerateCluster(clusterDir); clusterErr == nil {
			clusterErr = auth.GenerateCluster(otherDir)
		}
	})
	if clusterErr != nil {
		t.Fatal(clusterErr)
	}
	dir := clusterDir
	if r, ok := strings.CutPrefix(role, "other-"); ok {
		dir, role = otherDir, r
	}
	k, err := auth.Load(filepath.Join(dir, role))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func secureTransport(t testing.TB, k *auth.Keys, encrypt bool, opts transport.TCPOptions) (transport.Transport, *testutil.LogBuffer) {
	log, lb := testutil.NewLogger()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("transport log:\n%s", lb.String())
		}
	})
	opts.Logger = log
	opts.Security = k.Security(encrypt)
	return transport.NewTCPWith(opts), lb
}

func peerEcho(ctx context.Context, op uint16, req []byte) ([]byte, error) {
	p, ok := transport.PeerFrom(ctx)
	if !ok {
		return nil, errors.New("no peer in ctx")
	}
	return append([]byte(string(p.Role)+"/"+p.Name+":"), req...), nil
}

func listen(t testing.TB, tr transport.Transport, h transport.Handler) transport.Listener {
	t.Helper()
	l, err := tr.Listen("127.0.0.1:0", h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func TestSecureRoundTrip(t *testing.T) {
	for _, c := range []struct {
		name         string
		srvEnc, cEnc bool
	}{{"clear", false, false}, {"client asks encryption", false, true}, {"server requires encryption", true, false}} {
		t.Run(c.name, func(t *testing.T) {
			srv, _ := secureTransport(t, keys(t, "storage"), c.srvEnc, transport.TCPOptions{})
			cli, _ := secureTransport(t, keys(t, "client"), c.cEnc, transport.TCPOptions{})
			l := listen(t, srv, peerEcho)
			conn, err := cli.Dial(context.Background(), l.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			big := bytes.Repeat([]byte("x"), 3<<20)
			for i := 0; i < 3; i++ {
				resp, err := conn.Call(context.Background(), 7, []byte("hi"), big)
				if err != nil {
					t.Fatal(err)
				}
				if want := "client/client:hi"; string(resp[:len(want)]) != want || len(resp) != len(want)+len(big) {
					t.Fatalf("response %q... (%d bytes)", resp[:min(len(resp), 20)], len(resp))
				}
			}
		})
	}
}

// A dial that fails authentication matches EACCES and ErrAuth, not EIO.
func wantAuthError(t *testing.T, err error) {
	t.Helper()
	if err == nil || !errors.Is(err, syscall.EACCES) || !errors.Is(err, transport.ErrAuth) || errors.Is(err, syscall.EIO) {
		t.Fatalf("got %v, want an authentication error (EACCES)", err)
	}
	if !strings.Contains(err.Error(), "authentication failed") {
		t.Fatalf("error %q does not say authentication failed", err)
	}
}

func TestClientKeyCannotServe(t *testing.T) {
	// A stolen client bundle posing as a server: the client refuses it.
	srv, _ := secureTransport(t, keys(t, "client"), false, transport.TCPOptions{})
	cli, _ := secureTransport(t, keys(t, "meta"), false, transport.TCPOptions{})
	l := listen(t, srv, peerEcho)
	_, err := cli.Dial(context.Background(), l.Addr())
	wantAuthError(t, err)
	if !strings.Contains(err.Error(), `role "client"`) {
		t.Errorf("error %q does not name the server's role", err)
	}
}

func TestWrongCA(t *testing.T) {
	srv, lb := secureTransport(t, keys(t, "storage"), false, transport.TCPOptions{})
	l := listen(t, srv, peerEcho)

	// A client of another cluster: the server refuses its certificate.
	cli, _ := secureTransport(t, keys(t, "other-client"), false, transport.TCPOptions{})
	_, err := cli.Dial(context.Background(), l.Addr())
	wantAuthError(t, err)
	waitFor(t, func() bool { return strings.Contains(lb.String(), "refusing connection") })

	// A server of another cluster: the client refuses it.
	osrv, _ := secureTransport(t, keys(t, "other-storage"), false, transport.TCPOptions{})
	ol := listen(t, osrv, peerEcho)
	cli2, _ := secureTransport(t, keys(t, "client"), false, transport.TCPOptions{})
	_, err = cli2.Dial(context.Background(), ol.Addr())
	wantAuthError(t, err)
}

func TestNoKeyAgainstSecureServer(t *testing.T) {
	srv, lb := secureTransport(t, keys(t, "meta"), false, transport.TCPOptions{})
	l := listen(t, srv, peerEcho)
	plain := transport.NewTCPWith(transport.TCPOptions{Logger: slog.New(slog.DiscardHandler)})
	c, err := plain.Dial(context.Background(), l.Addr())
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err = c.Call(ctx, 7, []byte("hi"))
		cancel()
		c.Close()
	}
	if err == nil {
		t.Fatal("a client without keys got an answer")
	}
	waitFor(t, func() bool { return strings.Contains(lb.String(), "refusing connection") })

	// A secure client against a plain server fails too.
	psrv := transport.NewTCPWith(transport.TCPOptions{Logger: slog.New(slog.DiscardHandler)})
	pl := listen(t, psrv, peerEcho)
	cli, _ := secureTransport(t, keys(t, "client"), false, transport.TCPOptions{HandshakeTimeout: time.Second})
	if _, err := cli.Dial(context.Background(), pl.Addr()); err == nil {
		t.Fatal("a secure client accepted a server without keys")
	}
}

func TestPoolAuthFailureNotSuspect(t *testing.T) {
	srv, _ := secureTransport(t, keys(t, "client"), false, transport.TCPOptions{})
	l := listen(t, srv, peerEcho)
	cli, _ := secureTransport(t, keys(t, "client"), false, transport.TCPOptions{})
	p := transport.NewPool(cli, transport.PoolOptions{})
	defer p.Close()
	for i := 0; i < 3; i++ {
		_, err := p.Call(context.Background(), l.Addr(), 7, []byte("x"))
		wantAuthError(t, err)
		if errors.Is(err, syscall.ETIMEDOUT) {
			t.Fatalf("auth failure reported as a timeout: %v", err)
		}
	}
}

func TestAcceptRoles(t *testing.T) {
	sec := keys(t, "storage").Security(false)
	sec.AcceptRoles = []transport.Role{transport.RoleMeta}
	srv := transport.NewTCPWith(transport.TCPOptions{Logger: slog.New(slog.DiscardHandler), Security: sec})
	l := listen(t, srv, peerEcho)
	cli, _ := secureTransport(t, keys(t, "client"), false, transport.TCPOptions{})
	_, err := cli.Dial(context.Background(), l.Addr())
	wantAuthError(t, err)
	m, _ := secureTransport(t, keys(t, "meta"), false, transport.TCPOptions{})
	c, err := m.Dial(context.Background(), l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

func TestHandshakeTimeoutAndFlood(t *testing.T) {
	srv, lb := secureTransport(t, keys(t, "storage"), false, transport.TCPOptions{
		HandshakeTimeout: 200 * time.Millisecond, MaxHandshakesPerIP: 4})
	l := listen(t, srv, peerEcho)
	// Connections that never start TLS: at most 4 wait in the
	// handshake, the rest are closed at once; all are closed in time.
	var conns []net.Conn
	for i := 0; i < 12; i++ {
		nc, err := net.Dial("tcp", l.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		conns = append(conns, nc)
	}
	for _, nc := range conns {
		_ = nc.SetReadDeadline(time.Now().Add(20 * time.Second))
		if _, err := io.ReadAll(nc); err != nil {
			t.Fatalf("connection not closed by the server: %v", err)
		}
	}
	waitFor(t, func() bool { return strings.Contains(lb.String(), "MaxHandshakesPerIP") })

	// One silent connection to a fresh server: closed after the
	// handshake timeout, and logged as such.
	srv2, lb2 := secureTransport(t, keys(t, "storage"), false, transport.TCPOptions{HandshakeTimeout: 200 * time.Millisecond})
	l2 := listen(t, srv2, peerEcho)
	nc, err := net.Dial("tcp", l2.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.ReadAll(nc); err != nil {
		t.Fatalf("silent connection not closed by the server: %v", err)
	}
	waitFor(t, func() bool { return strings.Contains(lb2.String(), "HandshakeTimeout") })
	// The server still serves an honest client.
	cli, _ := secureTransport(t, keys(t, "client"), false, transport.TCPOptions{})
	c, err := cli.Dial(context.Background(), l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sniff is a TCP proxy to target that records what the client sends.
type sniff struct {
	ln  net.Listener
	mu  sync.Mutex
	buf bytes.Buffer
}

func newSniff(t *testing.T, target string) *sniff {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &sniff{ln: ln}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			wg.Add(2)
			go func() {
				defer wg.Done()
				defer u.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						s.mu.Lock()
						s.buf.Write(buf[:n])
						s.mu.Unlock()
						if _, werr := u.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
			go func() {
				defer wg.Done()
				defer c.Close()
				_, _ = io.Copy(c, u)
			}()
		}
	}()
	return s
}

func (s *sniff) saw(b []byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Contains(s.buf.Bytes(), b)
}

// Without encryption frames cross the wire in the clear after the
// handshake; with it (asked by the client or required by the server) they
// do not.
func TestEncryptionOnTheWire(t *testing.T) {
	secret := []byte("weft-secret-payload-0123456789")
	for _, c := range []struct {
		name         string
		srvEnc, cEnc bool
		clear        bool
	}{{"off", false, false, true}, {"client asks", false, true, false}, {"server requires", true, false, false}} {
		t.Run(c.name, func(t *testing.T) {
			srv, _ := secureTransport(t, keys(t, "storage"), c.srvEnc, transport.TCPOptions{})
			l := listen(t, srv, peerEcho)
			sn := newSniff(t, l.Addr())
			cli, _ := secureTransport(t, keys(t, "client"), c.cEnc, transport.TCPOptions{})
			conn, err := cli.Dial(context.Background(), sn.ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := conn.Call(context.Background(), 7, secret); err != nil {
				t.Fatal(err)
			}
			if got := sn.saw(secret); got != c.clear {
				t.Fatalf("payload visible on the wire: %v, want %v", got, c.clear)
			}
		})
	}
}

// Peers of different hello versions refuse each other, naming both
// versions; the client's error matches EPROTO.
func TestHelloVersionMismatch(t *testing.T) {
	sec := keys(t, "storage").Security(false)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", sec.ServerTLS)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		var b [8]byte
		if _, err := io.ReadFull(c, b[:]); err != nil {
			return
		}
		copy(b[:], "WFTH")
		b[4], b[5], b[6], b[7] = 9, 0, 0, 1 // version 9, status: bad version
		_, _ = c.Write(b[:])
	}()
	cli, _ := secureTransport(t, keys(t, "client"), false, transport.TCPOptions{})
	_, err = cli.Dial(context.Background(), ln.Addr().String())
	if err == nil || !errors.Is(err, syscall.EPROTO) || !strings.Contains(err.Error(), "server speaks protocol version 9, this client version 2") {
		t.Fatalf("dial of a version-9 server: %v", err)
	}

	// A version-9 client against a real server: refused with the server's version.
	srv, lb := secureTransport(t, keys(t, "storage"), false, transport.TCPOptions{})
	l := listen(t, srv, peerEcho)
	ccfg := keys(t, "client").Security(false).ClientTLS
	tc, err := tls.Dial("tcp", l.Addr(), ccfg)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	hello := []byte("WFTH\x09\x00\x00\x00")
	if _, err := tc.Write(hello); err != nil {
		t.Fatal(err)
	}
	var b [8]byte
	if _, err := io.ReadFull(tc, b[:]); err != nil {
		t.Fatal(err)
	}
	if string(b[:4]) != "WFTH" || b[4] != byte(transport.ProtocolVersion) || b[7] != 1 {
		t.Fatalf("server's answer to a version-9 hello: %q", b)
	}
	waitFor(t, func() bool {
		return strings.Contains(lb.String(), "client speaks protocol version 9, this server version 2")
	})
}

// A connection closed before the handshake (a readiness probe) is not
// logged as a refusal; one that sends garbage is.
func TestProbeNotLoggedAsRefusal(t *testing.T) {
	srv, lb := secureTransport(t, keys(t, "meta"), false, transport.TCPOptions{})
	l := listen(t, srv, peerEcho)
	nc, err := net.Dial("tcp", l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	waitFor(t, func() bool { return strings.Contains(lb.String(), "connection closed before the handshake") })
	bad, err := net.Dial("tcp", l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	if _, err := bad.Write([]byte("GET / HTTP/1.0\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return strings.Contains(lb.String(), "refusing connection") })
	if n := strings.Count(lb.String(), "refusing connection"); n != 1 {
		t.Fatalf("%d refusals logged, want 1 (the garbage, not the probe):\n%s", n, lb.String())
	}
}
