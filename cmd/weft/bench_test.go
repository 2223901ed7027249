package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weft-fs/weft/auth"
)

// The bench coordinator re-executes its own binary as `weft bench worker`;
// in tests that binary is the test binary, which then acts as weft.
func init() {
	if os.Getenv("WEFT_BENCH_TEST_AS_WEFT") == "1" {
		root := newRootCmd()
		root.SetArgs(os.Args[1:])
		if err := root.Execute(); err != nil {
			os.Stderr.WriteString("weft: " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
}

type benchJSON struct {
	Phases map[string]struct {
		Value    float64 `json:"value"`
		Unit     string  `json:"unit"`
		Seconds  float64 `json:"seconds"`
		Verified *bool   `json:"verified"`
	} `json:"phases"`
	Score map[string]float64 `json:"score"`
}

var allPhases = []string{
	"ior-easy-write", "ior-easy-read", "ior-hard-write", "ior-hard-read", "ior-rnd4K-easy-read",
	"mdtest-easy-write", "mdtest-easy-stat", "mdtest-easy-delete",
	"mdtest-hard-write", "mdtest-hard-stat", "mdtest-hard-read", "mdtest-hard-delete", "find",
}

func runBench(t *testing.T, args ...string) (string, benchJSON) {
	t.Helper()
	t.Setenv("WEFT_BENCH_TEST_AS_WEFT", "1")
	jsonPath := filepath.Join(t.TempDir(), "out.json")
	var stdout, stderr bytes.Buffer
	cmd := newRootCmd()
	cmd.SetArgs(append(args, "--json", jsonPath))
	cmd.SetOut(&stdout)
	cmd.SetErr(&stderr)
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("%v\nstderr:\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "io500: ") {
		t.Errorf("no progress on stderr: %q", stderr.String())
	}
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep benchJSON
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	return stdout.String(), rep
}

func checkBench(t *testing.T, out string, rep benchJSON) {
	t.Helper()
	for _, name := range allPhases {
		p, ok := rep.Phases[name]
		if !ok || !(p.Value > 0) || !(p.Seconds > 0) || p.Unit == "" {
			t.Errorf("phase %s: %+v (present %v)", name, p, ok)
		}
		if strings.Contains(name, "read") && (p.Verified == nil || !*p.Verified) {
			t.Errorf("%s not verified", name)
		}
		if !strings.Contains(out, name) {
			t.Errorf("no [RESULT] line for %s", name)
		}
	}
	for _, k := range []string{"bandwidth", "metadata", "total"} {
		if !(rep.Score[k] > 0) {
			t.Errorf("score %s = %v", k, rep.Score[k])
		}
	}
	if !strings.Contains(out, "[SCORE ]") {
		t.Errorf("no score line:\n%s", out)
	}
}

// TestBenchIO500Quick runs the quick IO500 with two worker processes on a
// plain directory, end to end.
func TestBenchIO500Quick(t *testing.T) {
	dir := t.TempDir()
	out, rep := runBench(t, "bench", "io500", "--quick", "--procs", "2", dir)
	checkBench(t, out, rep)
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("bench left %d entries in %s", len(ents), dir)
	}
}

// TestBenchRemoteWorkers runs one local rank and two ranks served by a
// `bench worker --listen` (the path used for other client machines).
func TestBenchRemoteWorkers(t *testing.T) {
	t.Setenv("WEFT_BENCH_TEST_AS_WEFT", "1")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	keys := filepath.Join(t.TempDir(), "keys")
	if err := auth.GenerateCluster(keys); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		cmd := newRootCmd()
		cmd.SetArgs([]string{"bench", "worker", "--listen", addr, "--keys", filepath.Join(keys, "client")})
		cmd.SetErr(&bytes.Buffer{})
		done <- cmd.ExecuteContext(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	for i := 0; ; i++ { // wait for the listener
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			break
		}
		if i > 100 {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	dir := t.TempDir()
	out, rep := runBench(t, "bench", "io500", "--quick", "--procs", "1", "--stonewall", "1s",
		"--max-data", "8MiB", "--max-files", "500", "--workers", addr+","+addr, "--keys", filepath.Join(keys, "client"), dir)
	checkBench(t, out, rep)
}

func TestBenchFlagErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "io500"}, "arg"},
		{[]string{"bench", "io500", "--procs", "0", dir}, "no workers"},
		{[]string{"bench", "io500", "--procs", "-1", dir}, "--procs"},
		{[]string{"bench", "io500", "--workers", "nohost", dir}, "--workers"},
		{[]string{"bench", "io500", "--stonewall", "0", dir}, "stonewall"},
		{[]string{"bench", "io500", "--max-data", "1KiB", dir}, "--max-data"},
		{[]string{"bench", "io500", filepath.Join(dir, "missing")}, "not a directory"},
		{[]string{"bench", "worker", "--listen", "bad"}, "--listen"},
	} {
		wantErr(t, execute(newRootCmd(), tc.args...), tc.want)
	}
}
