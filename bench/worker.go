package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// Sizes fixed by the IO500 rules.
const (
	EasyTransfer = 2 << 20 // ior-easy transfer size
	HardRecord   = 47008   // ior-hard record (transfer = block) size
	RndBlock     = 4096    // ior-rnd4K-easy-read
	MdHardSize   = 3901    // mdtest-hard file size
)

// Internal phases (not reported).
const (
	phaseSetup     = "setup"
	phaseTimestamp = "timestamp"
	phaseCleanup   = "cleanup"
	phasePurge     = "purge"
)

// Serve runs one worker session: it reads the coordinator's messages from r
// and answers on w until the coordinator says exit or r ends. `weft bench
// worker` calls it with stdin and stdout.
func Serve(ctx context.Context, r io.Reader, w io.Writer, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c := newCodec(r, w)
	wk := &worker{c: c, log: log, in: make(chan message, 4)}

	// The reader turns "stop" into a flag the I/O loop polls, and passes
	// everything else on. It ends when r does; the session then ends too.
	readErr := make(chan error, 1)
	go func() {
		defer close(wk.in)
		for {
			m, err := c.recv()
			if err != nil {
				readErr <- err
				cancel()
				return
			}
			if m.Op == opStop {
				wk.stop.Store(true)
				continue
			}
			select {
			case wk.in <- m:
			case <-ctx.Done():
				readErr <- ctx.Err()
				return
			}
		}
	}()

	for {
		m, ok := <-wk.in
		if !ok {
			err := <-readErr
			if errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		}
		var err error
		switch m.Op {
		case opInit:
			err = wk.init(m)
			if err == nil {
				err = c.send(message{Op: opReady, Rank: wk.rank})
			}
		case opRun:
			err = wk.run(ctx, m)
		case opExit:
			return nil
		case opFinish:
			continue // a late finish for a run that already failed
		default:
			err = fmt.Errorf("bench: unexpected message %q", m.Op)
		}
		if err != nil {
			log.Debug("bench worker failed", "op", m.Op, "phase", m.Phase, "err", err)
			if serr := c.send(message{Op: opError, Phase: m.Phase, Err: err.Error()}); serr != nil {
				return serr
			}
		}
	}
}

type worker struct {
	c    *codec
	log  *slog.Logger
	in   chan message
	stop atomic.Bool

	rank, procs int
	dir         string
	direct      bool
}

func (w *worker) init(m message) error {
	if m.Version != protocolVersion {
		return fmt.Errorf("bench: coordinator speaks protocol %d, worker %d", m.Version, protocolVersion)
	}
	if m.Procs <= 0 || m.Rank < 0 || m.Rank >= m.Procs || m.Dir == "" {
		return fmt.Errorf("bench: bad init (rank %d of %d, dir %q)", m.Rank, m.Procs, m.Dir)
	}
	w.rank, w.procs, w.dir, w.direct = m.Rank, m.Procs, m.Dir, m.Direct
	return nil
}

// neighbour is the rank whose data this rank reads back.
func (w *worker) neighbour() int { return (w.rank + 1) % w.procs }

func (w *worker) path(parts ...string) string {
	return filepath.Join(append([]string{w.dir}, parts...)...)
}

func easyFile(rank int) string { return "ior_file_easy." + pad(rank) }
func pad(n int) string         { return fmt.Sprintf("%08d", n) }
func mdName(rank int, i int64) string {
	return "file.mdtest." + strconv.Itoa(rank) + "." + strconv.FormatInt(i, 10)
}

// job is one phase as the I/O loop sees it: do(i) performs item i.
type job struct {
	do    func(i int64) error
	done  func() error // after the last item; may be nil
	bytes int64        // moved per item
	mism  *int64       // verification failures, if the job verifies

	// Set by done for jobs that are not a series of items.
	checked int64 // find: entries examined
	found   int64 // find: matches
	stamp   int64 // timestamp: the reference file's mtime (unix ns)
}

func (w *worker) run(ctx context.Context, m message) error {
	if w.procs == 0 {
		return errors.New("bench: run before init")
	}
	w.stop.Store(false)
	j, err := w.job(ctx, m)
	if err != nil {
		return err
	}
	var n int64
	if m.Stonewall {
		n, err = w.stonewalled(ctx, j, m.Limit)
	} else {
		n, err = runItems(ctx, j.do, 0, m.Count)
	}
	if j.done != nil {
		if derr := j.done(); err == nil {
			err = derr
		}
	}
	if err != nil {
		return err
	}
	out := message{Op: opDone, Phase: m.Phase, Count: n + j.checked, Bytes: n * j.bytes, Found: j.found, Newer: j.stamp}
	if j.mism != nil {
		out.Mismatches = *j.mism
	}
	return w.c.send(out)
}

// stonewalled runs items until "stop" arrives or limit items are done,
// reports the count, then continues to the count "finish" names (the
// largest any rank reached).
func (w *worker) stonewalled(ctx context.Context, j *job, limit int64) (int64, error) {
	var n int64
	for n < limit && !w.stop.Load() {
		if err := j.do(n); err != nil {
			return n, err
		}
		n++
		if n%64 == 0 && ctx.Err() != nil {
			return n, ctx.Err()
		}
	}
	if err := w.c.send(message{Op: opStopped, Count: n}); err != nil {
		return n, err
	}
	for {
		m, ok := <-w.in
		if !ok {
			return n, context.Canceled
		}
		if m.Op == opExit {
			return n, errors.New("bench: told to exit during a phase")
		}
		if m.Op != opFinish {
			return n, fmt.Errorf("bench: want finish, got %q", m.Op)
		}
		return runItems(ctx, j.do, n, m.Count)
	}
}

func runItems(ctx context.Context, do func(int64) error, from, to int64) (int64, error) {
	n := from
	for ; n < to; n++ {
		if err := do(n); err != nil {
			return n, err
		}
		if n%64 == 0 && ctx.Err() != nil {
			return n, ctx.Err()
		}
	}
	return n, nil
}

func (w *worker) job(ctx context.Context, m message) (*job, error) {
	switch m.Phase {
	case phaseSetup:
		return w.setup()
	case phaseTimestamp:
		return w.timestamp()
	case phaseCleanup:
		return w.cleanup()
	case phasePurge:
		return &job{do: func(int64) error { return nil }, done: func() error {
			if w.rank != 0 {
				return nil
			}
			return os.RemoveAll(w.dir)
		}}, nil
	case IorEasyWrite:
		return w.iorEasy(true)
	case IorEasyRead:
		return w.iorEasy(false)
	case IorHardWrite:
		return w.iorHard(true)
	case IorHardRead:
		return w.iorHard(false)
	case IorRnd4KEasyRead:
		return w.iorRnd(m.Count)
	case MdEasyWrite, MdEasyStat, MdEasyDelete:
		return w.mdEasy(m.Phase)
	case MdHardWrite, MdHardStat, MdHardRead, MdHardDelete:
		return w.mdHard(m.Phase)
	case Find:
		return w.find(ctx, time.Unix(0, m.Newer))
	}
	return nil, fmt.Errorf("bench: unknown phase %q", m.Phase)
}

func (w *worker) setup() (*job, error) {
	for _, d := range []string{"ior-easy", "ior-hard", "mdtest-hard", filepath.Join("mdtest-easy", "rank."+strconv.Itoa(w.rank))} {
		if err := os.MkdirAll(w.path(d), 0o755); err != nil {
			return nil, fmt.Errorf("bench: setup: %w", err)
		}
	}
	return &job{do: func(int64) error { return nil }}, nil
}

// timestamp creates the reference file of the find phase (rank 0 only) and
// answers its mtime.
func (w *worker) timestamp() (*job, error) {
	j := &job{do: func(int64) error { return nil }}
	if w.rank != 0 {
		return j, nil
	}
	p := w.path("timestampfile")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		return nil, fmt.Errorf("bench: timestamp: %w", err)
	}
	st, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("bench: timestamp: %w", err)
	}
	j.stamp = st.ModTime().UnixNano()
	return j, nil
}

func (w *worker) cleanup() (*job, error) {
	return &job{do: func(int64) error { return nil }, done: func() error {
		err := os.Remove(w.path("ior-easy", easyFile(w.rank)))
		if errors.Is(err, os.ErrNotExist) {
			err = nil
		}
		return err
	}}, nil
}

// AlignedBuf returns n bytes aligned to 4 KiB, as O_DIRECT requires.
func AlignedBuf(n int) []byte {
	b := make([]byte, n+4096)
	off := int(-uintptr(unsafe.Pointer(&b[0])) & 4095)
	return b[off : off+n : off+n]
}

func (w *worker) openFlags(write, direct bool) int {
	fl := syscall.O_RDONLY
	if write {
		fl = syscall.O_WRONLY | syscall.O_CREAT
	}
	if direct && w.direct {
		fl |= syscall.O_DIRECT
	}
	return fl | syscall.O_CLOEXEC
}

func pwriteFull(fd int, b []byte, off int64) error {
	for len(b) > 0 {
		n, err := syscall.Pwrite(fd, b, off)
		if err != nil {
			if err == syscall.EINTR {
				continue
			}
			return err
		}
		if n == 0 {
			return io.ErrShortWrite
		}
		b, off = b[n:], off+int64(n)
	}
	return nil
}

// preadFull reads len(b) bytes unless the file ends first.
func preadFull(fd int, b []byte, off int64) (int, error) {
	total := 0
	for total < len(b) {
		n, err := syscall.Pread(fd, b[total:], off+int64(total))
		if err != nil {
			if err == syscall.EINTR {
				continue
			}
			return total, err
		}
		if n == 0 {
			break
		}
		total += n
	}
	return total, nil
}

// fileJob opens p and wraps an item function with the fd; done syncs
// (writes, as IOR's -e does) and closes.
func fileJob(p string, flags int, write bool, perItem int64, do func(fd int, i int64) error) (*job, error) {
	fd, err := syscall.Open(p, flags, 0o644)
	if err != nil {
		return nil, fmt.Errorf("bench: open %s: %w", p, err)
	}
	return &job{
		bytes: perItem,
		do:    func(i int64) error { return do(fd, i) },
		done: func() error {
			var err error
			if write {
				if err = syscall.Fsync(fd); err != nil {
					err = fmt.Errorf("bench: fsync %s: %w", p, err)
				}
			}
			if cerr := syscall.Close(fd); err == nil && cerr != nil {
				err = fmt.Errorf("bench: close %s: %w", p, cerr)
			}
			return err
		},
	}, nil
}

func (w *worker) iorEasy(write bool) (*job, error) {
	buf := AlignedBuf(EasyTransfer)
	if write {
		p := w.path("ior-easy", easyFile(w.rank))
		return fileJob(p, w.openFlags(true, true)|syscall.O_TRUNC, true, EasyTransfer, func(fd int, i int64) error {
			off := i * EasyTransfer
			Fill(buf, w.rank, off)
			if err := pwriteFull(fd, buf, off); err != nil {
				return fmt.Errorf("bench: write %s at %d: %w", p, off, err)
			}
			return nil
		})
	}
	src := w.neighbour()
	p := w.path("ior-easy", easyFile(src))
	return verifiedReadJob(p, w.openFlags(false, true), buf, src, func(i int64) int64 { return i * EasyTransfer })
}

// verifiedReadJob reads item i of p at offset(i) into buf and counts the
// reads whose bytes are not what rank owner wrote there.
func verifiedReadJob(p string, flags int, buf []byte, owner int, offset func(i int64) int64) (*job, error) {
	var mism int64
	j, err := fileJob(p, flags, false, int64(len(buf)), func(fd int, i int64) error {
		off := offset(i)
		n, err := preadFull(fd, buf, off)
		if err != nil {
			return fmt.Errorf("bench: read %s at %d: %w", p, off, err)
		}
		if n != len(buf) || Check(buf, owner, off) >= 0 {
			mism++
		}
		return nil
	})
	if j != nil {
		j.mism = &mism
	}
	return j, err
}

// iorHard: record s of rank r sits at (s*procs + r) * HardRecord in one
// shared file. 47,008-byte records are not block aligned, so --direct does
// not apply here.
func (w *worker) iorHard(write bool) (*job, error) {
	buf := make([]byte, HardRecord)
	p := w.path("ior-hard", "file")
	owner := w.rank
	if !write {
		owner = w.neighbour()
	}
	offset := func(s int64) int64 { return (s*int64(w.procs) + int64(owner)) * HardRecord }
	if write {
		return fileJob(p, w.openFlags(true, false), true, HardRecord, func(fd int, s int64) error {
			off := offset(s)
			Fill(buf, owner, off)
			if err := pwriteFull(fd, buf, off); err != nil {
				return fmt.Errorf("bench: write %s at %d: %w", p, off, err)
			}
			return nil
		})
	}
	return verifiedReadJob(p, w.openFlags(false, false), buf, owner, offset)
}

// iorRnd reads random 4 KiB blocks of the neighbour's ior-easy file, which
// holds transfers 2 MiB transfers.
func (w *worker) iorRnd(transfers int64) (*job, error) {
	blocks := transfers * (EasyTransfer / RndBlock)
	if blocks <= 0 {
		return nil, errors.New("bench: ior-rnd4K-easy-read: ior-easy wrote nothing")
	}
	src := w.neighbour()
	p := w.path("ior-easy", easyFile(src))
	buf := AlignedBuf(RndBlock)
	rng := rand.New(rand.NewPCG(uint64(w.rank), uint64(time.Now().UnixNano())))
	return verifiedReadJob(p, w.openFlags(false, true), buf, src, func(int64) int64 { return rng.Int64N(blocks) * RndBlock })
}

func (w *worker) mdEasy(phase string) (*job, error) {
	owner := w.rank
	if phase != MdEasyWrite {
		owner = w.neighbour()
	}
	dir := w.path("mdtest-easy", "rank."+strconv.Itoa(owner)) + "/"
	j := &job{}
	switch phase {
	case MdEasyWrite:
		j.do = func(i int64) error {
			p := dir + mdName(owner, i)
			fd, err := syscall.Open(p, syscall.O_CREAT|syscall.O_EXCL|syscall.O_WRONLY|syscall.O_CLOEXEC, 0o644)
			if err != nil {
				return fmt.Errorf("bench: create %s: %w", p, err)
			}
			return syscall.Close(fd)
		}
	case MdEasyStat:
		var st syscall.Stat_t
		j.do = func(i int64) error {
			p := dir + mdName(owner, i)
			if err := syscall.Stat(p, &st); err != nil {
				return fmt.Errorf("bench: stat %s: %w", p, err)
			}
			return nil
		}
	case MdEasyDelete:
		j.do = func(i int64) error {
			p := dir + mdName(owner, i)
			if err := syscall.Unlink(p); err != nil {
				return fmt.Errorf("bench: unlink %s: %w", p, err)
			}
			return nil
		}
		j.done = func() error { return os.Remove(dir) }
	}
	return j, nil
}

// mdHard: file i of rank r holds the pattern of rank r at offset i*3901, so
// every file's content is distinct.
func (w *worker) mdHard(phase string) (*job, error) {
	owner := w.rank
	if phase != MdHardWrite {
		owner = w.neighbour()
	}
	dir := w.path("mdtest-hard") + "/"
	buf := make([]byte, MdHardSize+1)
	var mism int64
	j := &job{}
	switch phase {
	case MdHardWrite:
		j.bytes = MdHardSize
		j.do = func(i int64) error {
			p := dir + mdName(owner, i)
			fd, err := syscall.Open(p, syscall.O_CREAT|syscall.O_EXCL|syscall.O_WRONLY|syscall.O_CLOEXEC, 0o644)
			if err != nil {
				return fmt.Errorf("bench: create %s: %w", p, err)
			}
			Fill(buf[:MdHardSize], owner, i*MdHardSize)
			err = pwriteFull(fd, buf[:MdHardSize], 0)
			if cerr := syscall.Close(fd); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("bench: write %s: %w", p, err)
			}
			return nil
		}
	case MdHardStat:
		j.mism = &mism
		var st syscall.Stat_t
		j.do = func(i int64) error {
			p := dir + mdName(owner, i)
			if err := syscall.Stat(p, &st); err != nil {
				return fmt.Errorf("bench: stat %s: %w", p, err)
			}
			if st.Size != MdHardSize {
				mism++
			}
			return nil
		}
	case MdHardRead:
		j.mism = &mism
		j.bytes = MdHardSize
		j.do = func(i int64) error {
			p := dir + mdName(owner, i)
			fd, err := syscall.Open(p, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
			if err != nil {
				return fmt.Errorf("bench: open %s: %w", p, err)
			}
			n, err := preadFull(fd, buf, 0)
			syscall.Close(fd)
			if err != nil {
				return fmt.Errorf("bench: read %s: %w", p, err)
			}
			if n != MdHardSize || Check(buf[:n], owner, i*MdHardSize) >= 0 {
				mism++
			}
			return nil
		}
	case MdHardDelete:
		j.do = func(i int64) error {
			p := dir + mdName(owner, i)
			if err := syscall.Unlink(p); err != nil {
				return fmt.Errorf("bench: unlink %s: %w", p, err)
			}
			return nil
		}
	}
	return j, nil
}

func (w *worker) find(ctx context.Context, newer time.Time) (*job, error) {
	j := &job{do: func(int64) error { return nil }}
	j.done = func() error {
		checked, found, err := findWalk(ctx, w.dir, w.rank, w.procs, newer)
		if err != nil {
			return fmt.Errorf("bench: find: %w", err)
		}
		j.checked, j.found = checked, found
		return nil
	}
	return j, nil
}
