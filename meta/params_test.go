package meta

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/weft-fs/weft/proto"
)

func paramOf(t *testing.T, e *env, name string) ParamValue {
	t.Helper()
	ps, err := e.srv.ListParams(ctx)
	e.must(err)
	for _, p := range ps {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("no parameter %s in %+v", name, ps)
	return ParamValue{}
}

// TestParams: defaults, a set that lasts until a restart, a persisted one
// that survives it, the log level applied at once, and refusals (a plain
// user, an unknown name, a bad value) that change nothing.
func TestParams(t *testing.T) {
	level := new(slog.LevelVar)
	level.Set(slog.LevelWarn)
	e := newEnv(t, func(o *Options) { o.LogLevel = level; o.DefaultLogLevel = slog.LevelWarn })
	if p := paramOf(t, e, "client.checksums"); p.Value != "on" || p.Source != "default" {
		t.Fatalf("default %+v", p)
	}
	root := remote("host-a", 1)
	e.must(e.srv.SetParam(root, "client.read_ahead", "2MiB", false))
	e.must(e.srv.SetParam(root, "rebuild.rate", "100MiB", true))
	e.must(e.srv.SetParam(root, "log.level.meta", "DEBUG", false))
	if p := paramOf(t, e, "client.read_ahead"); p.Value != "2 MiB" && p.Value != "2MiB" || p.Source != "set" {
		t.Fatalf("set %+v", p)
	}
	// client.checksums is read-only: every set is refused, saying why.
	for _, v := range []string{"off", "on"} {
		if err := e.srv.SetParam(root, "client.checksums", v, false); !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "read-only") {
			t.Fatalf("set client.checksums=%s: %v, want EINVAL saying it is read-only", v, err)
		}
	}
	if p := paramOf(t, e, "rebuild.rate"); p.Value != "100 MiB" && p.Value != "100MiB" || p.Source != "persisted" {
		t.Fatalf("persisted %+v", p)
	}
	if level.Level() != slog.LevelDebug {
		t.Fatalf("log level %v after log.level.meta=debug", level.Level())
	}

	user := proto.WithCred(remote("host-a", 1), proto.Cred{Uid: 1000, Gid: 1000})
	if err := e.srv.SetParam(user, "rebuild.rate", "1", true); !errors.Is(err, syscall.EPERM) {
		t.Fatalf("a plain user set a parameter: %v", err)
	}
	for _, bad := range [][2]string{{"no.such", "1"}, {"rebuild.rate", "fast"}, {"client.checksums", "maybe"}, {"log.level.meta", "loud"}} {
		if err := e.srv.SetParam(root, bad[0], bad[1], true); !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), bad[0]) {
			t.Fatalf("set %s=%s: %v, want EINVAL naming it", bad[0], bad[1], err)
		}
	}
	if p := paramOf(t, e, "rebuild.rate"); p.Source != "persisted" || p.Value == "0" {
		t.Fatalf("a refused set changed rebuild.rate: %+v", p)
	}

	// Across a restart: the persisted value stays, the others are back
	// to their defaults; a persisted log level applies from the start.
	e.must(e.srv.SetParam(root, "log.level.meta", "error", true))
	level.Set(slog.LevelWarn)
	e.restart()
	if p := paramOf(t, e, "client.read_ahead"); p.Value != "auto" || p.Source != "default" {
		t.Fatalf("after restart %+v", p)
	}
	if p := paramOf(t, e, "rebuild.rate"); p.Source != "persisted" {
		t.Fatalf("after restart %+v", p)
	}
	if level.Level() != slog.LevelError {
		t.Fatalf("log level %v after a restart with log.level.meta=error persisted", level.Level())
	}
	// "" sets the daemon's own --log-level back.
	e.must(e.srv.SetParam(root, "log.level.meta", "", true))
	if level.Level() != slog.LevelWarn {
		t.Fatalf("log level %v after log.level.meta=\"\"", level.Level())
	}
}

// TestRebuildRateParam: the rebuild keeps its --rebuild-rate until
// rebuild.rate is set; a set paces it at once, and a set of another
// parameter does not undo a later change by `weft target rebuild-rate`.
func TestRebuildRateParam(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.RebuildRate = 64 << 20 })
	if r := e.srv.rb.pace.Rate(); r != 64<<20 {
		t.Fatalf("rate before any set: %d, want --rebuild-rate's %d", r, 64<<20)
	}
	root := remote("host-a", 1)
	e.must(e.srv.SetParam(root, "rebuild.rate", "100MiB", true))
	if r := e.srv.rb.pace.Rate(); r != 100<<20 {
		t.Fatalf("rate after rebuild.rate=100MiB: %d", r)
	}
	e.srv.SetRebuildRate(1 << 30)
	e.must(e.srv.SetParam(root, "client.read_ahead", "1MiB", false))
	if r := e.srv.rb.pace.Rate(); r != 1<<30 {
		t.Fatalf("a set of client.read_ahead changed the rebuild rate to %d", r)
	}
}

// TestParamsDocumented: every run-time parameter has its row in
// docs/params.md, with its scope and default.
func TestParamsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/params.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range Params {
		row := fmt.Sprintf("| `%s` | %s | `%s` |", p.Name, p.Scope, p.Default)
		if p.Default == "" {
			row = fmt.Sprintf("| `%s` | %s | `\"\"` |", p.Name, p.Scope)
		}
		if !strings.Contains(string(doc), row) {
			t.Errorf("docs/params.md has no row starting %q", row)
		}
	}
}
