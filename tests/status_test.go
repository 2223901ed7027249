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
	deadline := time.Now().Add(2 * time.Minute) // a hang guard; the target is down after 2 s
	for {
		rep, exit = weftStatus(t, c, "client")
		if exit != 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("storage server killed, status still healthy: %v", rep)
		}
		time.Sleep(200 * time.Millisecond)
	}
	problems, _ := json.Marshal(rep["problems"])
	if exit != 1 || rep["healthy"] != false || !strings.Contains(string(problems), c.StorageAddr(1)+" is down") {
		t.Fatalf("one storage server down: exit %d, problems %s", exit, problems)
	}
}
