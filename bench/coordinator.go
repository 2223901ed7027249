package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"
)

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Limits caps what one process writes in a stonewalled phase, so a fast
// file system cannot fill a small disk (or tmpfs) before the stonewall time.
// A phase that ends on a cap is marked "capped" in the results.
type Limits struct {
	EasyBytes int64 // ior-easy bytes per process (rounded down to 2 MiB transfers)
	HardBytes int64 // ior-hard bytes per process (rounded down to 47,008-byte records)
	EasyFiles int64 // mdtest-easy files per process
	HardFiles int64 // mdtest-hard files per process
	RndReads  int64 // ior-rnd4K-easy-read reads per process
}

// Config says what to run where.
type Config struct {
	// Dir is the directory under test; the run uses a fresh subdirectory
	// and removes it at the end. Remote workers must see it at the same path.
	Dir string
	// Procs is the number of local worker processes.
	Procs int
	// Remote lists `weft bench worker --listen` addresses, one rank each
	// (repeat an address for several ranks on that machine).
	Remote []string
	// Stonewall is how long write phases (and ior-rnd4K-easy-read) run
	// before the wear-out. IO500's rules say 300 s.
	Stonewall time.Duration
	// Direct opens ior-easy and ior-rnd4K files with O_DIRECT.
	Direct bool
	Limits Limits
	// Progress receives a line per phase start/end and a heartbeat while a
	// phase runs; nil for none.
	Progress io.Writer
	// ProgressEvery is the heartbeat period (default 5 s).
	ProgressEvery time.Duration
	Logger        *slog.Logger
	// WorkerCommand is the argv of a local worker; default: this
	// executable with "bench worker".
	WorkerCommand []string
	// WorkerStderr receives local workers' stderr (default os.Stderr).
	WorkerStderr io.Writer
	// WorkerTLS, if set, authenticates the connections to Remote workers
	// (weft bench io500 --workers sets it from --keys); nil = plain TCP.
	WorkerTLS *tls.Config

	// startLocal replaces spawning a process (tests run workers in-process).
	startLocal func(ctx context.Context, rank int) (*stream, error)
}

// DefaultConfig returns the defaults of `weft bench io500` (quick: the
// under-a-minute smoke run).
func DefaultConfig(quick bool) Config {
	if quick {
		return Config{Procs: 2, Stonewall: 2 * time.Second, Limits: Limits{
			EasyBytes: 64 << 20, HardBytes: 32 << 20, EasyFiles: 5000, HardFiles: 3000, RndReads: 200000,
		}}
	}
	return Config{Procs: 2, Stonewall: 30 * time.Second, Limits: Limits{
		EasyBytes: 2 << 30, HardBytes: 1 << 30, EasyFiles: 200000, HardFiles: 200000, RndReads: 1 << 40,
	}}
}

// stream is the coordinator's end of one worker session.
type stream struct {
	r          io.Reader
	w          io.Writer
	closeWrite func() error // graceful: the worker sees EOF and exits
	kill       func()       // forceful: ends the worker and unblocks reads
	wait       func() error // reap, once reads have ended
}

type peer struct {
	rank       int
	s          *stream
	c          *codec
	readerDone chan struct{}
}

type incoming struct {
	rank int
	m    message
	err  error
}

type coord struct {
	cfg   Config
	log   *slog.Logger
	peers []*peer
	in    chan incoming
	quit  chan struct{}
	prog  io.Writer
}

// Run runs all IO500 phases and returns their results. It always stops its
// workers before returning; on failure with only local workers it also
// removes the run directory.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Dir == "" {
		return nil, errors.New("bench: no directory to run in")
	}
	if cfg.Procs < 0 || cfg.Procs+len(cfg.Remote) == 0 {
		return nil, errors.New("bench: need at least one worker")
	}
	if cfg.Stonewall <= 0 {
		return nil, errors.New("bench: stonewall must be positive")
	}
	if cfg.ProgressEvery <= 0 {
		cfg.ProgressEvery = 5 * time.Second
	}
	co := &coord{cfg: cfg, log: cfg.Logger, in: make(chan incoming, 16), quit: make(chan struct{}), prog: cfg.Progress}
	if co.log == nil {
		co.log = slog.New(slog.DiscardHandler)
	}
	if co.prog == nil {
		co.prog = io.Discard
	}
	if co.cfg.WorkerStderr == nil {
		co.cfg.WorkerStderr = os.Stderr
	}
	// Progress and workers' stderr often share one writer, written from
	// several goroutines (exec copies each child's stderr in its own).
	mu := new(sync.Mutex)
	co.prog = &lockedWriter{mu: mu, w: co.prog}
	co.cfg.WorkerStderr = &lockedWriter{mu: mu, w: co.cfg.WorkerStderr}
	start := time.Now()
	runDir := filepath.Join(cfg.Dir, "io500-"+start.Format("20060102-150405.000000"))
	rep, err := co.run(ctx, runDir, start)
	co.shutdown()
	if err != nil && len(cfg.Remote) == 0 {
		os.RemoveAll(runDir)
	}
	return rep, err
}

func (co *coord) run(ctx context.Context, runDir string, start time.Time) (*Report, error) {
	cfg := co.cfg
	procs := cfg.Procs + len(cfg.Remote)
	for rank := range procs {
		s, err := co.open(ctx, rank)
		if err != nil {
			return nil, err
		}
		p := &peer{rank: rank, s: s, c: newCodec(s.r, s.w), readerDone: make(chan struct{})}
		co.peers = append(co.peers, p)
		go co.read(p)
	}
	for _, p := range co.peers {
		if err := p.c.send(message{Op: opInit, Version: protocolVersion, Rank: p.rank, Procs: procs, Dir: runDir, Direct: cfg.Direct}); err != nil {
			return nil, err
		}
	}
	if _, err := co.collect(ctx, opReady, "init"); err != nil {
		return nil, err
	}
	fmt.Fprintf(co.prog, "io500: %d workers, directory %s, stonewall %s\n", procs, runDir, cfg.Stonewall)

	rep := &Report{Phases: map[string]PhaseResult{}, Run: RunInfo{
		Dir: cfg.Dir, Procs: procs, Stonewall: cfg.Stonewall.Seconds(), Direct: cfg.Direct, Start: start.UTC(),
	}}
	lim := cfg.Limits
	var easyN, hardN, mdEasyN, mdHardN int64
	var stamp int64
	steps := []struct {
		name      string
		stonewall bool
		limit     int64
		count     *int64 // stonewalled: where to keep the count; else: items to do
	}{
		{phaseSetup, false, 0, new(int64)},
		{IorEasyWrite, true, lim.EasyBytes / EasyTransfer, &easyN},
		{MdEasyWrite, true, lim.EasyFiles, &mdEasyN},
		{phaseTimestamp, false, 0, new(int64)},
		{IorHardWrite, true, lim.HardBytes / HardRecord, &hardN},
		{MdHardWrite, true, lim.HardFiles, &mdHardN},
		{Find, false, 0, new(int64)},
		{IorEasyRead, false, 0, &easyN},
		{MdEasyStat, false, 0, &mdEasyN},
		{IorHardRead, false, 0, &hardN},
		{MdHardStat, false, 0, &mdHardN},
		{MdEasyDelete, false, 0, &mdEasyN},
		{MdHardRead, false, 0, &mdHardN},
		{MdHardDelete, false, 0, &mdHardN},
		{IorRnd4KEasyRead, true, lim.RndReads, &easyN},
		{phaseCleanup, false, 0, new(int64)},
		{phasePurge, false, 0, new(int64)},
	}
	for _, st := range steps {
		m := message{Op: opRun, Phase: st.name, Stonewall: st.stonewall, Limit: st.limit, Count: *st.count, Newer: stamp}
		if st.stonewall && st.limit <= 0 {
			return nil, fmt.Errorf("bench: %s: per-process limit is 0", st.name)
		}
		res, err := co.phase(ctx, m)
		if err != nil {
			return nil, err
		}
		switch {
		case st.name == phaseTimestamp:
			stamp = res.stamp
			continue
		case st.name == IorRnd4KEasyRead:
			// the count is reads, not the ior-easy transfers it was given
		case st.stonewall:
			*st.count = res.target
		}
		if st.name == phaseSetup || st.name == phaseCleanup || st.name == phasePurge {
			continue
		}
		pr := res.result(st.name)
		rep.Phases[st.name] = pr
		fmt.Fprintf(co.prog, "io500: %s\n", ResultLine(st.name, pr))
	}
	rep.Score = Scores(rep.Phases)
	return rep, nil
}

// phaseTotals is what all ranks did in one phase.
type phaseTotals struct {
	elapsed           time.Duration
	items, bytes      int64
	mismatches, found int64
	stamp             int64
	target            int64
	capped            bool
}

func (t phaseTotals) result(name string) PhaseResult {
	secs := t.elapsed.Seconds()
	pr := PhaseResult{Unit: unitOf(name), Seconds: secs, Items: t.items, Bytes: t.bytes, Capped: t.capped, Found: t.found}
	if secs > 0 {
		if pr.Unit == UnitGiBps {
			pr.Value = float64(t.bytes) / secs / (1 << 30)
		} else {
			pr.Value = float64(t.items) / secs / 1000
		}
	}
	if verifies(name) {
		ok := t.mismatches == 0
		pr.Verified = &ok
	}
	return pr
}

// phase runs one phase on every rank: the start is a broadcast, the end a
// barrier (every rank's done).
func (co *coord) phase(ctx context.Context, m message) (phaseTotals, error) {
	var t phaseTotals
	start := time.Now()
	for _, p := range co.peers {
		if err := p.c.send(m); err != nil {
			return t, err
		}
	}
	tick := time.NewTicker(co.cfg.ProgressEvery)
	defer tick.Stop()
	heartbeat := func() {
		fmt.Fprintf(co.prog, "io500: %s running, %s elapsed\n", m.Phase, time.Since(start).Round(time.Second))
	}
	if m.Stonewall {
		sw := newStonewall(len(co.peers))
		timer := time.NewTimer(co.cfg.Stonewall)
		defer timer.Stop()
		for !sw.done() {
			select {
			case <-ctx.Done():
				return t, ctx.Err()
			case <-tick.C:
				heartbeat()
			case <-timer.C:
				for _, r := range sw.expire() {
					if err := co.peers[r].c.send(message{Op: opStop}); err != nil {
						return t, err
					}
				}
			case in := <-co.in:
				if err := inErr(in, opStopped, m.Phase); err != nil {
					return t, err
				}
				if err := sw.report(in.rank, in.m.Count); err != nil {
					return t, err
				}
			}
		}
		t.target, t.capped = sw.target(), sw.capped()
		for _, p := range co.peers {
			if err := p.c.send(message{Op: opFinish, Count: t.target}); err != nil {
				return t, err
			}
		}
	}
	got := 0
	for got < len(co.peers) {
		select {
		case <-ctx.Done():
			return t, ctx.Err()
		case <-tick.C:
			heartbeat()
		case in := <-co.in:
			if err := inErr(in, opDone, m.Phase); err != nil {
				return t, err
			}
			got++
			t.items += in.m.Count
			t.bytes += in.m.Bytes
			t.mismatches += in.m.Mismatches
			t.found += in.m.Found
			t.stamp = max(t.stamp, in.m.Newer)
			if m.Stonewall && m.Phase != IorRnd4KEasyRead && in.m.Count != t.target {
				return t, fmt.Errorf("bench: %s: rank %d did %d items, want %d", m.Phase, in.rank, in.m.Count, t.target)
			}
		}
	}
	t.elapsed = time.Since(start)
	return t, nil
}

func inErr(in incoming, want, phase string) error {
	switch {
	case in.err != nil:
		return fmt.Errorf("bench: %s: worker %d: %w", phase, in.rank, in.err)
	case in.m.Op == opError:
		return fmt.Errorf("bench: %s: worker %d: %s", phase, in.rank, in.m.Err)
	case in.m.Op != want:
		return fmt.Errorf("bench: %s: worker %d sent %q, want %q", phase, in.rank, in.m.Op, want)
	}
	return nil
}

// collect waits for one message of op from every rank.
func (co *coord) collect(ctx context.Context, op, what string) ([]message, error) {
	out := make([]message, len(co.peers))
	for range co.peers {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case in := <-co.in:
			if err := inErr(in, op, what); err != nil {
				return nil, err
			}
			out[in.rank] = in.m
		}
	}
	return out, nil
}

// read forwards one worker's messages until its stream ends.
func (co *coord) read(p *peer) {
	defer close(p.readerDone)
	for {
		m, err := p.c.recv()
		if err == io.EOF {
			err = errors.New("worker exited")
		}
		select {
		case co.in <- incoming{rank: p.rank, m: m, err: err}:
		case <-co.quit:
		}
		if err != nil {
			return
		}
	}
}

// open starts (or connects to) the worker of rank.
func (co *coord) open(ctx context.Context, rank int) (*stream, error) {
	if rank >= co.cfg.Procs {
		return dialWorker(ctx, co.cfg.Remote[rank-co.cfg.Procs], co.cfg.WorkerTLS)
	}
	if co.cfg.startLocal != nil {
		return co.cfg.startLocal(ctx, rank)
	}
	argv := co.cfg.WorkerCommand
	if len(argv) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("bench: find own executable: %w", err)
		}
		argv = []string{exe, "bench", "worker"}
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = co.cfg.WorkerStderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("bench: worker %d: %w", rank, err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("bench: worker %d: %w", rank, err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start worker %d: %w", rank, err)
	}
	co.log.Debug("bench worker started", "rank", rank, "pid", cmd.Process.Pid)
	return &stream{
		r: stdout, w: stdin,
		closeWrite: stdin.Close,
		kill:       func() { cmd.Process.Kill() },
		wait:       cmd.Wait,
	}, nil
}

func dialWorker(ctx context.Context, addr string, cfg *tls.Config) (*stream, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("bench: connect to worker %s: %w", addr, err)
	}
	closeWrite := conn.Close
	if tc, ok := conn.(*net.TCPConn); ok {
		closeWrite = tc.CloseWrite
	}
	if cfg != nil {
		tc := tls.Client(conn, cfg)
		hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			conn.Close()
			return nil, fmt.Errorf("bench: worker %s: authentication failed: %w", addr, err)
		}
		conn, closeWrite = tc, tc.CloseWrite
	}
	return &stream{r: conn, w: conn, closeWrite: closeWrite, kill: func() { conn.Close() }, wait: func() error {
		conn.Close()
		return nil
	}}, nil
}

// shutdown tells every worker to exit, gives them a moment, then kills
// whatever is left, and reaps them.
func (co *coord) shutdown() {
	close(co.quit)
	for _, p := range co.peers {
		p.c.send(message{Op: opExit})
		p.s.closeWrite()
	}
	deadline := time.NewTimer(5 * time.Second)
	defer deadline.Stop()
	for _, p := range co.peers {
		select {
		case <-p.readerDone:
		case <-deadline.C:
			for _, q := range co.peers {
				q.s.kill()
			}
			<-p.readerDone
		}
	}
	for _, p := range co.peers {
		if err := p.s.wait(); err != nil {
			co.log.Debug("bench worker exit", "rank", p.rank, "err", err)
		}
	}
}
