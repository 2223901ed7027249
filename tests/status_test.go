package tests

import (
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/weft-fs/weft/internal/testcluster"
)

// weftStatus runs `weft status --json` against c with keys of role and
// returns its report and exit status.
func weftStatus(t *testing.T, c *testcluster.Cluster, role string) (report map[string]any, exit int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, c.Bin(), "status", "--json", "--meta", c.MetaAddr(), "--keys", c.Keys(role)).Output()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		exit = ee.ExitCode()
	case err != nil:
		t.Fatalf("weft status: %v", err)
	}
	if err := json.Unmarshal(out, &report); err != nil {
		t.Fatalf("weft status --json printed %q: %v (%s)", out, err, stderrOf(err))
	}
	return report, exit
}

func stderrOf(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(ee.Stderr)
	}
	return ""
}

// TestStatus: `weft status` reports the metadata service, both storage
// servers and their targets up, and the mount as a client with its version
// and open handles, and exits 0; with one storage server killed it says
// which server and targets are down and exits 1, so monitoring can use it.
// A plain user's mount cannot ask (EPERM) — checked in package meta.
func TestStatus(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Servers: 2, Targets: 2, MetaArgs: []string{"--heartbeat-timeout", "2s"}})
	c.WaitTargetsUp(2)

	rep, exit := weftStatus(t, c, "client")
	if exit != 0 || rep["healthy"] != true {
		t.Fatalf("healthy cluster: exit %d, report %v", exit, rep)
	}
	if m := rep["meta"].(map[string]any); !strings.HasPrefix(m["version"].(string), "0.") || m["inodes"].(float64) < 1 {
		t.Fatalf("meta %v", m)
	}
	if n := len(rep["storage_servers"].([]any)); n != 2 {
		t.Fatalf("%d storage servers in %v", n, rep)
	}
	clients := rep["clients"].([]any)
	if len(clients) != 1 {
		t.Fatalf("clients %v", clients)
	}
	if cl := clients[0].(map[string]any); cl["version"] == "" || cl["lease_left_seconds"].(float64) <= 0 {
		t.Fatalf("client %v", cl)
	}

	// A server's key works too; the text form names what is up.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	text, err := exec.CommandContext(ctx, c.Bin(), "status", "--meta", c.MetaAddr(), "--keys", c.Keys("storage")).Output()
	if err != nil || !strings.Contains(string(text), "HEALTHY") || !strings.Contains(string(text), c.StorageAddr(1)) {
		t.Fatalf("weft status with a storage key: %v\n%s%s", err, text, stderrOf(err))
	}

	c.StopStorage(1)
	// Wait until the killed server is named: on a busy machine the live
	// one may miss a 2 s heartbeat window and be reported down first.
	deadline := time.Now().Add(2 * time.Minute) // a hang guard; the target is down after 2 s
	var problems []byte
	for {
		rep, exit = weftStatus(t, c, "client")
		problems, _ = json.Marshal(rep["problems"])
		if exit != 0 && strings.Contains(string(problems), c.StorageAddr(1)+" is down") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("storage server killed, status does not say so: exit %d, %v", exit, rep)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if exit != 1 || rep["healthy"] != false || !strings.Contains(string(problems), c.StorageAddr(1)+" is down") {
		t.Fatalf("one storage server down: exit %d, problems %s", exit, problems)
	}
}

// TestStatusReplicated: with three metadata members, `weft status` (given
// every member's address) lists each member once, with one leader, every
// member answering with the same term and an applied index, and the
// leader's view of each (match, lag); with one follower killed it names
// that member as not answering and exits 1.
func TestStatusReplicated(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Servers: 1, Targets: 1, MetaReplicas: 3, Timeout: "30s"})
	lead := c.WaitMetaLeader()
	c.WaitTargetsUp(1)

	members := func(rep map[string]any) []map[string]any {
		var out []map[string]any
		ms, _ := rep["meta_members"].([]any)
		for _, m := range ms {
			out = append(out, m.(map[string]any))
		}
		return out
	}
	// Every member answers and agrees on the term once the group settled
	// (a status taken during an election may see two terms): poll.
	var rep map[string]any
	var exit int
	deadline := time.Now().Add(2 * time.Minute) // against hangs only
	for {
		rep, exit = weftStatus(t, c, "client")
		ms := members(rep)
		ok := exit == 0 && len(ms) == 3
		leaders := 0
		for _, m := range ms {
			ok = ok && m["error"] == nil && m["term"] == ms[0]["term"] && m["applied"].(float64) > 0 && m["active"] == true
			if m["leader"] == true {
				leaders++
				ok = ok && m["addr"] == c.MetaMemberAddr(lead) && m["lag"].(float64) == 0
			}
		}
		if ok && leaders == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("three healthy members: exit %d, report %v", exit, rep)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// Kill a follower: it is named, and the status is not healthy.
	follower := (lead + 1) % c.MetaReplicas()
	c.StopMetaMember(follower)
	rep, exit = weftStatus(t, c, "client")
	problems, _ := json.Marshal(rep["problems"])
	if exit != 1 || rep["healthy"] != false || !strings.Contains(string(problems), c.MetaMemberAddr(follower)+") does not answer") {
		t.Fatalf("one member down: exit %d, problems %s, report %v", exit, problems, rep)
	}
	var down map[string]any
	for _, m := range members(rep) {
		if m["addr"] == c.MetaMemberAddr(follower) {
			down = m
		}
	}
	if down == nil || down["error"] == nil || down["leader"] == true {
		t.Fatalf("the killed member: %v in %v", down, rep)
	}
}
