package testcluster

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func netnsExists(t *testing.T, name string) bool {
	t.Helper()
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatalf("ip netns list: %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == name {
			return true
		}
	}
	return false
}

func linkExists(name string) bool {
	_, err := net.InterfaceByName(name)
	return err == nil
}

// TestNetNS starts a cluster whose storage server runs in a namespace,
// checks that the mount works through the veth, that PartitionStorage
// makes the server unreachable without refusing anything and HealStorage
// undoes it, and that cleanup removes the namespace and the veth pair.
func TestNetNS(t *testing.T) {
	var ns, veth string
	t.Run("cluster", func(t *testing.T) {
		c := Start(t, Options{Servers: 1, Targets: 2, NetNS: true, StorageArgs: []string{"--heartbeat-interval", "1s"}})
		ns, veth = c.StorageNetNS(0), c.nets.hostVeth(0)
		if !netnsExists(t, ns) || !linkExists(veth) {
			t.Fatalf("namespace %q or veth %q missing", ns, veth)
		}
		addr := c.StorageAddr(0)
		if !strings.HasPrefix(addr, "10.213.") {
			t.Errorf("storage address %s is not in the namespace's subnet", addr)
		}
		// The server really runs in the namespace.
		pid := c.PIDs()["storage-0"]
		self, _ := os.Readlink("/proc/self/ns/net")
		its, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/net")
		if err != nil || its == self {
			t.Errorf("storage-0 (pid %d) net namespace %q, the test's %q (%v)", pid, its, self, err)
		}
		p := filepath.Join(c.Mount(0), "f")
		want := bytes.Repeat([]byte("netns"), 300_000)
		if err := os.WriteFile(p, want, 0o644); err != nil {
			t.Fatal(err)
		}

		c.PartitionStorage(0)
		start := time.Now()
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			t.Errorf("dialed %s while partitioned", addr)
		} else if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
			t.Errorf("dial while partitioned: %v after %v, want a timeout (dropped, not refused)", err, time.Since(start))
		}
		if len(c.PIDs()) != 3 {
			t.Errorf("processes while partitioned: %v, want all 3 alive", c.PIDs())
		}
		c.HealStorage(0)
		conn, err = net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			t.Fatalf("dial after HealStorage: %v", err)
		}
		conn.Close()
		c.StopStorage(0)
		c.StartStorage(0) // restarts in the same namespace
		c.WaitTargetsUp(2)
		mnt1 := c.Mount(c.AddMount())
		if got, err := os.ReadFile(filepath.Join(mnt1, "f")); err != nil || !bytes.Equal(got, want) {
			t.Errorf("read through a new mount after heal and restart: %d bytes, %v", len(got), err)
		}
	})
	if ns == "" {
		t.Fatal("the cluster did not start")
	}
	// Namespace deletion finishes asynchronously in the kernel.
	deadline := time.Now().Add(5 * time.Second)
	for (netnsExists(t, ns) || linkExists(veth)) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if netnsExists(t, ns) || linkExists(veth) {
		t.Errorf("after cleanup: namespace %s exists %v, veth %s exists %v", ns, netnsExists(t, ns), veth, linkExists(veth))
	}
}

// TestRemoveStaleNetNS: namespaces of a test binary that is gone are
// deleted, with their veth pair; those of a running one are kept.
func TestRemoveStaleNetNS(t *testing.T) {
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := netnsPrefix + strconv.Itoa(dead.Process.Pid) + "-0000aa-s0"
	live := netnsPrefix + strconv.Itoa(os.Getpid()) + "-0000bb-s0"
	t.Cleanup(func() {
		exec.Command("ip", "netns", "del", stale).Run()
		exec.Command("ip", "netns", "del", live).Run()
	})
	for _, args := range [][]string{
		{"netns", "add", stale},
		{"netns", "add", live},
		{"link", "add", "wv0000aah0", "type", "veth", "peer", "name", "wv0000aan0", "netns", stale},
	} {
		if err := ipCmd(args...); err != nil {
			t.Fatal(err)
		}
	}
	removeStaleNetNS(t)
	if netnsExists(t, stale) {
		t.Errorf("stale namespace %s kept", stale)
	}
	if !netnsExists(t, live) {
		t.Errorf("namespace %s of this running test removed", live)
	}
	deadline := time.Now().Add(5 * time.Second)
	for linkExists("wv0000aah0") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if linkExists("wv0000aah0") {
		t.Errorf("veth of the stale namespace kept")
	}
}
