package tests

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weft-fs/weft/internal/testcluster"
)

// artifactDir is where tests leave files for people to look at
// (screenshots): $WEFT_TEST_ARTIFACTS, or tests/artifacts.
func artifactDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("WEFT_TEST_ARTIFACTS")
	if dir == "" {
		dir = "artifacts"
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs(dir)
	return abs
}

// chromium runs headless Chromium on url and returns the page's DOM after
// its scripts ran; with shot, it also saves a screenshot there.
func chromium(t *testing.T, url, shot string) string {
	t.Helper()
	bin := requireTool(t, "chromium")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // a hang guard
	defer cancel()
	profile := t.TempDir()
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
		"--user-data-dir=" + profile, "--virtual-time-budget=10000", "--window-size=1280,1100"}
	out, err := exec.CommandContext(ctx, bin, append(args, "--dump-dom", url)...).Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom %s: %v (%s)", url, err, stderrOf(err))
	}
	if shot != "" {
		if b, err := exec.CommandContext(ctx, bin, append(args, "--screenshot="+shot, url)...).CombinedOutput(); err != nil {
			t.Fatalf("chromium --screenshot: %v: %s", err, b)
		}
		if fi, err := os.Stat(shot); err != nil || fi.Size() < 10<<10 {
			t.Fatalf("screenshot %s: %v", shot, err)
		}
		t.Logf("screenshot: %s", shot)
	}
	return string(out)
}

// TestDashboard opens the metadata service's dashboard in a real headless
// Chromium: it shows the file system healthy, every target and the mount
// as a client, and throughput charts once data moved; with a storage
// server killed it shows the problem and the target down. Screenshots of
// both go to the test artefacts.
func TestDashboard(t *testing.T) {
	httpAddr := freeAddr(t)
	// A short heartbeat timeout, so the killed server is seen down soon;
	// beats four times as often, so a busy machine's late beat does not
	// make the healthy cluster look down.
	c := testcluster.Start(t, testcluster.Options{Servers: 2, Targets: 2,
		MetaArgs:    []string{"--http", httpAddr, "--heartbeat-timeout", "2s"},
		StorageArgs: []string{"--heartbeat-interval", "500ms"}})
	c.WaitTargetsUp(2)
	url := "http://" + httpAddr + "/"
	type history struct {
		Samples []struct {
			Write     float64 `json:"write_bytes_per_s"`
			TargetsUp int     `json:"targets_up"`
		} `json:"samples"`
	}
	// waitHistory polls the history until ok (a hang guard only).
	waitHistory := func(what string, ok func(history) bool) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for {
			var h history
			resp, err := http.Get(url + "api/history")
			if err == nil {
				err = json.NewDecoder(resp.Body).Decode(&h)
				resp.Body.Close()
			}
			if err == nil && ok(h) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the dashboard's history never showed %s: %+v %v", what, h, err)
			}
			time.Sleep(time.Second)
		}
	}
	// Rates start with the second sample that knows a target.
	waitHistory("both targets", func(h history) bool {
		n := len(h.Samples)
		return n >= 2 && h.Samples[n-2].TargetsUp == 2
	})
	if err := os.WriteFile(filepath.Join(c.Mount(0), "data"), make([]byte, 8<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	waitHistory("the 8 MiB write", func(h history) bool {
		for _, s := range h.Samples {
			if s.Write > 0 {
				return true
			}
		}
		return false
	})

	dir := artifactDir(t)
	// The page shows the health of its last poll: on a loaded machine a
	// late heartbeat can show a problem for a moment, so the healthy page
	// is taken again until it is healthy (a hang guard only).
	var dom string
	for deadline := time.Now().Add(2 * time.Minute); ; {
		dom = chromium(t, url, filepath.Join(dir, "dashboard-healthy.png"))
		if strings.Contains(dom, `class="badge ok">HEALTHY`) || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	for _, want := range []string{`id="health" class="badge ok">HEALTHY`, `data-target-id="1"`, `data-target-id="2"`,
		`data-session=`, `<polyline class="write"`, c.StorageAddr(1)} {
		if !strings.Contains(dom, want) {
			t.Errorf("healthy dashboard lacks %q", want)
		}
	}

	c.StopStorage(1)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if _, exit := weftStatus(t, c, "client"); exit != 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("storage server killed, status still healthy")
		}
		time.Sleep(200 * time.Millisecond)
	}
	dom = chromium(t, url, filepath.Join(dir, "dashboard-server-down.png"))
	for _, want := range []string{`class="badge bad">PROBLEMS`, "storage server " + c.StorageAddr(1) + " is down", `class="down">DOWN`} {
		if !strings.Contains(dom, want) {
			t.Errorf("dashboard with a server down lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("DOM:\n%s", dom)
	}
}
