package testcluster

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// Network namespaces of a metadata group (Options.MetaNetNS).
//
// Member k (0-based) runs in the namespace "weft-<pid>-<tag>-m<k>" with
// the address 10.213.<R>.<11+k>/24 on its end of a veth pair whose other
// end is a port of the bridge br0 in a hub namespace ("...-hub"); the
// host joins the bridge the same way with 10.213.<R>.1/24. One L2
// segment: members reach each other and the host reaches every member,
// with no routing or forwarding on the host. A member listens on
// 10.213.<R>.<11+k>:7400, which is its address in --peers and the one
// clients on the host dial; storage servers listen on the host's
// 10.213.<R>.1, where members reach them.
//
// PartitionMetaMember sets the member's end of its pair down: packets to
// and from it are dropped, nothing is refused; the member keeps running,
// cut off from the others and from every client outside its namespace.
// HealMetaMember sets it up again. Cleanup deletes the namespaces and
// the host's pair.

const metaNetnsPort = 7400

type metaNets struct {
	tag     string
	subnet  int
	created []string // namespaces, for teardown
	veths   []string // host veth ends, for teardown
}

func (m *metaNets) ns(name string) string {
	return fmt.Sprintf("%s%d-%s-%s", netnsPrefix, os.Getpid(), m.tag, name)
}
func (m *metaNets) hostIP() string          { return fmt.Sprintf("10.213.%d.1", m.subnet) }
func (m *metaNets) hub() string             { return m.ns("hub") }
func (m *metaNets) member(k int) string     { return m.ns(fmt.Sprintf("m%d", k)) }
func (m *metaNets) memberVeth(k int) string { return fmt.Sprintf("wv%sm%d", m.tag, k) }
func (m *metaNets) memberAddr(k int) string {
	return net.JoinHostPort(fmt.Sprintf("10.213.%d.%d", m.subnet, 11+k), strconv.Itoa(metaNetnsPort))
}

// setupMetaNetNS makes the hub, the host's port on it and one namespace
// per member (c.metas must exist: their addresses and namespaces are set
// here). It fails the test, never skips, when namespaces cannot be made.
func (c *Cluster) setupMetaNetNS(members int) *metaNets {
	c.t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		c.t.Fatalf("testcluster: Options.MetaNetNS needs the ip command: install iproute2 (scripts/install-deps.sh)")
	}
	lock, err := os.OpenFile(filepath.Join(os.TempDir(), netnsLock), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		c.t.Fatal(err)
	}
	defer unix.Flock(int(lock.Fd()), unix.LOCK_UN)
	removeStaleNetNS(c.t)
	tag := make([]byte, 3)
	rand.Read(tag)
	m := &metaNets{tag: hex.EncodeToString(tag)}
	if m.subnet, err = freeSubnet(); err != nil {
		c.t.Fatal(err)
	}
	c.metaNets = m
	must := func(args ...string) {
		c.t.Helper()
		if err := ipCmd(args...); err != nil {
			c.t.Fatal(err)
		}
	}
	hub := m.hub()
	if err := ipCmd("netns", "add", hub); err != nil {
		c.t.Fatalf("testcluster: Options.MetaNetNS needs to create network namespaces (root, or CAP_SYS_ADMIN and CAP_NET_ADMIN): %v", err)
	}
	m.created = append(m.created, hub)
	must("-n", hub, "link", "add", "br0", "type", "bridge")
	must("-n", hub, "link", "set", "br0", "up")
	hostEnd, hubEnd := fmt.Sprintf("wv%sH", m.tag), fmt.Sprintf("wv%sB", m.tag)
	must("link", "add", hostEnd, "type", "veth", "peer", "name", hubEnd, "netns", hub)
	m.veths = append(m.veths, hostEnd)
	must("addr", "add", fmt.Sprintf("10.213.%d.1/24", m.subnet), "dev", hostEnd)
	must("link", "set", hostEnd, "up")
	must("-n", hub, "link", "set", hubEnd, "master", "br0")
	must("-n", hub, "link", "set", hubEnd, "up")
	for k := range members {
		ns := m.member(k)
		must("netns", "add", ns)
		m.created = append(m.created, ns)
		port := fmt.Sprintf("wv%sb%d", m.tag, k)
		must("-n", ns, "link", "add", m.memberVeth(k), "type", "veth", "peer", "name", port, "netns", hub)
		ip, _, _ := net.SplitHostPort(m.memberAddr(k))
		must("-n", ns, "addr", "add", ip+"/24", "dev", m.memberVeth(k))
		must("-n", ns, "link", "set", m.memberVeth(k), "up")
		must("-n", ns, "link", "set", "lo", "up")
		must("-n", hub, "link", "set", port, "master", "br0")
		must("-n", hub, "link", "set", port, "up")
	}
	return m
}

func (m *metaNets) teardown(logf func(string, ...any)) {
	for _, v := range m.veths {
		if err := ipCmd("link", "del", v); err != nil {
			logf("%v", err)
		}
	}
	for _, ns := range m.created {
		if err := ipCmd("netns", "del", ns); err != nil {
			logf("%v", err)
		}
	}
	m.veths, m.created = nil, nil
}

// PartitionMetaMember cuts metadata member i (0-based) off the network
// while it keeps running (Options.MetaNetNS).
func (c *Cluster) PartitionMetaMember(i int) {
	c.t.Helper()
	if err := ipCmd("-n", c.metaNets.member(i), "link", "set", c.metaNets.memberVeth(i), "down"); err != nil {
		c.t.Fatal(err)
	}
}

// HealMetaMember reconnects metadata member i.
func (c *Cluster) HealMetaMember(i int) {
	c.t.Helper()
	if err := ipCmd("-n", c.metaNets.member(i), "link", "set", c.metaNets.memberVeth(i), "up"); err != nil {
		c.t.Fatal(err)
	}
}

// MetaMemberNetNS returns the network namespace of metadata member i, ""
// without Options.MetaNetNS.
func (c *Cluster) MetaMemberNetNS(i int) string { return c.metas[i].netns }

// MetaMemberAddr returns the address of metadata member i.
func (c *Cluster) MetaMemberAddr(i int) string { return c.metas[i].addr }
