package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/weft-fs/weft/internal/version"
	"github.com/weft-fs/weft/transport"
)

// run executes the root command with args and returns what it printed.
func runRoot(t *testing.T, args ...string) string {
	t.Helper()
	root := newRootCmd()
	var out bytes.Buffer
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(&out)
	if err := root.Execute(); err != nil {
		t.Fatalf("weft %s: %v (%s)", strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

func TestVersion(t *testing.T) {
	want := "weft " + version.String() + "\n"
	// --version on every command, before any argument checks: a command
	// that needs arguments (mount) prints the version instead of failing.
	for _, args := range [][]string{{"--version"}, {"mount", "--version"}, {"bench", "io500", "--version"}, {"meta", "--version"}} {
		if got := runRoot(t, args...); got != want {
			t.Errorf("weft %s printed %q, want %q", strings.Join(args, " "), got, want)
		}
	}
	out := runRoot(t, "version")
	if !strings.HasPrefix(out, want) || !strings.Contains(out, fmt.Sprintf("protocol %d", transport.ProtocolVersion)) {
		t.Errorf("weft version printed %q", out)
	}
	var v versionJSON
	if err := json.Unmarshal([]byte(runRoot(t, "version", "--json")), &v); err != nil {
		t.Fatal(err)
	}
	if v.Release != version.Release || v.Protocol != transport.ProtocolVersion || v.Go == "" {
		t.Errorf("weft version --json = %+v", v)
	}
}
