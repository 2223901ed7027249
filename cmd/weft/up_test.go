package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestUpResolve(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	o := upOptions{Targets: 4, Servers: 2, BasePort: 7400, LogLevel: "info"}
	if err := o.resolve(); err != nil {
		t.Fatal(err)
	}
	if o.Data != filepath.Join(home, "weft", "data") || o.Mount != filepath.Join(home, "weft", "mnt") {
		t.Fatalf("defaults: data %s mount %s", o.Data, o.Mount)
	}
	if _, err := os.Stat(o.Data); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("resolve created %s: %v", o.Data, err)
	}
	// Data directories that already hold metadata: one server's, a group of 3's.
	single, group := t.TempDir(), t.TempDir()
	for _, d := range []string{filepath.Join(single, "meta"), filepath.Join(group, "meta-1"), filepath.Join(group, "meta-2"), filepath.Join(group, "meta-3")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, d, "CURRENT", "x")
	}
	for _, tc := range []struct {
		name string
		o    upOptions
		err  string
	}{
		{"no targets", upOptions{Targets: 0, Servers: 1, BasePort: 7400, LogLevel: "info"}, "--targets 0"},
		{"more servers than targets", upOptions{Targets: 2, Servers: 3, BasePort: 7400, LogLevel: "info"}, "--servers 3: want 1..2"},
		{"no servers", upOptions{Targets: 2, Servers: 0, BasePort: 7400, LogLevel: "info"}, "--servers 0"},
		{"port too high", upOptions{Targets: 4, Servers: 2, BasePort: 65530, LogLevel: "info"}, "--base-port 65530"},
		{"port zero", upOptions{Targets: 4, Servers: 2, BasePort: 0, LogLevel: "info"}, "--base-port 0"},
		{"mount inside data", upOptions{Data: "/x/d", Mount: "/x/d/mnt", Targets: 1, Servers: 1, BasePort: 7400, LogLevel: "info"}, "must not contain each other"},
		{"data inside mount", upOptions{Data: "/x/m/d", Mount: "/x/m", Targets: 1, Servers: 1, BasePort: 7400, LogLevel: "info"}, "must not contain each other"},
		{"same dir", upOptions{Data: "/x", Mount: "/x/", Targets: 1, Servers: 1, BasePort: 7400, LogLevel: "info"}, "must not contain each other"},
		{"bad log level", upOptions{Targets: 1, Servers: 1, BasePort: 7400, LogLevel: "chatty"}, "--log-level"},
		{"more copies than servers", upOptions{Targets: 4, Servers: 2, Mirror: 3, BasePort: 7400, LogLevel: "info"}, "--mirror 3: want 1..2"},
		{"too many copies", upOptions{Targets: 8, Servers: 8, Mirror: 6, BasePort: 7400, LogLevel: "info"}, "--mirror 6: want 1..5"},
		{"two meta replicas", upOptions{Targets: 1, Servers: 1, BasePort: 7400, LogLevel: "info", MetaReplicas: 2}, "--meta-replicas 2: want 1, 3 or 5"},
		{"group beside a single server", upOptions{Data: single, Mount: "/x/m", Targets: 1, Servers: 1, BasePort: 7400, LogLevel: "info", MetaReplicas: 3},
			"holds the metadata of one server"},
		{"single server beside a group", upOptions{Data: group, Mount: "/x/m", Targets: 1, Servers: 1, BasePort: 7400, LogLevel: "info", MetaReplicas: 1},
			"holds the metadata of a group of 3"},
		{"group of another size", upOptions{Data: group, Mount: "/x/m", Targets: 1, Servers: 1, BasePort: 7400, LogLevel: "info", MetaReplicas: 5},
			"holds the metadata of a group of 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.o
			wantErr(t, o.resolve(), tc.err)
		})
	}
}

func TestUpFlags(t *testing.T) {
	wantErr(t, execute(newUpCmd(), "--targets", "x"), "invalid argument")
	wantErr(t, execute(newUpCmd(), "--servers", "5", "--targets", "4"), "--servers 5")
	wantErr(t, execute(newUpCmd(), "--servers", "2", "--mirror", "3"), "--mirror 3")
	wantErr(t, execute(newUpCmd(), "extra"), "unknown command")
	wantErr(t, execute(newUpCmd(), "--meta-follower-gomaxprocs", "-1"), "--meta-follower-gomaxprocs -1")
}

func TestPlanUp(t *testing.T) {
	p := planUp(upOptions{Data: "/d", Mount: "/m", Targets: 5, Servers: 3, BasePort: 7400, LogLevel: "info"})
	if p.MetaAddr != "127.0.0.1:7400" || p.Metas[0].Addr != p.MetaAddr || p.Metas[0].Log != "/d/logs/meta.log" {
		t.Fatalf("meta: %+v", p.Metas)
	}
	if want := []string{"meta", "--listen", "127.0.0.1:7400", "--data", "/d/meta", "--keys", "/d/keys/meta", "--log-level", "info"}; !slices.Equal(p.Metas[0].Args, want) {
		t.Fatalf("meta args %q, want %q", p.Metas[0].Args, want)
	}
	wantTargets := [][]string{{"/d/target-0", "/d/target-3"}, {"/d/target-1", "/d/target-4"}, {"/d/target-2"}}
	if len(p.Storage) != 3 {
		t.Fatalf("%d storage servers", len(p.Storage))
	}
	for i, s := range p.Storage {
		addr := fmt.Sprintf("127.0.0.1:%d", 7410+i)
		if s.Name != fmt.Sprintf("storage-%d", i) || s.Addr != addr || s.Log != fmt.Sprintf("/d/logs/storage-%d.log", i) {
			t.Fatalf("storage %d: %+v", i, s)
		}
		if !slices.Equal(s.Dirs, wantTargets[i]) {
			t.Fatalf("storage %d targets %q, want %q", i, s.Dirs, wantTargets[i])
		}
		want := []string{"storage", "--listen", addr, "--meta", "127.0.0.1:7400", "--keys", "/d/keys/storage"}
		for _, d := range wantTargets[i] {
			want = append(want, "--target", d)
		}
		want = append(want, "--local-socket", fmt.Sprintf("/d/run/storage-%d.sock", i), "--log-level", "info")
		if !slices.Equal(s.Args, want) {
			t.Fatalf("storage %d args %q, want %q", i, s.Args, want)
		}
	}
	m := p.Mounter
	if m.Name != "mount" || m.Args[0] != "mount" || m.Args[len(m.Args)-1] != "/m" || !slices.Contains(m.Args, "127.0.0.1:7400") || !slices.Contains(m.Args, "/d/keys/client") || m.Log != "/d/logs/mount.log" {
		t.Fatalf("mount: %+v", m)
	}
}

// The children's command lines parse and validate with the real commands.
func TestPlanUpArgsValidate(t *testing.T) {
	dir := t.TempDir()
	p := planUp(upOptions{Data: dir + "/data", Mount: dir + "/mnt", Targets: 3, Servers: 2, BasePort: 7400, LogLevel: "debug", PprofPort: 7450})
	for _, c := range append(append(append([]childSpec(nil), p.Metas...), p.Storage...), p.Mounter) {
		for _, d := range c.Dirs {
			if err := mkdir(d); err != nil {
				t.Fatal(err)
			}
		}
	}
	ran := 0
	check := func(c childSpec, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s %q: %v", c.Name, c.Args, err)
		}
	}
	check(p.Metas[0], execute(metaCommand(func(context.Context, *metaOptions) error { ran++; return nil }), p.Metas[0].Args[1:]...))
	for _, s := range p.Storage {
		check(s, execute(storageCommand(func(context.Context, *storageOptions) error { ran++; return nil }), s.Args[1:]...))
	}
	check(p.Mounter, execute(mountCommand(func(context.Context, *mountOptions) error { ran++; return nil }), p.Mounter.Args[1:]...))
	if ran != 4 {
		t.Fatalf("%d of 4 commands ran", ran)
	}
}

func TestCheckPortsFree(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	busy := l.Addr().String()
	wantErr(t, checkPortsFree([]string{busy}), busy, "already in use", "--base-port")

	l2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	free := l2.Addr().String()
	l2.Close()
	if err := checkPortsFree([]string{free}); err != nil {
		t.Fatalf("free port %s: %v", free, err)
	}
}

func TestLogTail(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	for i := range 30 {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	p := writeFile(t, dir, "log", b.String())
	got := logTail(p, 3)
	if got != "line 27\nline 28\nline 29\n" {
		t.Fatalf("tail: %q", got)
	}
	if got := logTail(writeFile(t, dir, "empty", ""), 3); got != "(empty)\n" {
		t.Fatalf("empty: %q", got)
	}
	if got := logTail(dir+"/missing", 3); !strings.Contains(got, "cannot read the log") {
		t.Fatalf("missing: %q", got)
	}
	// Only the end of a big log is read; the first, partial line is dropped.
	big := writeFile(t, dir, "big", strings.Repeat("x", 100<<10)+"\nlast\n")
	if got := logTail(big, 5); got != "last\n" {
		t.Fatalf("big: %q", got)
	}
}

func shSpec(dir, name, script string) childSpec {
	return childSpec{Name: name, Args: []string{"-c", script}, Log: filepath.Join(dir, name+".log")}
}

func TestSupervisorReportsDeadChild(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	s := newSupervisor("/bin/sh", &out, 2)
	defer s.stopAll(dir)
	if _, err := s.start(shSpec(dir, "storage-1", "exec sleep 30")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.start(shSpec(dir, "storage-0", "echo 'storage: target dir is gone' >&2; exit 3")); err != nil {
		t.Fatal(err)
	}
	err := s.waitFor(context.Background(), "nothing", 20*time.Second, func() (bool, error) { return false, nil })
	wantErr(t, err, "storage-0 exited unexpectedly", "exit status 3", "storage: target dir is gone", filepath.Join(dir, "storage-0.log"))
	if !strings.Contains(out.String(), "started storage-0") {
		t.Fatalf("output: %s", out.String())
	}
}

func TestSupervisorStopsChildrenInReverseOrder(t *testing.T) {
	dir := t.TempDir()
	s := newSupervisor("/bin/sh", &bytes.Buffer{}, 2)
	order := filepath.Join(dir, "order")
	// Each child notes when it gets SIGTERM; the second must hear it first.
	for _, name := range []string{"first", "second"} {
		ready := filepath.Join(dir, name+".ready")
		script := fmt.Sprintf("trap 'echo %s >> %s; exit 0' TERM; touch %s; while :; do sleep 0.05; done", name, order, ready)
		if _, err := s.start(shSpec(dir, name, script)); err != nil {
			t.Fatal(err)
		}
		// Wait until the shell has installed its trap (it touches the
		// file after), however slow the machine is.
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
			if _, err := os.Stat(ready); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s did not start within a minute", name)
			}
		}
	}
	s.stopAll(dir)
	for _, c := range s.children {
		select {
		case <-c.done:
		default:
			t.Fatalf("%s still running", c.spec.Name)
		}
	}
	b, err := os.ReadFile(order)
	if err != nil || string(b) != "second\nfirst\n" {
		t.Fatalf("stop order %q, %v", b, err)
	}
}

func TestSupervisorWaitFor(t *testing.T) {
	dir := t.TempDir()
	s := newSupervisor("/bin/sh", &bytes.Buffer{}, 1)
	defer s.stopAll(dir)
	if _, err := s.start(shSpec(dir, "meta", "echo hello from meta; exec sleep 30")); err != nil {
		t.Fatal(err)
	}
	n := 0
	if err := s.waitFor(context.Background(), "three polls", 10*time.Second, func() (bool, error) { n++; return n == 3, nil }); err != nil || n != 3 {
		t.Fatalf("waitFor = %v after %d polls", err, n)
	}
	time.Sleep(100 * time.Millisecond) // let the shell write its log line
	err := s.waitFor(context.Background(), "godot", 300*time.Millisecond, func() (bool, error) { return false, errors.New("not yet") })
	wantErr(t, err, "gave up waiting 300ms for godot", "last error: not yet", "hello from meta")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.waitFor(ctx, "x", time.Minute, func() (bool, error) { return false, nil }); !errors.Is(err, errInterrupted) {
		t.Fatalf("cancelled: %v", err)
	}
	if err := s.interrupted(errInterrupted); err != nil {
		t.Fatalf("interrupted = %v", err)
	}
}

func TestPrintUpReport(t *testing.T) {
	p := planUp(upOptions{Data: "/d", Mount: "/home/someone/weft/mnt", Targets: 3, Servers: 2, BasePort: 7400, LogLevel: "info"})
	var b bytes.Buffer
	printUpReport(&b, p)
	want := `
weft is running:
  meta       127.0.0.1:7400          database /d/meta
  storage-0  127.0.0.1:7410          targets target-0, target-2 in /d
  storage-1  127.0.0.1:7411          targets target-1 in /d
  mount      /home/someone/weft/mnt  client of meta 127.0.0.1:7400
logs:
  meta       /d/logs/meta.log
  storage-0  /d/logs/storage-0.log
  storage-1  /d/logs/storage-1.log
  mount      /d/logs/mount.log
`
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
}

// TestPlanUpEncrypt: --encrypt reaches every process weft up starts.
// TestPlanUpPprof: --pprof-port gives every child its own profile port.
func TestPlanUpPprof(t *testing.T) {
	p := planUp(upOptions{Data: "/d", Mount: "/m", Targets: 2, Servers: 2, BasePort: 7400, LogLevel: "info", MetaReplicas: 3, PprofPort: 7450})
	want := map[string]string{"meta-1": "127.0.0.1:7450", "meta-3": "127.0.0.1:7452", "storage-1": "127.0.0.1:7461", "mount": "127.0.0.1:7470"}
	seen := map[string]bool{}
	for _, c := range append(append([]childSpec(nil), p.Metas...), append(p.Storage, p.Mounter)...) {
		i := slices.Index(c.Args, "--pprof")
		if i < 0 || i+1 >= len(c.Args) || seen[c.Args[i+1]] {
			t.Errorf("%s args %q: want a --pprof address of its own", c.Name, c.Args)
			continue
		}
		seen[c.Args[i+1]] = true
		if w, ok := want[c.Name]; ok && c.Args[i+1] != w {
			t.Errorf("%s: --pprof %s, want %s", c.Name, c.Args[i+1], w)
		}
	}
	if p := planUp(upOptions{Data: "/d", Mount: "/m", Targets: 2, Servers: 2, BasePort: 7400}); slices.Contains(p.Mounter.Args, "--pprof") {
		t.Errorf("no --pprof-port: mount args %q", p.Mounter.Args)
	}
}

func TestPlanUpEncrypt(t *testing.T) {
	for _, enc := range []bool{false, true} {
		p := planUp(upOptions{Data: "/d", Mount: "/m", Targets: 2, Servers: 2, BasePort: 7400, LogLevel: "info", Encrypt: enc})
		for _, c := range append(append([]childSpec(nil), p.Metas...), append(p.Storage, p.Mounter)...) {
			if got := slices.Contains(c.Args, "--encrypt"); got != enc {
				t.Errorf("encrypt %v: %s args %q", enc, c.Name, c.Args)
			}
		}
	}
}

// TestUpLockData: a second weft up on the same data stops at once, naming
// the first one's pid; after the first lets go, the lock can be taken.
func TestUpLockData(t *testing.T) {
	data := t.TempDir()
	unlock, err := lockData(data)
	if err != nil {
		t.Fatal(err)
	}
	_, err = lockData(data)
	wantErr(t, err, "another weft up (pid "+strconv.Itoa(os.Getpid())+")", "running on "+data)
	unlock()
	unlock, err = lockData(data)
	if err != nil {
		t.Fatalf("after unlock: %v", err)
	}
	unlock()
}

// TestPlanUpReplicas: three members on base-port, +1, +2 with the same
// --peers and --follower-gomaxprocs, and every client given all three
// addresses.
func TestPlanUpReplicas(t *testing.T) {
	o := upOptions{Data: "/d", Mount: "/m", Targets: 2, Servers: 1, BasePort: 7400, LogLevel: "info", MetaReplicas: 3, MetaFollowerGoMaxProcs: 1}
	if err := o.resolve(); err != nil {
		t.Fatal(err)
	}
	p := planUp(o)
	const list = "127.0.0.1:7400,127.0.0.1:7401,127.0.0.1:7402"
	if p.MetaAddr != list || len(p.Metas) != 3 {
		t.Fatalf("meta %s, %d members", p.MetaAddr, len(p.Metas))
	}
	for i, m := range p.Metas {
		want := []string{"meta", "--id", fmt.Sprint(i + 1), "--peers", "1=127.0.0.1:7400,2=127.0.0.1:7401,3=127.0.0.1:7402",
			"--data", fmt.Sprintf("/d/meta-%d", i+1), "--keys", "/d/keys/meta", "--raft-tick", "100ms", "--election-ticks", "10",
			"--log-level", "info", "--follower-gomaxprocs", "1"}
		if !slices.Equal(m.Args, want) || m.Addr != fmt.Sprintf("127.0.0.1:%d", 7400+i) {
			t.Errorf("member %d: %s %q, want %q", i+1, m.Addr, m.Args, want)
		}
		// The member's flags resolve as `weft meta` would take them.
		dir := t.TempDir()
		args := slices.Clone(m.Args[1:])
		args[slices.Index(args, "--data")+1] = dir
		var got metaOptions
		if err := execute(metaCommand(func(_ context.Context, o *metaOptions) error { got = *o; return nil }), args...); err != nil {
			t.Fatal(err)
		}
		if got.Listen != m.Addr || got.ID != uint64(i+1) || got.FollowerGoMaxProcs != 1 {
			t.Errorf("member %d resolves to listen %s id %d follower gomaxprocs %d", i+1, got.Listen, got.ID, got.FollowerGoMaxProcs)
		}
	}
	if !slices.Contains(p.Storage[0].Args, list) || !slices.Contains(p.Mounter.Args, list) {
		t.Errorf("clients do not get every member: storage %q, mount %q", p.Storage[0].Args, p.Mounter.Args)
	}
	if slices.Contains(p.Storage[0].Args, "--follower-gomaxprocs") || slices.Contains(p.Mounter.Args, "--follower-gomaxprocs") {
		t.Errorf("--meta-follower-gomaxprocs given to others than the metadata servers: storage %q, mount %q", p.Storage[0].Args, p.Mounter.Args)
	}
}

// TestSupervisorMetaMemberDies: when a member of a metadata group of
// three exits, weft up says so and keeps going while two run; when a
// second one exits, the group has no majority and weft up gives up.
func TestSupervisorMetaMemberDies(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	s := newSupervisor("/bin/sh", &out, 3)
	defer s.stopAll(dir)
	p := upPlan{Metas: []childSpec{{Name: "meta-1"}, {Name: "meta-2"}, {Name: "meta-3"}}}
	kids := startSleepers(t, s, dir, "meta-1", "meta-2", "meta-3")
	kill := s.killChild
	if c := kill(kids[1]); !s.survives(c, p) {
		t.Fatalf("one of three members died: weft up gave up\n%s", out.String())
	}
	if !strings.Contains(out.String(), "meta-2 exited") || !strings.Contains(out.String(), "keeps serving with 2 of 3 members") {
		t.Fatalf("output: %s", out.String())
	}
	if c := kill(kids[0]); s.survives(c, p) {
		t.Fatal("two of three members died: weft up went on without a majority")
	}
	if !strings.Contains(out.String(), "fewer than a majority") {
		t.Fatalf("output: %s", out.String())
	}
	// The mount is never survivable.
	if s.survives(&child{spec: childSpec{Name: "mount"}, done: make(chan struct{})}, p) {
		t.Fatal("a dead mount was taken as survivable")
	}
}

// TestSupervisorStorageServerDies: a storage server that exits is
// survivable while another runs (protected files are served from the
// others); the last one is not.
func TestSupervisorStorageServerDies(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	s := newSupervisor("/bin/sh", &out, 2)
	defer s.stopAll(dir)
	p := upPlan{Metas: []childSpec{{Name: "meta"}}, Storage: []childSpec{{Name: "storage-0"}, {Name: "storage-1"}}}
	kids := startSleepers(t, s, dir, "storage-0", "storage-1")
	kill := s.killChild
	if c := kill(kids[0]); !s.survives(c, p) {
		t.Fatalf("one of two storage servers died: weft up gave up\n%s", out.String())
	}
	if !strings.Contains(out.String(), "storage-0 exited") || !strings.Contains(out.String(), "1 of 2 storage servers run") {
		t.Fatalf("output: %s", out.String())
	}
	if c := kill(kids[1]); s.survives(c, p) {
		t.Fatal("the last storage server died: weft up went on")
	}
}

// startSleepers starts a child named each of names under s that only
// sleeps, for tests of what the supervisor does when children die.
func startSleepers(t *testing.T, s *supervisor, dir string, names ...string) []*child {
	t.Helper()
	var kids []*child
	for _, name := range names {
		c, err := s.start(shSpec(dir, name, "exec sleep 60"))
		if err != nil {
			t.Fatal(err)
		}
		kids = append(kids, c)
	}
	return kids
}

// killChild kills c and returns what the supervisor reports exited.
func (s *supervisor) killChild(c *child) *child {
	c.cmd.Process.Kill()
	return <-s.exited
}
