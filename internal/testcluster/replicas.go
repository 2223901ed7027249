package testcluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/weft-fs/weft/auth"
	"github.com/weft-fs/weft/meta/metarpc"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/transport"
)

// setupReplicas makes the members of a replicated metadata group
// (Options.MetaReplicas): member i+1 is c.metas[i], named meta-<i+1>, on a
// free port, with its own data directory.
func (c *Cluster) setupReplicas() {
	n := c.opts.MetaReplicas
	peers := make([]string, n)
	var nets *metaNets
	if c.opts.MetaNetNS {
		nets = c.setupMetaNetNS(n)
	}
	for i := range n {
		p := &proc{name: fmt.Sprintf("meta-%d", i+1), log: c.logPath(fmt.Sprintf("meta-%d", i+1))}
		if nets != nil {
			p.addr, p.netns = nets.memberAddr(i), nets.member(i)
		} else {
			p.addr = freeAddr(c.t)
		}
		peers[i] = fmt.Sprintf("%d=%s", i+1, p.addr)
		c.metas = append(c.metas, p)
	}
	for i, p := range c.metas {
		dir := filepath.Join(c.dir, "meta", fmt.Sprint(i+1))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			c.t.Fatal(err)
		}
		p.args = func() []string {
			// The member's address is its entry in --peers; a port taken
			// meanwhile fails the start (freeAddr races are rare).
			a := []string{"meta", "--id", fmt.Sprint(i + 1), "--peers", strings.Join(peers, ","), "--data", dir,
				"--keys", c.Keys("meta"), "--log-level", "info"}
			return append(a, c.opts.MetaArgs...)
		}
	}
	c.meta = c.metas[0]
}

// MetaReplicas returns how many metadata servers the cluster runs.
func (c *Cluster) MetaReplicas() int { return len(c.metas) }

// StopMetaMember SIGKILLs metadata server i (0-based; member i+1).
func (c *Cluster) StopMetaMember(i int) { c.kill(c.metas[i]) }

// StartMetaMember starts metadata server i again on its address and data.
func (c *Cluster) StartMetaMember(i int) {
	c.t.Helper()
	c.startListener(c.metas[i], false)
}

// StopMetaMemberClean stops metadata server i with SIGTERM, as an admin
// would (it closes its store cleanly), and waits for it to exit; if it
// has not after Options.Ready, it is SIGKILLed and the test fails.
func (c *Cluster) StopMetaMemberClean(i int) {
	c.t.Helper()
	p := c.metas[i]
	if !p.running() {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(c.opts.Ready):
		c.kill(p)
		c.t.Fatalf("testcluster: %s did not stop within %v of SIGTERM", p.name, c.opts.Ready)
	}
}

// MetaMemberDir returns the data directory of metadata server i.
func (c *Cluster) MetaMemberDir(i int) string {
	return filepath.Join(c.dir, "meta", fmt.Sprint(i+1))
}

// MetaMemberStatus asks running metadata server i for its own raft state
// (as `weft status` does, with the client's key).
func (c *Cluster) MetaMemberStatus(ctx context.Context, i int) (proto.ReplicaStatus, error) {
	k, err := auth.Load(c.Keys("client"))
	if err != nil {
		return proto.ReplicaStatus{}, err
	}
	pool := transport.NewPool(transport.NewTCPWith(transport.TCPOptions{Security: k.Security(false)}), transport.PoolOptions{})
	defer pool.Close()
	return metarpc.NewClient(pool, c.metas[i].addr).MemberStatus(ctx)
}

// MetaMemberPID returns the process id of metadata server i, 0 if it is
// not running.
func (c *Cluster) MetaMemberPID(i int) int {
	if !c.metas[i].running() {
		return 0
	}
	return c.metas[i].cmd.Process.Pid
}

// MetaMembers asks running metadata server i what it knows of its group.
func (c *Cluster) MetaMembers(ctx context.Context, i int) (metarpc.Membership, error) {
	k, err := auth.Load(c.Keys("client"))
	if err != nil {
		return metarpc.Membership{}, err
	}
	pool := transport.NewPool(transport.NewTCPWith(transport.TCPOptions{Security: k.Security(false)}), transport.PoolOptions{})
	defer pool.Close()
	return metarpc.NewClient(pool, c.metas[i].addr).Group(ctx)
}

// WaitMetaLeader waits (up to Options.Ready) until a running member of
// the metadata group is leader, as a majority of running members agree,
// and returns its index (0-based).
func (c *Cluster) WaitMetaLeader() int {
	c.t.Helper()
	leader := -1
	var last string
	err := waitFor(c.opts.Ready, nil, func() bool {
		votes := map[uint64]int{}
		for i, m := range c.metas {
			if !m.running() {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			ms, err := c.MetaMembers(ctx, i)
			cancel()
			if err != nil {
				last = err.Error()
				continue
			}
			if ms.Leader != 0 {
				votes[ms.Leader]++
			}
		}
		for id, v := range votes {
			if v > len(c.metas)/2 && id >= 1 && int(id) <= len(c.metas) && c.metas[id-1].running() {
				leader = int(id) - 1
				return true
			}
		}
		last = fmt.Sprintf("leaders reported: %v", votes)
		return false
	})
	if err != nil {
		c.t.Fatalf("testcluster: no metadata leader: %v (last: %s)", err, last)
	}
	return leader
}
