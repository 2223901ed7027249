package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/weft-fs/weft/auth"
	"github.com/weft-fs/weft/internal/units"
	"github.com/weft-fs/weft/layout"
)

// upOptions are the settings of `weft up`.
type upOptions struct {
	Data     string
	Mount    string
	Targets  int
	Servers  int
	BasePort int
	LogLevel string // of the children
	Encrypt  bool   // every child encrypts its connections (--encrypt)
	Mirror   int    // copies the file system's default layout keeps (--mirror; 1: none)
	// MetaReplicas is 1 (one metadata server) or the members of a
	// replicated metadata group (3 or 5); RaftTick and ElectionTicks are
	// the group's raft timing.
	MetaReplicas  int
	RaftTick      units.Duration
	ElectionTicks int
	// MetaFollowerGoMaxProcs is each member's --follower-gomaxprocs (0:
	// as when leading, one per CPU); not used with one metadata server.
	MetaFollowerGoMaxProcs int
	// PprofPort, when not 0, serves each child's Go profiles on
	// 127.0.0.1: metadata server i (1-based) on PprofPort+i-1, storage server s on
	// PprofPort+10+s, the mount on PprofPort+20.
	PprofPort int
	// NoLocalReads: no local sockets for the storage servers, so the
	// mount reads everything over RPC (storage/localread).
	NoLocalReads bool
}

func newUpCmd() *cobra.Command {
	var o upOptions
	cmd := &cobra.Command{
		Use:   "up [--data DIR] [--mount MNT] [--targets N] [--servers S] [--mirror C] [--base-port P] [--meta-replicas 1|3|5]",
		Short: "Run a whole weft on this machine: meta, storage servers and a mount",
		Long: `Run a complete weft on this machine, in the foreground, as real processes
of this binary talking over TCP on 127.0.0.1:

  weft meta      R members of a replicated metadata group (--meta-replicas,
                 default 3) on BASE-PORT, +1, ..., databases in
                 DIR/meta-1 .. DIR/meta-R; with --meta-replicas 1 one
                 server on BASE-PORT, database in DIR/meta
  weft storage   S servers on BASE-PORT+10, +11, ..., holding the N
                 targets DIR/target-0 .. DIR/target-N-1 between them
  weft mount     at MNT

When a member of the metadata group dies, weft up says so and keeps the
rest running as long as a majority of the members runs (kill -9 the
leader to watch a failover); the dead member is not restarted. When a
storage server dies after weft up is up, it says so and keeps the rest
running while another storage server runs: mirrored and erasure-coded
files are served from their other copies or shards (kill -9 one to watch
degraded reads; scripts/bench-protect.sh does). It is not restarted.

Each process logs to DIR/logs/<name>.log. Once every target is up, weft up
prints where everything is, the per-target usage, and checks that a file
written through the mount reads back. Ctrl-C (or SIGTERM) unmounts and
stops everything; running weft up again on the same DIR brings every file
back.

On its first run weft up sets the file system's default layout (the root
directory's) to --mirror C copies (default 2, on distinct storage servers),
so every file survives the loss of one storage server; with the default 3
servers new files can still be created while one is down. --mirror 1 keeps
plain striping. weft setstripe on the mountpoint changes it later.

If any other process dies (the mount, a lone metadata server, the last
storage server, or any process before weft is up), weft up says which,
shows the end of its log, stops the others and exits non-zero.

--pprof-port P serves every process's Go profiles (net/http/pprof) on
127.0.0.1: metadata server i on P+i-1, storage server s on P+10+s, the
mount on P+20; for go tool pprof while a benchmark runs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.resolve(); err != nil {
				return err
			}
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("up: cannot find this binary: %w", err)
			}
			return runUp(ctx, exe, planUp(o), cmd.OutOrStdout())
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.Data, "data", "", "directory for all server data and logs (default $HOME/weft/data; created)")
	fs.StringVar(&o.Mount, "mount", "", "mountpoint (default $HOME/weft/mnt; created)")
	fs.IntVar(&o.Targets, "targets", 4, "number of storage targets")
	fs.IntVar(&o.Servers, "servers", 3, "number of storage server processes the targets are spread over")
	fs.IntVar(&o.Mirror, "mirror", 2, "copies of every file in the default layout, on distinct servers (1: no protection)")
	fs.IntVar(&o.BasePort, "base-port", 7400, "meta listens on this port, storage servers on base-port+10 and up")
	fs.StringVar(&o.LogLevel, "log-level", "info", "log level of the child processes (their logs are in DIR/logs)")
	fs.IntVar(&o.MetaReplicas, "meta-replicas", 3, "metadata servers: 1 (one server) or 3 or 5 (a replicated group that survives the loss of 1 or 2)")
	o.RaftTick = units.Duration(100 * time.Millisecond)
	fs.Var(&o.RaftTick, "raft-tick", "the metadata group's raft tick (weft meta --raft-tick)")
	fs.IntVar(&o.ElectionTicks, "election-ticks", 10, "the metadata group's election timeout in ticks (weft meta --election-ticks)")
	fs.IntVar(&o.MetaFollowerGoMaxProcs, "meta-follower-gomaxprocs", 1, "threads running Go code at once in a member of the metadata group while it follows (weft meta --follower-gomaxprocs; 0: one per CPU, as the leader). 1 by default: every process of the cluster shares this host, and a follower serves no clients and applies the leader's changes one at a time")
	fs.IntVar(&o.PprofPort, "pprof-port", 0, "serve each process's Go profiles (weft meta --pprof) on 127.0.0.1: metadata server i on this port +i-1, storage servers on +10 and up, the mount on +20 (default off)")
	fs.BoolVar(&o.NoLocalReads, "no-local-reads", false, "give the storage servers no local socket, so the mount reads every object over RPC (by default it reads them from their files, checking every block: short-circuit local reads)")
	fs.BoolVar(&o.Encrypt, "encrypt", false, "encrypt every connection between the processes (TLS; see docs/security.md for its cost)")
	return cmd
}

// resolve fills in the defaults and checks the options; it creates nothing.
func (o *upOptions) resolve() error {
	if o.Data == "" || o.Mount == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return fmt.Errorf("up: no home directory for the defaults (%v): give --data and --mount", err)
		}
		if o.Data == "" {
			o.Data = filepath.Join(home, "weft", "data")
		}
		if o.Mount == "" {
			o.Mount = filepath.Join(home, "weft", "mnt")
		}
	}
	var err error
	if o.Data, err = filepath.Abs(o.Data); err != nil {
		return err
	}
	if o.Mount, err = filepath.Abs(o.Mount); err != nil {
		return err
	}
	if o.Mount == o.Data || strings.HasPrefix(o.Mount, o.Data+string(filepath.Separator)) ||
		strings.HasPrefix(o.Data, o.Mount+string(filepath.Separator)) {
		return fmt.Errorf("--data %s and --mount %s must not contain each other", o.Data, o.Mount)
	}
	if o.Targets < 1 || o.Targets > 256 {
		return fmt.Errorf("--targets %d: want 1..256", o.Targets)
	}
	if o.Servers < 1 || o.Servers > o.Targets {
		return fmt.Errorf("--servers %d: want 1..%d (at most one server per target)", o.Servers, o.Targets)
	}
	if o.Mirror == 0 {
		o.Mirror = 1 // no protection
	}
	if o.Mirror < 1 || o.Mirror > layout.MaxMirror || o.Mirror > o.Servers {
		return fmt.Errorf("--mirror %d: want 1..%d, and at most --servers (%d): copies go to distinct servers", o.Mirror, min(layout.MaxMirror, o.Servers), o.Servers)
	}
	if o.MetaReplicas == 0 {
		o.MetaReplicas = 3
	}
	if o.RaftTick == 0 {
		o.RaftTick = units.Duration(100 * time.Millisecond)
	}
	if o.ElectionTicks == 0 {
		o.ElectionTicks = 10
	}
	if o.MetaReplicas != 1 && o.MetaReplicas != 3 && o.MetaReplicas != 5 {
		return fmt.Errorf("--meta-replicas %d: want 1, 3 or 5", o.MetaReplicas)
	}
	if o.MetaFollowerGoMaxProcs < 0 {
		return fmt.Errorf("--meta-follower-gomaxprocs %d: want 0 (one per CPU) or more", o.MetaFollowerGoMaxProcs)
	}
	if o.RaftTick <= 0 || o.ElectionTicks < 2 {
		return fmt.Errorf("--raft-tick must be positive and --election-ticks at least 2")
	}
	if err := checkMetaLayout(o.Data, o.MetaReplicas); err != nil {
		return err
	}
	if o.BasePort < 1 || o.BasePort+10+o.Servers-1 > 65535 {
		return fmt.Errorf("--base-port %d: the ports %d..%d must lie in 1..65535", o.BasePort, o.BasePort, o.BasePort+10+o.Servers-1)
	}
	if _, err := parseLevel(o.LogLevel); err != nil {
		return err
	}
	return nil
}

// childSpec is one process that weft up runs.
type childSpec struct {
	Name string   // meta, storage-0, ..., mount
	Args []string // arguments after the binary
	Addr string   // the address it listens on ("" for the mount)
	Log  string   // DIR/logs/<Name>.log
	Dirs []string // directories it needs (created before it starts)
}

// upPlan is everything weft up will start, in start order.
type upPlan struct {
	Data, Mount string
	MetaAddr    string // the metadata service: one address, or the group's, comma-separated
	Keys        string // DATA/keys: the cluster key set, made on first run
	Targets     int
	Mirror      int         // the default layout's copies, set on the first run
	Metas       []childSpec // one server, or the members of the group
	Storage     []childSpec
	Mounter     childSpec
}

// metaDirs returns the metadata directories weft up uses in data for
// replicas metadata servers.
func metaDirs(data string, replicas int) []string {
	if replicas == 1 {
		return []string{filepath.Join(data, "meta")}
	}
	dirs := make([]string, replicas)
	for i := range dirs {
		dirs[i] = filepath.Join(data, fmt.Sprintf("meta-%d", i+1))
	}
	return dirs
}

// checkMetaLayout refuses a --meta-replicas that does not match the
// metadata a data directory already holds: starting a group beside a
// single server's store (or the reverse) would start an empty file system
// and hide the files.
func checkMetaLayout(data string, replicas int) error {
	has := func(dir string) bool {
		ents, err := os.ReadDir(dir)
		return err == nil && len(ents) > 0
	}
	single := has(filepath.Join(data, "meta"))
	members := 0
	for i := 1; i <= 5; i++ {
		if has(filepath.Join(data, fmt.Sprintf("meta-%d", i))) {
			members = i
		}
	}
	switch {
	case replicas > 1 && single:
		return fmt.Errorf("--meta-replicas %d: %s holds the metadata of one server (%s); run with --meta-replicas 1, or use another --data",
			replicas, data, filepath.Join(data, "meta"))
	case members > 0 && members != replicas:
		return fmt.Errorf("--meta-replicas %d: %s holds the metadata of a group of %d (meta-1..meta-%d); run with --meta-replicas %d, or use another --data",
			replicas, data, members, members, members)
	}
	return nil
}

// planUp lays out the processes: target i goes to server i mod S, so the
// servers hold nearly equal shares and consecutive stripes of a file land on
// different servers.
func planUp(o upOptions) upPlan {
	logs := filepath.Join(o.Data, "logs")
	metaAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(o.BasePort))
	childFlags := []string{"--log-level", o.LogLevel} // flags every child takes
	if o.Encrypt {
		childFlags = append(childFlags, "--encrypt")
	}
	keys := filepath.Join(o.Data, "keys")
	p := upPlan{Data: o.Data, Mount: o.Mount, MetaAddr: metaAddr, Targets: o.Targets, Keys: keys, Mirror: o.Mirror}
	dirs := metaDirs(o.Data, max(o.MetaReplicas, 1))
	if len(dirs) == 1 {
		p.Metas = []childSpec{{
			Name: "meta",
			Args: append([]string{"meta", "--listen", metaAddr, "--data", dirs[0], "--keys", filepath.Join(keys, auth.ClusterMetaDir)}, childFlags...),
			Addr: metaAddr,
			Log:  filepath.Join(logs, "meta.log"),
			Dirs: dirs,
		}}
	} else {
		var peers, addrs []string
		for i := range dirs {
			a := net.JoinHostPort("127.0.0.1", strconv.Itoa(o.BasePort+i))
			peers = append(peers, fmt.Sprintf("%d=%s", i+1, a))
			addrs = append(addrs, a)
		}
		p.MetaAddr = strings.Join(addrs, ",")
		memberFlags := childFlags
		if o.MetaFollowerGoMaxProcs != 0 {
			memberFlags = append(slices.Clip(childFlags), "--follower-gomaxprocs", strconv.Itoa(o.MetaFollowerGoMaxProcs))
		}
		for i, d := range dirs {
			p.Metas = append(p.Metas, childSpec{
				Name: fmt.Sprintf("meta-%d", i+1),
				Args: append([]string{"meta", "--id", strconv.Itoa(i + 1), "--peers", strings.Join(peers, ","), "--data", d,
					"--keys", filepath.Join(keys, auth.ClusterMetaDir), "--raft-tick", o.RaftTick.String(),
					"--election-ticks", strconv.Itoa(o.ElectionTicks)}, memberFlags...),
				Addr: addrs[i],
				Log:  filepath.Join(logs, fmt.Sprintf("meta-%d.log", i+1)),
				Dirs: []string{d},
			})
		}
	}
	for s := range o.Servers {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(o.BasePort+10+s))
		c := childSpec{
			Name: fmt.Sprintf("storage-%d", s),
			Args: []string{"storage", "--listen", addr, "--meta", p.MetaAddr, "--keys", filepath.Join(keys, auth.ClusterStorageDir)},
			Addr: addr,
			Log:  filepath.Join(logs, fmt.Sprintf("storage-%d.log", s)),
		}
		for t := s; t < o.Targets; t += o.Servers {
			dir := filepath.Join(o.Data, fmt.Sprintf("target-%d", t))
			c.Args = append(c.Args, "--target", dir)
			c.Dirs = append(c.Dirs, dir)
		}
		// Short-circuit local reads for the mount (storage/local.go):
		// unless DATA's path is too long for a Unix socket's.
		if sock := filepath.Join(o.Data, "run", fmt.Sprintf("storage-%d.sock", s)); !o.NoLocalReads && len(sock) <= maxSocketPath {
			c.Args = append(c.Args, "--local-socket", sock)
		}
		c.Args = append(c.Args, childFlags...)
		p.Storage = append(p.Storage, c)
	}
	p.Mounter = childSpec{
		Name: "mount",
		Args: append([]string{"mount", "--meta", p.MetaAddr, "--keys", filepath.Join(keys, auth.ClusterClientDir),
			"--allow-other=" + strconv.FormatBool(allowOtherPossible())}, append(childFlags, o.Mount)...),
		Log:  filepath.Join(logs, "mount.log"),
		Dirs: []string{o.Mount},
	}
	if o.PprofPort != 0 {
		pprof := func(c *childSpec, off int) {
			c.Args = append([]string{c.Args[0], "--pprof", net.JoinHostPort("127.0.0.1", strconv.Itoa(o.PprofPort+off))}, c.Args[1:]...)
		}
		for i := range p.Metas {
			pprof(&p.Metas[i], i)
		}
		for s := range p.Storage {
			pprof(&p.Storage[s], 10+s)
		}
		pprof(&p.Mounter, 20)
	}
	return p
}

// ensureKeys makes the cluster key set in dir on first run and reuses it
// afterwards (a half-made set is an error that says what to remove).
func ensureKeys(dir string, out io.Writer) error {
	_, err := os.Stat(filepath.Join(dir, auth.ClusterCADir, auth.CACertFile))
	if err == nil {
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("up: %w", err)
	}
	if err := auth.GenerateCluster(dir); err != nil {
		return fmt.Errorf("up: making the cluster keys: %w (remove %s to start over)", err, dir)
	}
	fmt.Fprintf(out, "up: made the cluster's keys in %s\n", dir)
	return nil
}

// allowOtherPossible reports whether FUSE will accept allow_other for us:
// always for root, otherwise only with user_allow_other in /etc/fuse.conf.
func allowOtherPossible() bool {
	if os.Geteuid() == 0 {
		return true
	}
	b, err := os.ReadFile("/etc/fuse.conf")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(line) == "user_allow_other" {
			return true
		}
	}
	return false
}

// checkPortsFree fails, naming the port, if any listen address is taken.
func checkPortsFree(addrs []string) error {
	for _, a := range addrs {
		l, err := net.Listen("tcp", a)
		if err != nil {
			_, port, _ := net.SplitHostPort(a)
			return fmt.Errorf("up: %s is already in use (another weft up? see: ss -ltnp 'sport = :%s'); stop it or pick other ports with --base-port", a, port)
		}
		l.Close()
	}
	return nil
}

// lockData takes the lock of weft up on data (DATA/up.lock, with this
// process's pid in it), so that a second weft up on the same data stops
// at once with a message naming the first, before it touches anything.
func lockData(data string) (unlock func(), err error) {
	if err := os.MkdirAll(data, 0o755); err != nil {
		return nil, fmt.Errorf("up: %w", err)
	}
	path := filepath.Join(data, "up.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("up: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		b, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("up: another weft up (pid %s) is running on %s; stop it (Ctrl-C there) first, or use another --data",
				strings.TrimSpace(string(b)), data)
		}
		return nil, fmt.Errorf("up: lock %s: %w", path, err)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return func() { f.Close() }, nil
}

// runUp starts the plan's processes, waits until the file system works,
// reports, and then supervises until ctx is cancelled or a child dies.
func runUp(ctx context.Context, exe string, p upPlan, out io.Writer) (err error) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return fmt.Errorf("up: /dev/fuse is missing: install and load FUSE (scripts/install-deps.sh; modprobe fuse)")
	}
	unlock, err := lockData(p.Data)
	if err != nil {
		return err
	}
	defer unlock()
	var addrs []string
	for _, s := range append(append([]childSpec(nil), p.Metas...), p.Storage...) {
		addrs = append(addrs, s.Addr)
	}
	if err := checkPortsFree(addrs); err != nil {
		return err
	}
	all := append(append(append([]childSpec(nil), p.Metas...), p.Storage...), p.Mounter)
	if err := os.MkdirAll(filepath.Dir(p.Mounter.Log), 0o755); err != nil {
		return fmt.Errorf("up: %w", err)
	}
	for _, c := range all {
		for _, d := range c.Dirs {
			if err := prepareDir(d, out); err != nil {
				return err
			}
		}
	}
	if err := checkMountpointFree(p.Mount); err != nil {
		return err
	}
	if err := ensureKeys(p.Keys, out); err != nil {
		return err
	}

	s := newSupervisor(exe, out, len(all))
	defer func() {
		s.stopAll(p.Mount)
		if err == nil {
			fmt.Fprintln(out, "weft up: stopped; everything is kept in", p.Data)
		}
	}()
	fmt.Fprintf(out, "weft up: data in %s, logs in %s\n", p.Data, filepath.Dir(p.Mounter.Log))

	for _, m := range p.Metas {
		if _, err := s.start(m); err != nil {
			return err
		}
	}
	for _, m := range p.Metas {
		if err := s.waitFor(ctx, m.Name+" to listen on "+m.Addr, 30*time.Second, func() (bool, error) {
			return dialable(m.Addr), nil
		}); err != nil {
			return s.interrupted(err)
		}
	}
	for _, sp := range p.Storage {
		if _, err := s.start(sp); err != nil {
			return err
		}
	}
	for _, sp := range p.Storage {
		if err := s.waitFor(ctx, sp.Name+" to listen on "+sp.Addr, 30*time.Second, func() (bool, error) {
			return dialable(sp.Addr), nil
		}); err != nil {
			return s.interrupted(err)
		}
	}
	if _, err := s.start(p.Mounter); err != nil {
		return err
	}
	if err := s.waitFor(ctx, "the mount at "+p.Mount, 30*time.Second, func() (bool, error) {
		return isFuseMount(p.Mount), nil
	}); err != nil {
		return s.interrupted(err)
	}
	var targets []targetJSON
	if err := s.waitFor(ctx, fmt.Sprintf("%d storage targets to be up", p.Targets), 60*time.Second, func() (bool, error) {
		ts, err := getDF(p.Mount)
		if err != nil {
			return false, err
		}
		targets = ts
		return summarize(ts).Up >= p.Targets, nil
	}); err != nil {
		return s.interrupted(err)
	}

	protection, err := protectDefault(p)
	if err != nil {
		return fmt.Errorf("up: set the default layout: %w", err)
	}
	printUpReport(out, p)
	fmt.Fprintf(out, "default layout: %s\n", protection)
	fmt.Fprintln(out)
	if err := printDF(out, p.Mount, targets); err != nil {
		return err
	}
	fmt.Fprintln(out)
	msg, err := readWriteCheck(p.Mount)
	if err != nil {
		return fmt.Errorf("up: write/read check through %s failed: %w", p.Mount, err)
	}
	fmt.Fprintln(out, msg)
	fmt.Fprintf(out, "\nweft is up. Try: weft getstripe FILE, weft setstripe -c 2 -S 4M DIR, weft df %s\n", p.Mount)
	fmt.Fprintf(out, "Health of the whole cluster: weft status --meta %s --keys %s\n", p.MetaAddr, filepath.Join(p.Keys, "client"))
	fmt.Fprintln(out, "Press Ctrl-C to unmount and stop (the data stays; weft up again brings it back).")

	for {
		select {
		case <-ctx.Done():
			fmt.Fprintln(out, "\nweft up: stopping")
			return nil
		case c := <-s.exited:
			if !s.survives(c, p) {
				return s.died(c)
			}
		}
	}
}

// survives reports whether the file system still works without c, which
// exited after weft up was up: a member of a metadata group, while a
// majority of the members runs, and a storage server, while another one
// runs (files with copies or shards elsewhere keep serving: that is what
// protection is for, and what a test of it kills). It says so, with the
// end of c's log. The mount and a lone metadata server are never
// survivable.
func (s *supervisor) survives(c *child, p upPlan) bool {
	if strings.HasPrefix(c.spec.Name, "storage-") {
		running := 0
		for _, ch := range s.children {
			if strings.HasPrefix(ch.spec.Name, "storage-") && ch.running() {
				running++
			}
		}
		if running == 0 {
			return false
		}
		fmt.Fprintf(s.out, "weft up: %s exited (%v); %d of %d storage servers run: files with a copy or shard there are served from the others (mirror, ec), RAID-0 ones fail until it runs again. The end of %s:\n%s",
			c.spec.Name, exitStatus(c.err), running, len(p.Storage), c.spec.Log, indent(logTail(c.spec.Log, 5)))
		return true
	}
	if len(p.Metas) < 2 || !strings.HasPrefix(c.spec.Name, "meta-") {
		return false
	}
	running := 0
	for _, ch := range s.children {
		if strings.HasPrefix(ch.spec.Name, "meta-") && ch.running() {
			running++
		}
	}
	if running <= len(p.Metas)/2 {
		fmt.Fprintf(s.out, "weft up: %s exited (%v): only %d of %d metadata servers run, fewer than a majority: the file system cannot work\n",
			c.spec.Name, exitStatus(c.err), running, len(p.Metas))
		return false
	}
	fmt.Fprintf(s.out, "weft up: %s exited (%v); the metadata group keeps serving with %d of %d members (another %d may fail). The end of %s:\n%s",
		c.spec.Name, exitStatus(c.err), running, len(p.Metas), running-len(p.Metas)/2-1, c.spec.Log, indent(logTail(c.spec.Log, 5)))
	return true
}

func (c *child) running() bool {
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

// prepareDir creates d, cleaning a stale FUSE mount (ENOTCONN) left there
// by a client that died.
func prepareDir(d string, out io.Writer) error {
	_, err := os.Stat(d)
	if isStaleMount(err) {
		fmt.Fprintf(out, "weft up: cleaning a stale mount at %s\n", d)
		if err := unmountFuse(d, false); err != nil {
			if err := unmountFuse(d, true); err != nil {
				return fmt.Errorf("up: %s is a stale mount and unmounting failed: %w", d, err)
			}
		}
	}
	if err := os.MkdirAll(d, 0o755); err != nil {
		return fmt.Errorf("up: %w", err)
	}
	return nil
}

func checkMountpointFree(mnt string) error {
	if isFuseMount(mnt) {
		return fmt.Errorf("up: %s is already a FUSE mount (another weft up?); unmount it first: fusermount3 -u %s", mnt, mnt)
	}
	return nil
}

// fuseSuperMagic is statfs.f_type of every FUSE mount.
const fuseSuperMagic = 0x65735546

func isFuseMount(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Type == fuseSuperMagic
}

func dialable(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// unmountFuse unmounts a FUSE mount with fusermount3 (or fusermount), or
// with umount(2) if neither is installed (works as root). lazy detaches it
// even while busy.
func unmountFuse(mnt string, lazy bool) error {
	args := []string{"-u"}
	flags := 0
	if lazy {
		args = append(args, "-z")
		flags = unix.MNT_DETACH
	}
	for _, bin := range []string{"fusermount3", "fusermount"} {
		path, err := exec.LookPath(bin)
		if err != nil {
			continue
		}
		if out, err := exec.Command(path, append(args, mnt)...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s %s %s: %v: %s", bin, strings.Join(args, " "), mnt, err, bytes.TrimSpace(out))
		}
		return nil
	}
	if err := unix.Unmount(mnt, flags); err != nil {
		return fmt.Errorf("umount %s: %w (and no fusermount3 installed)", mnt, err)
	}
	return nil
}

func printUpReport(w io.Writer, p upPlan) {
	width := len(p.Mount)
	for _, s := range append(append([]childSpec(nil), p.Metas...), p.Storage...) {
		width = max(width, len(s.Addr))
	}
	fmt.Fprintf(w, "\nweft is running:\n")
	for _, m := range p.Metas {
		fmt.Fprintf(w, "  %-10s %-*s  %s\n", m.Name, width, m.Addr, "database "+m.Dirs[0])
	}
	for _, s := range p.Storage {
		names := make([]string, len(s.Dirs))
		for i, d := range s.Dirs {
			names[i] = filepath.Base(d)
		}
		fmt.Fprintf(w, "  %-10s %-*s  %s\n", s.Name, width, s.Addr, "targets "+strings.Join(names, ", ")+" in "+p.Data)
	}
	fmt.Fprintf(w, "  %-10s %-*s  %s\n", "mount", width, p.Mount, "client of meta "+p.MetaAddr)
	fmt.Fprintf(w, "logs:\n")
	for _, c := range append(append(append([]childSpec(nil), p.Metas...), p.Storage...), p.Mounter) {
		fmt.Fprintf(w, "  %-10s %s\n", c.Name, c.Log)
	}
}

// readWriteCheck writes a file that spans several stripes through the mount,
// closes it, reads it back and compares, then removes it.
func readWriteCheck(mnt string) (string, error) {
	const size = 4<<20 + 12345
	data := make([]byte, size)
	if _, err := rand.Read(data); err != nil {
		return "", err
	}
	path := filepath.Join(mnt, fmt.Sprintf(".weft-up-check-%d", os.Getpid()))
	defer os.Remove(path)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return "", err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return "", fmt.Errorf("fsync: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("close: %w", err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	if !bytes.Equal(got, data) {
		return "", fmt.Errorf("read back %d bytes that differ from the %d written", len(got), len(data))
	}
	where := ""
	if l, err := getLayout(path); err == nil {
		where = fmt.Sprintf(", striped %d x %s over targets %v", l.StripeCount, units.FormatSize(l.StripeSize), l.Targets)
	}
	return fmt.Sprintf("write/read check: wrote %s through %s%s, read it back: OK", units.FormatSize(size), mnt, where), nil
}

// supervisor runs the children and notices when one exits.
type supervisor struct {
	exe      string
	out      io.Writer
	children []*child // in start order
	exited   chan *child
}

type child struct {
	spec     childSpec
	cmd      *exec.Cmd
	done     chan struct{} // closed when the process has exited
	err      error         // its exit status, valid after done
	stopping atomic.Bool   // set before we stop it: its exit is expected
}

// newSupervisor makes a supervisor for at most n children.
func newSupervisor(exe string, out io.Writer, n int) *supervisor {
	return &supervisor{exe: exe, out: out, exited: make(chan *child, n)}
}

// start runs spec with output appended to its log file. The child gets its
// own process group, so a Ctrl-C in the terminal reaches only weft up, which
// stops the children in order (mount first); and it gets SIGTERM if weft up
// dies.
func (s *supervisor) start(spec childSpec) (*child, error) {
	logf, err := os.OpenFile(spec.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("up: %w", err)
	}
	defer logf.Close() // the child has its own copy
	fmt.Fprintf(logf, "=== weft up: %s: %s %s\n", time.Now().Format(time.RFC3339), s.exe, strings.Join(spec.Args, " "))
	cmd := exec.Command(s.exe, spec.Args...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("up: start %s: %w", spec.Name, err)
	}
	c := &child{spec: spec, cmd: cmd, done: make(chan struct{})}
	s.children = append(s.children, c)
	go func() {
		c.err = cmd.Wait()
		close(c.done)
		s.exited <- c
	}()
	fmt.Fprintf(s.out, "  started %-10s pid %-7d log %s\n", spec.Name, cmd.Process.Pid, spec.Log)
	return c, nil
}

// errInterrupted is returned by waitFor when ctx is cancelled (Ctrl-C
// during startup).
var errInterrupted = errors.New("up: interrupted")

// waitFor polls cond every 100ms until it holds, a child exits, ctx is
// cancelled or the timeout passes.
func (s *supervisor) waitFor(ctx context.Context, what string, timeout time.Duration, cond func() (bool, error)) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var lastErr error
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return errInterrupted
		case c := <-s.exited:
			return s.died(c)
		case <-deadline.C:
			msg := fmt.Sprintf("up: gave up waiting %v for %s", timeout, what)
			if lastErr != nil {
				msg += fmt.Sprintf(" (last error: %v)", lastErr)
			}
			return fmt.Errorf("%s; the logs may say why:\n%s", msg, s.tails())
		case <-tick.C:
		}
	}
}

// interrupted turns a Ctrl-C during startup into a clean exit.
func (s *supervisor) interrupted(err error) error {
	if errors.Is(err, errInterrupted) {
		fmt.Fprintln(s.out, "weft up: interrupted, stopping")
		return nil
	}
	return err
}

// died describes a child's unexpected exit with the end of its log.
func (s *supervisor) died(c *child) error {
	return fmt.Errorf("up: %s exited unexpectedly (%v); the end of %s:\n%s", c.spec.Name, exitStatus(c.err), c.spec.Log, indent(logTail(c.spec.Log, 20)))
}

func exitStatus(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// tails shows the end of every child's log, for a startup timeout.
func (s *supervisor) tails() string {
	var b strings.Builder
	for _, c := range s.children {
		fmt.Fprintf(&b, "--- %s:\n%s", c.spec.Log, indent(logTail(c.spec.Log, 5)))
	}
	return b.String()
}

// stopAll stops the children in reverse start order: the mount first (so
// nothing is left mounted over a dead server), then storage, then meta.
func (s *supervisor) stopAll(mnt string) {
	mounted := false
	for i := len(s.children) - 1; i >= 0; i-- {
		c := s.children[i]
		if c.spec.Name == "mount" {
			mounted = true
			s.stopMount(c, mnt)
		} else {
			s.stop(c, 10*time.Second)
		}
	}
	// Only a mount we started is ours to clean up.
	if mounted && (isFuseMount(mnt) || isStaleMountPath(mnt)) {
		if err := unmountFuse(mnt, true); err != nil {
			fmt.Fprintln(s.out, "weft up:", err)
		}
	}
}

// stop sends SIGTERM and waits up to grace for a clean exit, then kills.
func (s *supervisor) stop(c *child, grace time.Duration) {
	if s.terminate(c, grace) {
		return
	}
	fmt.Fprintf(s.out, "weft up: %s did not stop within %v; killing it\n", c.spec.Name, grace)
	_ = c.cmd.Process.Kill()
	<-c.done
}

// stopMount asks the mount process to unmount and exit; if it cannot (files
// still open), the mount is detached lazily and the process stopped.
func (s *supervisor) stopMount(c *child, mnt string) {
	if s.terminate(c, 10*time.Second) {
		return
	}
	fmt.Fprintf(s.out, "weft up: the mount did not unmount within 10s (files open?); detaching it\n")
	if err := unmountFuse(mnt, true); err != nil {
		fmt.Fprintln(s.out, "weft up:", err)
	}
	s.stop(c, 5*time.Second)
}

// terminate sends SIGTERM (unless c has exited) and reports whether c
// exited within grace.
func (s *supervisor) terminate(c *child, grace time.Duration) bool {
	c.stopping.Store(true)
	select {
	case <-c.done:
		return true
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-c.done:
		return true
	case <-t.C:
		return false
	}
}

func isStaleMountPath(p string) bool {
	_, err := os.Stat(p)
	return isStaleMount(err)
}

// logTail returns the last n lines of the file at path.
func logTail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read the log: %v)\n", err)
	}
	defer f.Close()
	const maxRead = 64 << 10
	fi, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(cannot read the log: %v)\n", err)
	}
	off := max(fi.Size()-maxRead, 0)
	buf := make([]byte, fi.Size()-off)
	if _, err := f.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Sprintf("(cannot read the log: %v)\n", err)
	}
	lines := strings.Split(strings.TrimRight(string(buf), "\n"), "\n")
	if off > 0 && len(lines) > 1 {
		lines = lines[1:] // probably cut in the middle
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	if len(lines) == 1 && lines[0] == "" {
		return "(empty)\n"
	}
	return strings.Join(lines, "\n") + "\n"
}

func indent(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return "    " + strings.Join(lines, "\n    ") + "\n"
}

// protectDefault sets, on the first run over DATA, the root's default layout
// to p.Mirror copies (a marker in DATA records that it was done, so a
// later setstripe of the root is never undone), and describes the default
// layout in force.
func protectDefault(p upPlan) (string, error) {
	marker := filepath.Join(p.Data, "default-layout-set")
	if _, err := os.Stat(marker); errors.Is(err, os.ErrNotExist) && p.Mirror > 1 {
		cur, err := getLayout(p.Mount)
		if err != nil {
			return "", err
		}
		req := stripeRequest{Mirror: p.Mirror}
		if err := req.validate(); err != nil {
			return "", err
		}
		if err := setLayout(p.Mount, req.apply(cur)); err != nil {
			return "", err
		}
		if err := os.WriteFile(marker, []byte("the root's default layout was set by weft up\n"), 0o644); err != nil {
			return "", err
		}
	}
	cur, err := getLayout(p.Mount)
	if err != nil {
		return "", err
	}
	desc := fmt.Sprintf("%s, stripe count %d, stripe size %s", cur.kindString(), cur.StripeCount, units.FormatSize(cur.StripeSize))
	if w := cur.width(); w > 1 {
		desc += fmt.Sprintf(" (survives the loss of %d storage server(s))", survives(cur))
	}
	return desc, nil
}

// survives is how many servers a layout's files can lose.
func survives(l layoutJSON) int {
	if l.Kind == "ec" {
		return l.ECParity
	}
	return l.width() - 1
}
