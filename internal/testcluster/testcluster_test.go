package testcluster

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	code := Main(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}

func TestUnescapeMountinfo(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/tmp/a", "/tmp/a"},
		{`/tmp/a\040b`, "/tmp/a b"},
		{`/tmp/tab\011x\134y`, "/tmp/tab\tx\\y"},
		{`/tmp/trailing\`, `/tmp/trailing\`},
		{`/tmp/bad\09`, `/tmp/bad\09`},
	} {
		if got := unescapeMountinfo(tc.in); got != tc.want {
			t.Errorf("unescapeMountinfo(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestLifecycle drives the harness itself: start, write, stop and restart
// each kind of process, crash everything, restart, add a mount.
func TestLifecycle(t *testing.T) {
	c := Start(t, Options{Servers: 2, Targets: 2})
	if c.NumTargets() != 2 || len(c.AllTargetDirs()) != 2 || len(c.TargetDirs(0)) != 1 {
		t.Fatalf("targets: %v", c.AllTargetDirs())
	}
	if !isFuseMount(c.Mount(0)) {
		t.Fatalf("%s is not a FUSE mount", c.Mount(0))
	}
	ts, err := DF(c.Mount(0))
	if err != nil || len(ts) != 2 {
		t.Fatalf("df: %+v %v", ts, err)
	}
	p := filepath.Join(c.Mount(0), "f")
	want := bytes.Repeat([]byte("weft"), 100_000)
	if err := os.WriteFile(p, want, 0o644); err != nil {
		t.Fatal(err)
	}
	if l, err := GetLayout(p); err != nil || l.StripeSize == 0 || len(l.Targets) == 0 {
		t.Errorf("layout: %+v %v", l, err)
	}

	c.StopMeta()
	c.StartMeta()
	c.StopStorage(1)
	c.StartStorage(1)
	c.WaitTargetsUp(2)

	c.KillAll()
	if len(c.PIDs()) != 0 {
		t.Fatalf("processes left after KillAll: %v", c.PIDs())
	}
	if _, err := os.Stat(p); !errors.Is(err, syscall.ENOTCONN) {
		t.Errorf("stat on the mount of a killed daemon: %v, want ENOTCONN", err)
	}
	c.Restart()
	if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, want) {
		t.Errorf("after KillAll+Restart: %d bytes, %v", len(got), err)
	}
	i := c.AddMount()
	if got, err := os.ReadFile(filepath.Join(c.Mount(i), "f")); err != nil || !bytes.Equal(got, want) {
		t.Errorf("through the added mount: %d bytes, %v", len(got), err)
	}
	if len(c.PIDs()) != 5 {
		t.Errorf("running: %v, want meta, 2 storage, 2 mounts", c.PIDs())
	}
	c.StopMount(0)
	if isMountpoint(c.Mount(0)) {
		t.Errorf("%s still mounted after StopMount", c.Mount(0))
	}
	c.StartMount(0)
	if _, err := os.Stat(p); err != nil {
		t.Errorf("after StartMount: %v", err)
	}
}
