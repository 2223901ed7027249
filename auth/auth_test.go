package auth

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weft-fs/weft/transport"
)

func TestGenerateClusterLoad(t *testing.T) {
	dir := t.TempDir()
	if err := GenerateCluster(dir); err != nil {
		t.Fatal(err)
	}
	for _, r := range []transport.Role{transport.RoleMeta, transport.RoleStorage, transport.RoleClient} {
		k, err := Load(filepath.Join(dir, string(r)))
		if err != nil {
			t.Fatalf("%s: %v", r, err)
		}
		if k.Role() != r || k.Name() != string(r) {
			t.Errorf("%s: role %q name %q", r, k.Role(), k.Name())
		}
		if got := len(k.CapabilityKey()); (r == transport.RoleClient) != (got == 0) || (got != 0 && got != CapabilityKeySize) {
			t.Errorf("%s: capability key of %d bytes", r, got)
		}
	}
	m, _ := Load(filepath.Join(dir, "meta"))
	s, _ := Load(filepath.Join(dir, "storage"))
	if string(m.CapabilityKey()) != string(s.CapabilityKey()) {
		t.Error("meta and storage bundles have different capability keys")
	}
	if _, err := os.Stat(filepath.Join(dir, "meta", CAKeyFile)); err == nil {
		t.Error("ca.key copied into a bundle")
	}
	if err := GenerateCluster(dir); err == nil || !strings.Contains(err.Error(), "refusing to overwrite") {
		t.Errorf("second GenerateCluster: %v", err)
	}
}

func TestLoadRefuses(t *testing.T) {
	dir := t.TempDir()
	if err := GenerateCluster(dir); err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	if err := GenerateCluster(other); err != nil {
		t.Fatal(err)
	}
	copyFile := func(src, dst string) {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name  string
		setup func(b string)
		want  string
	}{
		{"loose node.key", func(b string) { os.Chmod(filepath.Join(b, NodeKeyFile), 0o640) }, "chmod 600 " + "BUNDLE/node.key"},
		{"loose capability.key", func(b string) { os.Chmod(filepath.Join(b, CapabilityKeyFile), 0o604) }, "chmod 600 BUNDLE/capability.key"},
		{"no node.crt", func(b string) { os.Remove(filepath.Join(b, NodeCertFile)) }, "BUNDLE/node.crt is missing: make a cluster key set with `weft keygen"},
		{"no capability.key", func(b string) { os.Remove(filepath.Join(b, CapabilityKeyFile)) }, "capability.key is missing"},
		{"other CA", func(b string) {
			os.Remove(filepath.Join(b, CACertFile))
			copyFile(filepath.Join(other, "ca", CACertFile), filepath.Join(b, CACertFile))
		}, "not a valid certificate of this bundle's cluster CA"},
		{"key of another node", func(b string) {
			os.Remove(filepath.Join(b, NodeKeyFile))
			copyFile(filepath.Join(other, "storage", NodeKeyFile), filepath.Join(b, NodeKeyFile))
		}, "does not match"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := filepath.Join(t.TempDir(), "bundle")
			if err := Issue(filepath.Join(dir, "ca"), transport.RoleStorage, "s1", b); err != nil {
				t.Fatal(err)
			}
			c.setup(b)
			_, err := Load(b)
			want := strings.ReplaceAll(c.want, "BUNDLE", b)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("Load: %v, want %q", err, want)
			}
		})
	}
}

func TestExpiredCertificate(t *testing.T) {
	dir := t.TempDir()
	if err := NewCA(filepath.Join(dir, "ca")); err != nil {
		t.Fatal(err)
	}
	b := filepath.Join(dir, "old")
	if err := issue(filepath.Join(dir, "ca"), transport.RoleClient, "old", b, time.Now().Add(-48*time.Hour), 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(b); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("Load of an expired bundle: %v", err)
	}
}

func TestIssueBadRole(t *testing.T) {
	dir := t.TempDir()
	if err := NewCA(dir); err != nil {
		t.Fatal(err)
	}
	if err := Issue(dir, "admin", "x", t.TempDir()); err == nil {
		t.Fatal("Issue with role admin succeeded")
	}
}

// A peer whose certificate has expired is refused at the handshake, both
// as a client and as a server.
func TestExpiredPeerRefused(t *testing.T) {
	dir := t.TempDir()
	if err := GenerateCluster(dir); err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(dir, "ca")
	// Valid from 3h to 30min ago; the CA from 1h ago.
	issuedAt := time.Now().Add(-2 * time.Hour)
	for _, r := range []transport.Role{transport.RoleClient, transport.RoleStorage} {
		if err := issue(ca, r, "old-"+string(r), filepath.Join(dir, "old-"+string(r)), issuedAt, 90*time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	oldKeys := func(r string) *Keys {
		k, err := load(filepath.Join(dir, "old-"+r), time.Now().Add(-45*time.Minute)) // valid back then
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	good := func(r string) *Keys {
		k, err := Load(filepath.Join(dir, r))
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	quiet := slog.New(slog.DiscardHandler)
	echo := func(ctx context.Context, op uint16, req []byte) ([]byte, error) { return req, nil }
	for _, c := range []struct {
		name        string
		server, cli *Keys
	}{
		{"expired client", good("storage"), oldKeys("client")},
		{"expired server", oldKeys("storage"), good("client")},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := transport.NewTCPWith(transport.TCPOptions{Logger: quiet, Security: c.server.Security(false)})
			l, err := srv.Listen("127.0.0.1:0", echo)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			cli := transport.NewTCPWith(transport.TCPOptions{Logger: quiet, Security: c.cli.Security(false)})
			conn, err := cli.Dial(context.Background(), l.Addr())
			if err == nil {
				conn.Close()
				t.Fatal("handshake with an expired certificate succeeded")
			}
			if !errors.Is(err, syscall.EACCES) {
				t.Fatalf("dial: %v, want EACCES", err)
			}
		})
	}
}
