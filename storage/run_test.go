package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/weft-fs/weft/meta/metarpc"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/storage/storagerpc"
	"github.com/weft-fs/weft/storage/vfs"
	"github.com/weft-fs/weft/transport"
)

// fakeRegistry is a TargetRegistry that assigns ids like the metadata
// server: a known uuid gets its id back, a wrong id is refused.
type fakeRegistry struct {
	mu       sync.Mutex
	failures int // the first calls fail with EIO (server not up yet)
	calls    int
	ids      map[string]proto.TargetID
	infos    map[proto.TargetID]proto.TargetInfo
	beats    map[proto.TargetID]int
	next     proto.TargetID
}

func newFakeRegistry(failures int) *fakeRegistry {
	return &fakeRegistry{failures: failures, ids: map[string]proto.TargetID{}, infos: map[proto.TargetID]proto.TargetInfo{}, beats: map[proto.TargetID]int{}, next: 100}
}

func (r *fakeRegistry) RegisterTarget(ctx context.Context, uuid string, info proto.TargetInfo) (proto.TargetID, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	if r.calls <= r.failures {
		return 0, fmt.Errorf("fake: meta server down: %w", syscall.EIO)
	}
	id, known := r.ids[uuid]
	if info.ID != 0 && (!known || id != info.ID) {
		return 0, fmt.Errorf("fake: id %d is not %s's: %w", info.ID, uuid, syscall.EINVAL)
	}
	if !known {
		r.next++
		id = r.next
		r.ids[uuid] = id
	}
	info.ID = id
	r.infos[id] = info
	r.beats[id]++
	return id, nil
}

func (r *fakeRegistry) snapshot() (map[proto.TargetID]proto.TargetInfo, map[proto.TargetID]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	infos := make(map[proto.TargetID]proto.TargetInfo, len(r.infos))
	beats := make(map[proto.TargetID]int, len(r.beats))
	for k, v := range r.infos {
		infos[k] = v
	}
	for k, v := range r.beats {
		beats[k] = v
	}
	return infos, beats
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute) // a hang guard
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// startRun runs Run in the background and returns a func that stops it and
// returns its error.
func startRun(t *testing.T, cfg Config) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(5 * time.Minute):
				err = errors.New("Run did not return after cancel")
			}
		})
		return err
	}
	t.Cleanup(func() { stop() })
	return stop
}

func TestRunRegistersServesAndHeartbeats(t *testing.T) {
	root := t.TempDir()
	dirs := []string{filepath.Join(root, "t1"), filepath.Join(root, "t2")}
	reg := newFakeRegistry(3) // the meta server is "down" for the first calls
	log, logs := newLogger()
	cfg := Config{ListenAddr: "127.0.0.1:0", Targets: dirs, Registry: reg, HeartbeatInterval: 20 * time.Millisecond, Logger: log, Capacity: 1 << 30, AllowUnauthenticated: true}
	stop := startRun(t, cfg)
	waitFor(t, "two targets with heartbeats", func() bool {
		_, beats := reg.snapshot()
		n := 0
		for _, b := range beats {
			if b >= 3 {
				n++
			}
		}
		return n == 2
	})
	if !strings.Contains(logs.String(), "registration failed, retrying") {
		t.Fatalf("registration failures not logged:\n%s", logs.String())
	}
	infos, _ := reg.snapshot()

	pool := transport.NewPool(transport.NewTCP(), transport.PoolOptions{})
	defer pool.Close()
	client := storagerpc.NewClient(pool, func(ctx context.Context, id proto.TargetID) (string, error) {
		if info, ok := infos[id]; ok {
			return info.Addr, nil
		}
		return "", syscall.ENOENT
	})
	obj := proto.ObjectID{Ino: 5}
	for id, info := range infos {
		if info.Total != 1<<30 || !info.Up {
			t.Fatalf("target %d info %+v", id, info)
		}
		if _, err := client.Write(ctx, id, obj, 0, []byte(fmt.Sprint("target ", id))); err != nil {
			t.Fatal(err)
		}
	}
	for id := range infos {
		buf := make([]byte, 100)
		n, err := client.Read(ctx, id, obj, 0, buf)
		if err != nil || string(buf[:n]) != fmt.Sprint("target ", id) {
			t.Fatalf("read from %d: %q, %v", id, buf[:n], err)
		}
	}
	waitFor(t, "usage in a heartbeat", func() bool {
		infos, _ := reg.snapshot()
		for _, info := range infos {
			if info.Used != BlockSize {
				return false
			}
		}
		return true
	})
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}

	// Restart: same ids, served before the registry answers.
	reg.mu.Lock()
	reg.failures = reg.calls + 1000
	reg.mu.Unlock()
	stop = startRun(t, cfg)
	var addr string
	waitFor(t, "a listening server", func() bool {
		return strings.Contains(logs.String(), "storage: serving") && strings.Count(logs.String(), "storage: serving") == 2
	})
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "storage: serving") {
			_, a, _ := strings.Cut(line, "advertise=")
			addr, _, _ = strings.Cut(a, " ")
		}
	}
	for id := range infos {
		buf := make([]byte, 100)
		n, err := storagerpc.NewClient(pool, func(context.Context, proto.TargetID) (string, error) { return addr, nil }).Read(ctx, id, obj, 0, buf)
		if err != nil || string(buf[:n]) != fmt.Sprint("target ", id) {
			t.Fatalf("read from %d after restart: %q, %v", id, buf[:n], err)
		}
	}
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

func TestRunRefusedID(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "t1")
	reg := newFakeRegistry(0)
	stop := startRun(t, Config{ListenAddr: "127.0.0.1:0", Targets: []string{dir}, Registry: reg, HeartbeatInterval: 10 * time.Millisecond})
	waitFor(t, "registration", func() bool { _, b := reg.snapshot(); return len(b) == 1 })
	stop()
	// A registry that does not know the target (a different metadata
	// server) refuses its stored id: Run fails.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	err := Run(ctx, Config{ListenAddr: "127.0.0.1:0", Targets: []string{dir}, Registry: newFakeRegistry(0)})
	if !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("Run with a refused id: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	root := t.TempDir()
	file := filepath.Join(root, "file")
	os.WriteFile(file, nil, 0o644)
	reg := newFakeRegistry(0)
	good := Config{ListenAddr: "127.0.0.1:0", Registry: reg, Targets: []string{filepath.Join(root, "a")}}
	tests := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"ok", func(*Config) {}, ""},
		{"no targets", func(c *Config) { c.Targets = nil }, "no targets"},
		{"missing parent", func(c *Config) { c.Targets = []string{filepath.Join(root, "no", "t")} }, "parent directory"},
		{"duplicate", func(c *Config) { c.Targets = []string{filepath.Join(root, "a"), root + "/./a"} }, "given twice"},
		{"target is a file", func(c *Config) { c.Targets = []string{file} }, "not a directory"},
		{"no listen address", func(c *Config) { c.ListenAddr = "" }, "listen address"},
		{"no meta address", func(c *Config) { c.Registry = nil }, "metadata server"},
		{"negative heartbeat", func(c *Config) { c.HeartbeatInterval = -time.Second }, "heartbeat"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := good
			cfg.Targets = append([]string(nil), good.Targets...)
			tc.mod(&cfg)
			got, err := cfg.validate()
			if tc.want == "" {
				if err != nil || got.HeartbeatInterval != DefaultHeartbeatInterval {
					t.Fatalf("validate = %+v, %v", got, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "storage: ") {
				t.Fatalf("validate error %v, want %q", err, tc.want)
			}
		})
	}
}

// TestRunOverMetaRPC registers through the real metarpc client: a fake
// registry behind metarpc's handler on TCP, and Run given only MetaAddr.
// The meta server comes up after the storage server.
func TestRunOverMetaRPC(t *testing.T) {
	reg := newFakeRegistry(0)
	tcp := transport.NewTCP()
	// Reserve an address, then start the meta side late.
	ln, err := tcp.Listen("127.0.0.1:0", func(context.Context, uint16, []byte) ([]byte, error) { return nil, syscall.EIO })
	if err != nil {
		t.Fatal(err)
	}
	metaAddr := ln.Addr()
	ln.Close()
	stop := startRun(t, Config{ListenAddr: "127.0.0.1:0", MetaAddr: metaAddr, Targets: []string{filepath.Join(t.TempDir(), "t")}, HeartbeatInterval: 20 * time.Millisecond})
	time.Sleep(150 * time.Millisecond)
	ln, err = tcp.Listen(metaAddr, metarpc.NewHandler(nil, reg, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	waitFor(t, "registration over metarpc", func() bool { _, b := reg.snapshot(); return len(b) == 1 && b[101] >= 2 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// TestRunPortInUseFormatsNothing: a server whose port is taken fails
// before it formats a new target directory.
func TestRunPortInUseFormatsNothing(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	dir := filepath.Join(t.TempDir(), "t1")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = Run(ctx, Config{ListenAddr: busy.Addr().String(), Targets: []string{dir}, Registry: newFakeRegistry(0)})
	if err == nil || !strings.Contains(err.Error(), "listen on") {
		t.Fatalf("Run on a busy port: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("target directory made before the listen failed: %v", err)
	}
}

// gatedLockFS holds every target lock (OpenTarget's first step) until gate
// is closed: a restarted server whose targets take long to open.
type gatedLockFS struct {
	vfs.FS
	gate chan struct{}
}

func (f gatedLockFS) Lock(name string) (io.Closer, error) {
	<-f.gate
	return f.FS.Lock(name)
}

// TestRunRequestsWaitForTargets: a request that reaches a restarted server
// while its targets are still being opened (it listens first) waits for
// them and is served, instead of being told the target is unknown
// (ESTALE), which under load a reader of the restarted server's file saw
// (TestECCrossMountPartialWrites: "storage: unknown target 1").
func TestRunRequestsWaitForTargets(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "t")
	reg := newFakeRegistry(0)
	stop := startRun(t, Config{ListenAddr: "127.0.0.1:0", Targets: []string{dir}, Registry: reg, HeartbeatInterval: 20 * time.Millisecond, AllowUnauthenticated: true})
	var id proto.TargetID
	var addr string
	waitFor(t, "the target registered and served", func() bool {
		infos, beats := reg.snapshot() // served once registered: after a second call
		for i, info := range infos {
			id, addr = i, info.Addr
		}
		return id != 0 && beats[id] >= 2
	})
	pool := transport.NewPool(transport.NewTCP(), transport.PoolOptions{})
	defer pool.Close()
	client := storagerpc.NewClient(pool, func(context.Context, proto.TargetID) (string, error) { return addr, nil })
	obj := proto.ObjectID{Ino: 7}
	if _, err := client.Write(ctx, id, obj, 0, []byte("before the restart")); err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}

	fs := gatedLockFS{FS: vfs.Default, gate: make(chan struct{})}
	stop = startRun(t, Config{ListenAddr: addr, Targets: []string{dir}, Registry: reg, HeartbeatInterval: 20 * time.Millisecond, AllowUnauthenticated: true, FS: fs})
	var opened sync.Once
	open := func() { opened.Do(func() { close(fs.gate) }) }
	t.Cleanup(open) // before stop (cleanups run last first): Run waits for the lock
	waitFor(t, "the restarted server listening", func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	type result struct {
		data string
		err  error
	}
	read := make(chan result, 1)
	go func() {
		buf := make([]byte, 100)
		n, err := client.Read(ctx, id, obj, 0, buf)
		read <- result{string(buf[:n]), err}
	}()
	// How long the opening takes only decides whether a wrong answer
	// comes before it ends; a right one waits for it whatever it is.
	select {
	case r := <-read:
		t.Fatalf("a read while the target was being opened returned %q, %v: want it to wait for the target", r.data, r.err)
	case <-time.After(100 * time.Millisecond):
	}
	open()
	if r := <-read; r.err != nil || r.data != "before the restart" {
		t.Fatalf("read once the target is open: %q, %v", r.data, r.err)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// gatedRegistry records a new target's registration at once but holds its
// reply until the gate opens: the moment in which the metadata service
// already places files on the target and its server does not know the id.
type gatedRegistry struct {
	*fakeRegistry
	gate     chan struct{}
	recorded chan proto.TargetInfo
}

func (r *gatedRegistry) RegisterTarget(ctx context.Context, uuid string, info proto.TargetInfo) (proto.TargetID, error) {
	id, err := r.fakeRegistry.RegisterTarget(ctx, uuid, info)
	if err == nil && info.ID == 0 {
		info.ID = id
		r.recorded <- info
		<-r.gate
	}
	return id, err
}

// TestRunRequestsWaitForRegistration: a client that learns a new target's
// id from the metadata service before the registration's reply reaches the
// storage server has its request wait for that reply and served, not told
// the target is unknown (TestHAPartitionLeader: a mount's write to a
// target registered 70 ms earlier failed "storage: unknown target 1").
func TestRunRequestsWaitForRegistration(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "t")
	reg := &gatedRegistry{fakeRegistry: newFakeRegistry(0), gate: make(chan struct{}), recorded: make(chan proto.TargetInfo, 1)}
	var opened sync.Once
	open := func() { opened.Do(func() { close(reg.gate) }) }
	stop := startRun(t, Config{ListenAddr: "127.0.0.1:0", Targets: []string{dir}, Registry: reg, HeartbeatInterval: 20 * time.Millisecond, AllowUnauthenticated: true})
	t.Cleanup(open) // before stop (cleanups run last first): the registration holds Run
	var info proto.TargetInfo
	select {
	case info = <-reg.recorded:
	case <-time.After(2 * time.Minute): // a hang guard
		t.Fatal("the target never registered")
	}
	pool := transport.NewPool(transport.NewTCP(), transport.PoolOptions{})
	defer pool.Close()
	client := storagerpc.NewClient(pool, func(context.Context, proto.TargetID) (string, error) { return info.Addr, nil })
	obj := proto.ObjectID{Ino: 9}
	wrote := make(chan error, 1)
	go func() {
		_, err := client.Write(ctx, info.ID, obj, 0, []byte("placed at once"))
		wrote <- err
	}()
	unknown := make(chan error, 1)
	go func() {
		_, err := client.Read(ctx, info.ID+1, obj, 0, make([]byte, 10))
		unknown <- err
	}()
	select {
	case err := <-wrote:
		t.Fatalf("a write before the registration's reply returned %v: want it to wait for the reply", err)
	case <-time.After(100 * time.Millisecond):
	}
	open()
	if err := <-wrote; err != nil {
		t.Fatalf("write once registered: %v", err)
	}
	if err := <-unknown; !errors.Is(err, syscall.ESTALE) {
		t.Fatalf("read of a target the reply did not name: %v, want ESTALE", err)
	}
	buf := make([]byte, 100)
	if n, err := client.Read(ctx, info.ID, obj, 0, buf); err != nil || string(buf[:n]) != "placed at once" {
		t.Fatalf("read back: %q, %v", buf[:n], err)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}
