package tests

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/weft-fs/weft/internal/testcluster"
)

// firewallRules returns the nftables rules docs/deployment.md tells admins
// to load, with network in place of the documented storage network.
func firewallRules(t *testing.T, network string) string {
	t.Helper()
	doc, err := os.ReadFile("../docs/deployment.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```nft\n(.*?)```").FindSubmatch(doc)
	if m == nil || !strings.Contains(string(m[1]), "10.0.0.0/24") {
		t.Fatalf("docs/deployment.md has no ```nft block naming the storage network 10.0.0.0/24")
	}
	return strings.ReplaceAll(string(m[1]), "10.0.0.0/24", network)
}

// TestFirewallRulesFromDocs loads the documented nftables rules, as written,
// into the network namespace of a storage server, which then still serves
// the file system (the metadata server and the mount reach it from the
// storage network); with another network named in the rules, the storage
// port no longer answers this host at all.
func TestFirewallRulesFromDocs(t *testing.T) {
	nft := requireTool(t, "nft")
	c := testcluster.Start(t, testcluster.Options{Servers: 1, Targets: 1, NetNS: true})
	c.WaitTargetsUp(1)
	ns := c.StorageNetNS(0)
	host, _, err := net.SplitHostPort(c.StorageAddr(0))
	if err != nil {
		t.Fatal(err)
	}
	_, storageNet, err := net.ParseCIDR(host + "/30") // the namespace's veth link: this host and the server
	if err != nil {
		t.Fatal(err)
	}
	load := func(network string) {
		t.Helper()
		p := filepath.Join(t.TempDir(), "firewall.nft")
		if err := os.WriteFile(p, []byte(firewallRules(t, network)), 0o644); err != nil {
			t.Fatal(err)
		}
		_ = exec.Command("ip", "netns", "exec", ns, nft, "delete", "table", "inet", "weft").Run() // reloading, as the doc says
		if out, err := exec.Command("ip", "netns", "exec", ns, nft, "-f", p).CombinedOutput(); err != nil {
			t.Fatalf("nft -f (the rules of docs/deployment.md): %v: %s", err, out)
		}
	}

	load(storageNet.String())
	// Allowed: the file system works through the firewalled server.
	f := filepath.Join(c.Mount(0), "through-the-firewall")
	if err := os.WriteFile(f, []byte("hello"), 0o644); err != nil {
		t.Fatalf("write with the storage network allowed: %v", err)
	}
	if b, err := os.ReadFile(f); err != nil || string(b) != "hello" {
		t.Fatalf("read back %q %v", b, err)
	}
	conn, err := net.DialTimeout("tcp", c.StorageAddr(0), time.Minute)
	if err != nil {
		t.Fatalf("dial the storage port from the storage network: %v", err)
	}
	conn.Close()

	// Another network named: this host's packets to the port are dropped
	// (a dial times out; it is never refused or accepted).
	load("192.0.2.0/24")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", c.StorageAddr(0)); err == nil {
		conn.Close()
		t.Fatal("the storage port answered a host outside the allowed network")
	} else if !errors.Is(err, context.DeadlineExceeded) && !strings.Contains(err.Error(), "timeout") {
		t.Fatalf("dial from outside the allowed network: %v, want a timeout (dropped)", err)
	}
	load(storageNet.String()) // the cluster's cleanup talks to the server
}
