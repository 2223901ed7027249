package testcluster

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/weft-fs/weft/auth"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Options describe the cluster to start. Zero values take the defaults.
type Options struct {
	Servers  int    // `weft storage` processes (default 1)
	Targets  int    // storage targets in total, spread round-robin over the servers (default 4)
	Capacity string // per-target --capacity ("" = what the disk has)
	Mounts   int    // `weft mount` mounts (default 1; -1 for none)
	// Timeout is the mounts' --timeout (default DefaultTimeout). A test
	// about what a mount does when a server does not answer sets a short
	// one; the default only guards against hangs.
	Timeout    string
	CacheLimit string        // mount --cache-limit ("" = weft's default)
	Ready      time.Duration // how long to wait for processes to come up (default 60s)
	MountArgs  []string      // extra `weft mount` flags

	// NetNS runs every storage server in a network namespace of its own,
	// linked to the host by a veth pair, so that PartitionStorage can cut
	// it off while it keeps running (see netns.go). The metadata server
	// then listens on every address (0.0.0.0) to be reachable from the
	// namespaces; MetaAddr stays a loopback address.
	NetNS    bool
	MetaArgs []string // extra `weft meta` flags
	// MetaReplicas, above 1, runs a replicated metadata group of that
	// many `weft meta --id --peers` members instead of one server
	// (replicas.go); clients get every member's address. Not with NetNS.
	MetaReplicas int
	// MetaNetNS runs each member of the metadata group in a network
	// namespace of its own (metanetns.go), so that PartitionMetaMember can
	// cut one off while it runs. Needs MetaReplicas.
	MetaNetNS   bool
	StorageArgs []string // extra `weft storage` flags
	// LocalReads gives every storage server a local socket
	// (--local-socket DIR/run/storage-<i>.sock), so mounts read the
	// objects of its targets from their files (storage/localread).
	LocalReads bool
}

// DefaultTimeout is the mounts' RPC timeout unless Options.Timeout says
// otherwise: far above what a live server takes on a loaded machine. With
// 3 s, a storage server's fsync on a disk shared with parallel tests and
// other writers went unanswered in time (a mirror copy was then marked
// stale; an unprotected file's write would have failed with ETIMEDOUT).
const DefaultTimeout = "60s"

func (o *Options) fill() {
	if o.Servers <= 0 {
		o.Servers = 1
	}
	if o.Targets <= 0 {
		o.Targets = 4
	}
	if o.Targets < o.Servers {
		o.Targets = o.Servers
	}
	if o.Mounts == 0 {
		o.Mounts = 1
	}
	if o.Mounts < 0 {
		o.Mounts = 0
	}
	if o.Timeout == "" {
		o.Timeout = DefaultTimeout
	}
	if o.Ready <= 0 {
		o.Ready = 60 * time.Second
	}
}

// proc is one weft child process, restartable with the same arguments.
type proc struct {
	name  string
	addr  string // listen address, "" for mounts
	netns string // network namespace to run in ("" = the test's)
	args  func() []string
	log   string

	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	err  error         // cmd.Wait's result, valid after done
}

func (p *proc) running() bool {
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Cluster is a running weft cluster. Its methods are meant to be called from
// the test's goroutine.
type Cluster struct {
	t    testing.TB
	opts Options
	bin  string
	dir  string

	mu       sync.Mutex
	meta     *proc   // the metadata server, or the first member of a group
	metas    []*proc // every metadata server (meta alone, or the group's members)
	storage  []*proc
	targets  [][]string // target dirs of each storage server
	mounts   []*proc
	mntPaths []string
	nets     *netns    // set when opts.NetNS
	metaNets *metaNets // set when opts.MetaNetNS
}

// Start builds weft if needed, starts a cluster as opts describe and waits
// until every mount is live and every target is up. Everything is torn down
// in t.Cleanup.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Fatalf("testcluster: /dev/fuse is missing (%v): weft's integration tests need FUSE; install fuse3 (scripts/install-deps.sh)", err)
	}
	if _, err := exec.LookPath("fusermount3"); err != nil {
		t.Fatalf("testcluster: fusermount3 not found: install fuse3 (scripts/install-deps.sh)")
	}
	opts.fill()
	c := &Cluster{t: t, opts: opts, bin: Binary(t)}
	dir, err := os.MkdirTemp("", "weft-it-")
	if err != nil {
		t.Fatal(err)
	}
	c.dir = dir
	// Other users (pjdfstest, permission tests) must reach the mountpoints.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"logs", "meta"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(c.cleanup)
	// One key set per cluster; every process gets the bundle of its role.
	if err := auth.GenerateCluster(filepath.Join(dir, "keys")); err != nil {
		t.Fatal(err)
	}

	if opts.MetaReplicas > 1 {
		if opts.NetNS {
			t.Fatal("testcluster: MetaReplicas with NetNS is not supported yet")
		}
		c.setupReplicas()
	} else if opts.MetaNetNS {
		t.Fatal("testcluster: MetaNetNS needs MetaReplicas")
	} else {
		c.meta = &proc{name: "meta", addr: freeAddr(t), log: c.logPath("meta")}
		c.meta.args = func() []string {
			a := []string{"meta", "--listen", c.metaListen(), "--data", filepath.Join(c.dir, "meta"), "--keys", c.Keys("meta")}
			return append(a, c.opts.MetaArgs...)
		}
		c.metas = []*proc{c.meta}
	}
	c.targets = make([][]string, opts.Servers)
	for i := 0; i < opts.Targets; i++ {
		td := filepath.Join(dir, fmt.Sprintf("target-%d", i))
		if err := os.MkdirAll(td, 0o755); err != nil {
			t.Fatal(err)
		}
		c.targets[i%opts.Servers] = append(c.targets[i%opts.Servers], td)
	}
	if opts.NetNS {
		c.setupNetNS()
	}
	for i := 0; i < opts.Servers; i++ {
		i := i
		p := &proc{name: fmt.Sprintf("storage-%d", i), addr: freeAddr(t), log: c.logPath(fmt.Sprintf("storage-%d", i))}
		if c.nets != nil {
			p.addr, p.netns = c.nets.storageAddr(i), c.nets.name(i)
		}
		if c.metaNets != nil {
			// Members in namespaces reach the host at its bridge address.
			_, port, _ := net.SplitHostPort(p.addr)
			p.addr = net.JoinHostPort(c.metaNets.hostIP(), port)
		}
		p.args = func() []string {
			a := []string{"storage", "--listen", p.addr, "--meta", c.storageMetaAddr(i), "--keys", c.Keys("storage")}
			for _, td := range c.targets[i] {
				a = append(a, "--target", td)
			}
			if c.opts.Capacity != "" {
				a = append(a, "--capacity", c.opts.Capacity)
			}
			if c.opts.LocalReads {
				a = append(a, "--local-socket", c.LocalSocket(i))
			}
			return append(a, c.opts.StorageArgs...)
		}
		c.storage = append(c.storage, p)
	}

	for _, m := range c.metas {
		// A group's members name each other's ports: they keep theirs.
		c.startListener(m, len(c.metas) == 1)
	}
	for i := range c.storage {
		c.StartStorage(i)
	}
	for i := 0; i < opts.Mounts; i++ {
		c.AddMount()
	}
	return c
}

func (c *Cluster) logPath(name string) string { return filepath.Join(c.dir, "logs", name+".log") }

// Keys returns the directory of the cluster's key bundle for role (meta,
// storage, client; "ca" is the CA), for processes a test starts itself.
func (c *Cluster) Keys(role string) string { return filepath.Join(c.dir, "keys", role) }

// GenerateKeys makes a cluster key set in a temporary directory removed at
// cleanup and returns it: bundles in DIR/meta, DIR/storage, DIR/client, the
// CA in DIR/ca. For tests that start weft processes without a Cluster.
func GenerateKeys(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "keys")
	if err := auth.GenerateCluster(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Dir is the cluster's temporary directory (meta/, target-*/, mnt-*/, logs/).
func (c *Cluster) Dir() string { return c.dir }

// LocalSocket is the path of storage server i's local socket (with
// Options.LocalReads).
func (c *Cluster) LocalSocket(i int) string {
	return filepath.Join(c.dir, "run", fmt.Sprintf("storage-%d.sock", i))
}

// Bin is the path of the weft binary.
func (c *Cluster) Bin() string { return c.bin }

// MetaAddr is the metadata server's address.
// With MetaReplicas, it is every member's address, comma-separated, as
// clients take it.
func (c *Cluster) MetaAddr() string {
	addrs := make([]string, len(c.metas))
	for i, m := range c.metas {
		addrs[i] = m.addr
	}
	return strings.Join(addrs, ",")
}

// StorageAddr is the address of storage server i.
func (c *Cluster) StorageAddr(i int) string { return c.storage[i].addr }

// NumTargets is the number of storage targets.
func (c *Cluster) NumTargets() int { return c.opts.Targets }

// TargetDirs returns the target directories of storage server i.
func (c *Cluster) TargetDirs(i int) []string { return append([]string(nil), c.targets[i]...) }

// AllTargetDirs returns every target directory.
func (c *Cluster) AllTargetDirs() []string {
	var all []string
	for _, ts := range c.targets {
		all = append(all, ts...)
	}
	return all
}

// Mount returns the path of mount i.
func (c *Cluster) Mount(i int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mntPaths[i]
}

// NumMounts is the number of mounts started so far.
func (c *Cluster) NumMounts() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.mounts)
}

// Log returns the log of a process: "meta", "storage-<i>" or "mount-<i>".
func (c *Cluster) Log(name string) string {
	b, _ := os.ReadFile(c.logPath(name))
	return string(b)
}

// start launches p and returns without waiting for readiness.
func (c *Cluster) start(p *proc) error {
	if p.running() {
		return fmt.Errorf("testcluster: %s is already running", p.name)
	}
	lf, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	args := p.args()
	fmt.Fprintf(lf, "=== %s: weft %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(args, " "))
	cmd := exec.Command(c.bin, args...)
	if p.netns != "" {
		cmd = exec.Command("ip", append([]string{"netns", "exec", p.netns, c.bin}, args...)...)
	}
	cmd.Stdout = lf
	cmd.Stderr = lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return fmt.Errorf("testcluster: start %s: %w", p.name, err)
	}
	p.cmd = cmd
	p.done = make(chan struct{})
	done := p.done
	go func() {
		p.err = cmd.Wait()
		lf.Close()
		close(done)
	}()
	return nil
}

// startListener starts a process that listens on p.addr and waits until
// the address accepts connections. A port taken by someone else since we
// picked it is replaced by a fresh one when allowNewPort (first start only).
func (c *Cluster) startListener(p *proc, allowNewPort bool) {
	c.t.Helper()
	for attempt := 0; ; attempt++ {
		if err := c.start(p); err != nil {
			c.t.Fatal(err)
		}
		err := waitFor(c.opts.Ready, p, func() bool {
			conn, err := net.DialTimeout("tcp", p.addr, time.Second)
			if err != nil {
				return false
			}
			conn.Close()
			return true
		})
		if err == nil {
			return
		}
		inUse := strings.Contains(strings.ToLower(tail(p.log, 20)), "address already in use")
		if inUse && attempt < 5 {
			c.kill(p)
			if allowNewPort {
				p.addr = freeAddr(c.t)
			} else {
				time.Sleep(500 * time.Millisecond)
			}
			continue
		}
		c.t.Fatalf("testcluster: %s did not come up on %s: %v\n%s", p.name, p.addr, err, tail(p.log, 40))
	}
}

// waitFor polls ok until it returns true, p exits, or d passes.
func waitFor(d time.Duration, p *proc, ok func() bool) error {
	deadline := time.Now().Add(d)
	for {
		if ok() {
			if p != nil && !p.running() {
				return fmt.Errorf("process exited: %v", p.err)
			}
			return nil
		}
		if p != nil {
			select {
			case <-p.done:
				return fmt.Errorf("process exited: %v", p.err)
			default:
			}
		}
		if time.Now().After(deadline) {
			return errors.New("timed out")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// StartMeta starts (or restarts) the metadata server on its address.
func (c *Cluster) StartMeta() {
	c.t.Helper()
	c.startListener(c.meta, c.meta.cmd == nil)
}

// StopMeta SIGKILLs the metadata server.
func (c *Cluster) StopMeta() { c.kill(c.meta) }

// StartStorage starts (or restarts) storage server i on its address and
// target directories.
func (c *Cluster) StartStorage(i int) {
	c.t.Helper()
	c.startListener(c.storage[i], c.storage[i].cmd == nil)
}

// StopStorage SIGKILLs storage server i.
func (c *Cluster) StopStorage(i int) { c.kill(c.storage[i]) }

// FreezeStorage stops storage server i with SIGSTOP: its connections stay
// open but nothing answers, the failure only timeouts can detect.
// ThawStorage (SIGCONT) resumes it.
func (c *Cluster) FreezeStorage(i int) { c.signal(c.storage[i], syscall.SIGSTOP) }

// ThawStorage resumes a storage server stopped by FreezeStorage.
func (c *Cluster) ThawStorage(i int) { c.signal(c.storage[i], syscall.SIGCONT) }

// FreezeMeta and ThawMeta do the same to the metadata server.
func (c *Cluster) FreezeMeta() { c.signal(c.meta, syscall.SIGSTOP) }

// ThawMeta resumes the metadata server stopped by FreezeMeta.
func (c *Cluster) ThawMeta() { c.signal(c.meta, syscall.SIGCONT) }

// signal sends sig to p. A SIGSTOP returns once every thread of p is
// stopped, so what the test does next meets a frozen process (the kernel
// delivers the stop to each thread on its own way back to user space);
// freezing a process that is not running fails the test instead of
// letting it go on against a live one.
func (c *Cluster) signal(p *proc, sig syscall.Signal) {
	c.t.Helper()
	if !p.running() {
		if sig == syscall.SIGSTOP {
			c.t.Fatalf("testcluster: cannot freeze %s: not running (%v)", p.name, p.err)
		}
		return
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		c.t.Fatalf("testcluster: %v to %s: %v", sig, p.name, err)
	}
	if sig != syscall.SIGSTOP {
		return
	}
	err := waitFor(c.opts.Ready, nil, func() bool { return allStopped(p.cmd.Process.Pid) })
	if err != nil {
		c.t.Fatalf("testcluster: %s (pid %d) not stopped after SIGSTOP: %v", p.name, p.cmd.Process.Pid, err)
	}
}

// allStopped reports whether every thread of pid is in the stopped state
// (T in /proc/PID/task/TID/stat).
func allStopped(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		i := bytes.LastIndexByte(b, ')')
		if err != nil || i < 0 || i+2 >= len(b) || b[i+2] != 'T' {
			return false
		}
	}
	return true
}

// AddMount starts one more `weft mount` on a new mountpoint, waits until it
// is live and sees every target up, and returns its index.
func (c *Cluster) AddMount() int {
	c.t.Helper()
	return c.addMount(c.opts.Targets, true)
}

// AddMountUp is AddMount for a cluster that lost targets: it waits until
// the new mount sees up targets up (of any number listed).
func (c *Cluster) AddMountUp(up int) int {
	c.t.Helper()
	return c.addMount(up, false)
}

func (c *Cluster) addMount(up int, exact bool) int {
	c.t.Helper()
	c.mu.Lock()
	i := len(c.mounts)
	mnt := filepath.Join(c.dir, fmt.Sprintf("mnt-%d", i))
	p := &proc{name: fmt.Sprintf("mount-%d", i), log: c.logPath(fmt.Sprintf("mount-%d", i))}
	p.args = func() []string {
		a := []string{"mount", "--meta", c.MetaAddr(), "--timeout", c.opts.Timeout, "--allow-other", "--keys", c.Keys("client")}
		if c.opts.CacheLimit != "" {
			a = append(a, "--cache-limit", c.opts.CacheLimit)
		}
		a = append(a, c.opts.MountArgs...)
		return append(a, mnt)
	}
	c.mounts = append(c.mounts, p)
	c.mntPaths = append(c.mntPaths, mnt)
	c.mu.Unlock()
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		c.t.Fatal(err)
	}
	c.startMountUp(i, up, exact)
	return i
}

func (c *Cluster) startMount(i int) {
	c.t.Helper()
	c.startMountUp(i, c.opts.Targets, true)
}

func (c *Cluster) startMountUp(i, up int, exact bool) {
	c.t.Helper()
	p, mnt := c.mounts[i], c.mntPaths[i]
	unmount(mnt) // a mount left by a killed daemon answers ENOTCONN
	if err := c.start(p); err != nil {
		c.t.Fatal(err)
	}
	if err := waitFor(c.opts.Ready, p, func() bool { return isFuseMount(mnt) }); err != nil {
		c.t.Fatalf("testcluster: %s did not mount %s: %v\n%s", p.name, mnt, err, tail(p.log, 40))
	}
	c.waitTargetsUp(up, exact)
}

// StopMount SIGKILLs mount i and lazily unmounts its mountpoint.
func (c *Cluster) StopMount(i int) {
	c.kill(c.mounts[i])
	unmount(c.mntPaths[i])
}

// FreezeMount SIGSTOPs mount i (its file system hangs until ThawMount):
// a client that stops answering without exiting.
func (c *Cluster) FreezeMount(i int) { c.signal(c.mounts[i], syscall.SIGSTOP) }

// ThawMount SIGCONTs mount i.
func (c *Cluster) ThawMount(i int) { c.signal(c.mounts[i], syscall.SIGCONT) }

// StartMount restarts mount i after StopMount or KillAll.
func (c *Cluster) StartMount(i int) {
	c.t.Helper()
	c.startMount(i)
}

// WaitTargetsUp waits until user.weft.df, read through a live mount,
// lists n targets that are all up.
func (c *Cluster) WaitTargetsUp(n int) {
	c.t.Helper()
	c.waitTargetsUp(n, true)
}

// waitTargetsUp waits until n targets are up; with exact, until exactly n
// are listed and all are up.
func (c *Cluster) waitTargetsUp(n int, exact bool) {
	c.t.Helper()
	mnt := ""
	c.mu.Lock()
	for i, p := range c.mounts {
		if p.running() {
			mnt = c.mntPaths[i]
			break
		}
	}
	c.mu.Unlock()
	if mnt == "" {
		c.t.Fatal("testcluster: WaitTargetsUp needs a live mount")
	}
	var last string
	err := waitFor(c.opts.Ready, nil, func() bool {
		ts, err := callTimeout(5*time.Second, func() ([]TargetInfo, error) { return DF(mnt) })
		if err != nil {
			last = err.Error()
			return false
		}
		up := 0
		for _, ti := range ts {
			if ti.Up {
				up++
			}
		}
		last = fmt.Sprintf("%d targets, %d up", len(ts), up)
		if !exact {
			return up >= n
		}
		return len(ts) == n && up == n
	})
	if err != nil {
		c.t.Fatalf("testcluster: waiting for %d targets up on %s: %v (last: %s)", n, mnt, err, last)
	}
}

// KillAll SIGKILLs every process of the cluster (meta, storage, mounts) and
// waits for them, as a power cut would stop them (minus the page cache).
func (c *Cluster) KillAll() {
	c.mu.Lock()
	procs := append(append([]*proc(nil), c.metas...), c.storage...)
	procs = append(procs, c.mounts...)
	c.mu.Unlock()
	for _, p := range procs {
		if p.running() {
			p.cmd.Process.Signal(syscall.SIGKILL)
		}
	}
	for _, p := range procs {
		c.kill(p)
	}
}

// Restart starts every process that is not running, on the same addresses
// and directories, and remounts every mount; it returns when all are ready.
func (c *Cluster) Restart() {
	c.t.Helper()
	for _, m := range c.metas {
		if !m.running() {
			c.startListener(m, false)
		}
	}
	for i, p := range c.storage {
		if !p.running() {
			c.StartStorage(i)
		}
	}
	for i := 0; i < c.NumMounts(); i++ {
		if !c.mounts[i].running() {
			c.startMount(i)
		}
	}
}

// kill SIGKILLs p if it runs and waits for it to exit.
func (c *Cluster) kill(p *proc) {
	if p == nil || p.cmd == nil {
		return
	}
	if p.running() {
		p.cmd.Process.Signal(syscall.SIGKILL)
	}
	<-p.done
}

// PIDs returns the process ids of the running processes by name.
func (c *Cluster) PIDs() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := map[string]int{}
	for _, p := range append(append(append([]*proc(nil), c.metas...), c.storage...), c.mounts...) {
		if p.running() {
			m[p.name] = p.cmd.Process.Pid
		}
	}
	return m
}

// Weft runs `weft args...` and returns its combined output.
func (c *Cluster) Weft(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, c.bin, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("weft %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

func (c *Cluster) cleanup() {
	c.mu.Lock()
	mnts := append([]string(nil), c.mntPaths...)
	procs := append(append([]*proc(nil), c.metas...), c.storage...)
	procs = append(procs, c.mounts...)
	c.mu.Unlock()
	for _, m := range mnts {
		unmount(m)
	}
	for _, p := range procs {
		c.kill(p)
	}
	c.teardownNetNS()
	if c.t.Failed() {
		for _, p := range procs {
			if p != nil {
				c.t.Logf("---- tail of %s log (%s) ----\n%s", p.name, p.log, tail(p.log, 80))
			}
		}
	}
	if os.Getenv("WEFT_KEEP") != "" {
		c.t.Logf("testcluster: keeping %s", c.dir)
		return
	}
	if err := os.RemoveAll(c.dir); err != nil {
		c.t.Logf("testcluster: removing %s: %v", c.dir, err)
	}
}

// unmount lazily unmounts mnt if something is mounted there.
func unmount(mnt string) {
	if !isMountpoint(mnt) {
		return
	}
	exec.Command("fusermount3", "-u", "-z", mnt).Run()
}

// mountinfo returns the filesystem type mounted at path, or "".
func mountType(path string) string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	typ := ""
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 || unescapeMountinfo(fields[4]) != path {
			continue
		}
		for j := 5; j < len(fields); j++ {
			if fields[j] == "-" && j+1 < len(fields) {
				typ = fields[j+1] // the last mount on path wins
			}
		}
	}
	return typ
}

func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isMountpoint(path string) bool { return mountType(path) != "" }
func isFuseMount(path string) bool  { return strings.HasPrefix(mountType(path), "fuse") }

// IsFuseMount reports whether a FUSE file system is mounted at path (in
// this process's mount namespace).
func IsFuseMount(path string) bool { return isFuseMount(path) }

// givenAddrs holds every address freeAddr has handed out in this test
// process: the kernel reuses a port once its probe listener is closed, so
// two servers of one cluster (or of two clusters of parallel tests) could
// otherwise be given the same port. The second then fails to bind while
// the readiness dial reaches the first and reports it up.
var givenAddrs struct {
	sync.Mutex
	m map[string]bool
}

// FreeAddr is freeAddr for tests that start processes of their own
// beside a cluster (a daemon's --metrics address, say): an address from
// it is never also given to a cluster's process.
func FreeAddr(t testing.TB) string { return freeAddr(t) }

// freeAddr picks a loopback port that is free now and was not handed out
// before in this process. It picks below the kernel's ephemeral range: a
// free port inside it can be taken by any outgoing connection before our
// server binds it, and a group member cannot move to another port (its
// peers name it). Another test process may still bind it first;
// startListener retries.
func freeAddr(t testing.TB) string {
	givenAddrs.Lock()
	defer givenAddrs.Unlock()
	if givenAddrs.m == nil {
		givenAddrs.m = map[string]bool{}
	}
	low := EphemeralLow()
	for i := 0; i < 10000; i++ {
		addr := "127.0.0.1:" + strconv.Itoa(10000+rand.IntN(low-10000))
		if givenAddrs.m[addr] {
			continue
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		l.Close()
		givenAddrs.m[addr] = true
		return addr
	}
	t.Fatal("testcluster: no free port below the ephemeral range")
	return ""
}

// EphemeralLow is the first port of the kernel's range for outgoing
// connections and port-0 listeners (32768 unless configured otherwise).
// Tests that choose ports for servers choose them below it.
func EphemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if f := strings.Fields(string(b)); err == nil && len(f) == 2 {
		if n, err := strconv.Atoi(f[0]); err == nil && n > 11000 {
			return n
		}
	}
	return 32768
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// callTimeout runs f and gives up waiting after d: a FUSE call may block
// until its daemon is killed, and a test must report that, not hang.
func callTimeout[T any](d time.Duration, f func() (T, error)) (T, error) {
	type res struct {
		v   T
		err error
	}
	ch := make(chan res, 1)
	go func() {
		v, err := f()
		ch <- res{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-time.After(d):
		var zero T
		return zero, fmt.Errorf("testcluster: no answer within %v", d)
	}
}

// TargetInfo is one entry of user.weft.df.
type TargetInfo struct {
	ID    uint32 `json:"id"`
	Addr  string `json:"addr"`
	Total uint64 `json:"total"`
	Used  uint64 `json:"used"`
	Free  uint64 `json:"free"`
	Up    bool   `json:"up"`
	// Objects stored, inodes left on its file system, and that file
	// system's identity.
	Objects   uint64 `json:"objects"`
	FilesFree uint64 `json:"files_free"`
	Device    string `json:"device"`
	// Domain is the failure domain: "server ADDR" or "domain NAME".
	Domain string `json:"domain"`
}

// Layout is the value of user.weft.layout.
type Layout struct {
	Kind        string   `json:"kind"`
	Mirror      int      `json:"mirror"`
	ECData      int      `json:"ec_k"`
	ECParity    int      `json:"ec_m"`
	StripeSize  uint64   `json:"stripe_size"`
	StripeCount int32    `json:"stripe_count"`
	Targets     []uint32 `json:"targets"`
	Stale       []uint32 `json:"stale"` // indices into Targets of copies that missed writes
}

// DF reads user.weft.df on path.
func DF(path string) ([]TargetInfo, error) {
	b, err := Getxattr(path, "user.weft.df")
	if err != nil {
		return nil, err
	}
	var ts []TargetInfo
	if err := json.Unmarshal(b, &ts); err != nil {
		return nil, fmt.Errorf("testcluster: user.weft.df %q: %w", b, err)
	}
	return ts, nil
}

// GetLayout reads user.weft.layout on path.
func GetLayout(path string) (Layout, error) {
	var l Layout
	b, err := Getxattr(path, "user.weft.layout")
	if err != nil {
		return l, err
	}
	if err := json.Unmarshal(b, &l); err != nil {
		return l, fmt.Errorf("testcluster: user.weft.layout %q: %w", b, err)
	}
	return l, nil
}

// Getxattr returns the whole value of an extended attribute.
func Getxattr(path, name string) ([]byte, error) {
	buf := make([]byte, 4096)
	for {
		n, err := unix.Getxattr(path, name, buf)
		if errors.Is(err, unix.EINTR) {
			continue // a signal to this thread interrupted the FUSE request: retry
		}
		if errors.Is(err, unix.ERANGE) {
			buf = make([]byte, 2*len(buf))
			continue
		}
		if err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
}
