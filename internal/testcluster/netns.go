package testcluster

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Network namespaces (Options.NetNS).
//
// Storage server i runs in the namespace "weft-<pid>-<tag>-s<i>" (pid: the
// test binary's, tag: random per cluster), linked to the host by a veth
// pair: "wv<tag>h<i>" on the host with 10.213.<R>.<4i+1>/30 and
// "wv<tag>n<i>" in the namespace with 10.213.<R>.<4i+2>/30, where R is a
// /24 no interface of the host uses. The server listens and advertises
// 10.213.<R>.<4i+2>:7410 (the namespace is its own, so the port is free)
// and reaches the metadata server, which listens on 0.0.0.0, at the host
// side's address.
//
// PartitionStorage sets the namespace's end of the pair down: the host
// keeps its route to the server (flagged linkdown), and the veth drops
// every packet sent into it. Nothing is refused or reset; the server is
// alive and unreachable, and only timeouts tell. HealStorage sets it up
// again.
//
// Cleanup (after the processes are killed) deletes the host ends, which
// destroys the pairs, and the namespaces. A namespace whose pid is no
// longer a running process is left from a run that crashed; Start deletes
// those before it creates its own.

const (
	netnsPrefix = "weft-"
	netnsPort   = 7410
	netnsLock   = "weft-testcluster-netns.lock"
)

type netns struct {
	tag     string
	subnet  int // R of 10.213.R.0/24
	servers int
	created []string // namespaces created, for teardown
	veths   []string // host veth ends created, for teardown
}

func (n *netns) name(i int) string {
	return fmt.Sprintf("%s%d-%s-s%d", netnsPrefix, os.Getpid(), n.tag, i)
}
func (n *netns) hostVeth(i int) string { return fmt.Sprintf("wv%sh%d", n.tag, i) }
func (n *netns) nsVeth(i int) string   { return fmt.Sprintf("wv%sn%d", n.tag, i) }
func (n *netns) hostIP(i int) string   { return fmt.Sprintf("10.213.%d.%d", n.subnet, 4*i+1) }
func (n *netns) nsIP(i int) string     { return fmt.Sprintf("10.213.%d.%d", n.subnet, 4*i+2) }
func (n *netns) storageAddr(i int) string {
	return net.JoinHostPort(n.nsIP(i), strconv.Itoa(netnsPort))
}

// ipCmd runs `ip args...` and returns an error with its output.
func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("testcluster: ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// setupNetNS creates a namespace and veth pair per storage server. It
// fails the test (never skips) when namespaces cannot be made.
func (c *Cluster) setupNetNS() {
	c.t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		c.t.Fatalf("testcluster: Options.NetNS needs the ip command: install iproute2 (scripts/install-deps.sh)")
	}
	if c.opts.Servers > 63 {
		c.t.Fatalf("testcluster: Options.NetNS supports at most 63 storage servers, not %d", c.opts.Servers)
	}
	// Choosing a free subnet and taking it must not interleave with
	// another test binary doing the same.
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
	n := &netns{tag: hex.EncodeToString(tag), servers: c.opts.Servers}
	n.subnet, err = freeSubnet()
	if err != nil {
		c.t.Fatal(err)
	}
	c.nets = n
	for i := 0; i < n.servers; i++ {
		ns := n.name(i)
		if err := ipCmd("netns", "add", ns); err != nil {
			c.t.Fatalf("testcluster: Options.NetNS needs to create network namespaces (root, or CAP_SYS_ADMIN and CAP_NET_ADMIN): %v", err)
		}
		n.created = append(n.created, ns)
		// The peer is created inside the namespace at once, so a crash
		// never leaves a pair behind on the host without its namespace.
		if err := ipCmd("link", "add", n.hostVeth(i), "type", "veth", "peer", "name", n.nsVeth(i), "netns", ns); err != nil {
			c.t.Fatalf("testcluster: creating a veth pair for %s: %v", ns, err)
		}
		n.veths = append(n.veths, n.hostVeth(i))
		for _, args := range [][]string{
			{"addr", "add", n.hostIP(i) + "/30", "dev", n.hostVeth(i)},
			{"link", "set", n.hostVeth(i), "up"},
			{"-n", ns, "addr", "add", n.nsIP(i) + "/30", "dev", n.nsVeth(i)},
			{"-n", ns, "link", "set", n.nsVeth(i), "up"},
			{"-n", ns, "link", "set", "lo", "up"},
		} {
			if err := ipCmd(args...); err != nil {
				c.t.Fatal(err)
			}
		}
	}
}

// teardownNetNS deletes what setupNetNS created; it runs after the
// processes are killed and tolerates a partial setup.
func (c *Cluster) teardownNetNS() {
	if c.metaNets != nil {
		c.metaNets.teardown(c.t.Logf)
	}
	n := c.nets
	if n == nil {
		return
	}
	for _, v := range n.veths {
		if err := ipCmd("link", "del", v); err != nil {
			c.t.Logf("%v", err)
		}
	}
	for _, ns := range n.created {
		if err := ipCmd("netns", "del", ns); err != nil {
			c.t.Logf("%v", err)
		}
	}
	n.veths, n.created = nil, nil
}

// removeStaleNetNS deletes the namespaces of test binaries that are gone.
func removeStaleNetNS(t interface{ Logf(string, ...any) }) {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], netnsPrefix) {
			continue
		}
		rest := strings.TrimPrefix(f[0], netnsPrefix)
		pidStr, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if !ok || err != nil || pid <= 0 {
			continue
		}
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			continue // its test binary still runs
		}
		// Its processes died with the test binary (Pdeathsig); deleting
		// the namespace also destroys its veth pair.
		if err := ipCmd("netns", "del", f[0]); err != nil {
			t.Logf("testcluster: removing stale namespace: %v", err)
		} else {
			t.Logf("testcluster: removed stale namespace %s", f[0])
		}
	}
}

// freeSubnet picks R so that no address of the host is in 10.213.R.0/24.
func freeSubnet() (int, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return 0, fmt.Errorf("testcluster: %w", err)
	}
	used := map[int]bool{}
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		if ip4 := ipn.IP.To4(); ip4 != nil && ip4[0] == 10 && ip4[1] == 213 {
			used[int(ip4[2])] = true
		}
	}
	start := mrand.IntN(256)
	for k := 0; k < 256; k++ {
		if r := (start + k) % 256; !used[r] {
			return r, nil
		}
	}
	return 0, errors.New("testcluster: every subnet of 10.213.0.0/16 is in use")
}

// metaListen is the metadata server's --listen: its loopback address, or
// the same port on every address when storage servers run in namespaces.
func (c *Cluster) metaListen() string {
	if c.opts.NetNS {
		_, port, _ := net.SplitHostPort(c.meta.addr)
		return net.JoinHostPort("0.0.0.0", port)
	}
	return c.meta.addr
}

// storageMetaAddr is the metadata server's address as storage server i
// dials it.
func (c *Cluster) storageMetaAddr(i int) string {
	if c.nets != nil {
		_, port, _ := net.SplitHostPort(c.meta.addr)
		return net.JoinHostPort(c.nets.hostIP(i), port)
	}
	return c.MetaAddr()
}

// StorageNetNS returns the network namespace of storage server i, or ""
// without Options.NetNS.
func (c *Cluster) StorageNetNS(i int) string { return c.storage[i].netns }

// PartitionStorage cuts storage server i off the network while it keeps
// running: packets to and from it are dropped, nothing is refused. It
// needs Options.NetNS.
func (c *Cluster) PartitionStorage(i int) {
	c.t.Helper()
	c.setLink(i, "down")
}

// HealStorage ends PartitionStorage and returns once the host reaches the
// server's address again.
func (c *Cluster) HealStorage(i int) {
	c.t.Helper()
	c.setLink(i, "up")
	p := c.storage[i]
	if !p.running() {
		return
	}
	err := waitFor(10*time.Second, p, func() bool {
		conn, err := net.DialTimeout("tcp", p.addr, time.Second)
		if err != nil {
			return false
		}
		conn.Close()
		return true
	})
	if err != nil {
		c.t.Fatalf("testcluster: %s unreachable on %s after HealStorage: %v", p.name, p.addr, err)
	}
}

func (c *Cluster) setLink(i int, state string) {
	c.t.Helper()
	if c.nets == nil {
		c.t.Fatal("testcluster: PartitionStorage and HealStorage need Options.NetNS")
	}
	if err := ipCmd("-n", c.nets.name(i), "link", "set", c.nets.nsVeth(i), state); err != nil {
		c.t.Fatal(err)
	}
}
