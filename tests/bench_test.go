package tests

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/weft-fs/weft/internal/testcluster"
)

// TestBenchIO500Quick runs `weft bench io500 --quick` against a real weft
// mount, the way an admin would, and checks that every IO500 phase reported
// a value and that every read phase verified the bytes it read.
func TestBenchIO500Quick(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Servers: 2, Targets: 4})
	out := filepath.Join(t.TempDir(), "io500.json")
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if txt, err := c.Weft(ctx, "bench", "io500", "--quick", "--procs", "2", "--json", out, c.Mount(0)); err != nil {
		t.Fatalf("weft bench io500: %v\n%s", err, txt)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Phases map[string]struct {
			Value    float64
			Unit     string
			Seconds  float64
			Verified *bool
		}
		Score struct{ Bandwidth, Metadata, Total float64 }
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	reads := map[string]bool{"ior-easy-read": true, "ior-hard-read": true, "ior-rnd4K-easy-read": true, "mdtest-hard-read": true}
	for _, name := range []string{
		"ior-easy-write", "ior-easy-read", "ior-hard-write", "ior-hard-read", "ior-rnd4K-easy-read",
		"mdtest-easy-write", "mdtest-easy-stat", "mdtest-easy-delete",
		"mdtest-hard-write", "mdtest-hard-stat", "mdtest-hard-read", "mdtest-hard-delete", "find",
	} {
		p, ok := res.Phases[name]
		switch {
		case !ok:
			t.Errorf("phase %s missing from the report", name)
		case p.Value <= 0 || p.Seconds <= 0 || p.Unit == "":
			t.Errorf("phase %s: value %v %s in %v s", name, p.Value, p.Unit, p.Seconds)
		case reads[name] && (p.Verified == nil || !*p.Verified):
			t.Errorf("read phase %s did not verify its data", name)
		}
	}
	if res.Score.Bandwidth <= 0 || res.Score.Metadata <= 0 || res.Score.Total <= 0 {
		t.Errorf("scores: %+v", res.Score)
	}
	// The run cleans up after itself: nothing left in the mount.
	if ents, err := os.ReadDir(c.Mount(0)); err != nil || len(ents) != 0 {
		t.Errorf("mount not empty after the run: %v %v", ents, err)
	}
}
