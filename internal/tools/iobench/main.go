package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/weft-fs/weft/internal/units"
)

// result is what one run measured; see doc.go for its JSON.
type result struct {
	Op      string  `json:"op"`
	Bytes   int64   `json:"bytes"`
	Ops     int64   `json:"ops"`
	Seconds float64 `json:"seconds"`
	MiBs    float64 `json:"mib_s"`
	IOPS    float64 `json:"iops"`
}

func newResult(op string, bytes, ops int64, d time.Duration) result {
	s := d.Seconds()
	return result{Op: op, Bytes: bytes, Ops: ops, Seconds: s, MiBs: float64(bytes) / (1 << 20) / s, IOPS: float64(ops) / s}
}

// options are the flags of every operation.
type options struct {
	Size   units.Size
	BS     units.Size
	Jobs   int
	Time   units.Duration
	Direct bool
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "iobench:", err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	if len(args) < 1 {
		return errors.New("usage: iobench write|read|randread FILE [flags]")
	}
	op := args[0]
	o := options{Size: 1 << 30, BS: 1 << 20, Jobs: 4, Time: units.Duration(10 * time.Second), Direct: true}
	if op == "randread" {
		o.BS = 4 << 10
	}
	fs := pflag.NewFlagSet("iobench "+op, pflag.ContinueOnError)
	fs.Var(&o.Size, "size", "bytes to write (write)")
	fs.Var(&o.BS, "bs", "block size of every request")
	fs.IntVar(&o.Jobs, "jobs", o.Jobs, "concurrent readers (randread)")
	fs.Var(&o.Time, "time", "how long to read (randread)")
	fs.BoolVar(&o.Direct, "direct", o.Direct, "open with O_DIRECT")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("%s: one FILE expected, got %d arguments", op, fs.NArg())
	}
	if o.BS == 0 || (o.Direct && (o.BS%4096 != 0 || o.Size%4096 != 0)) {
		return fmt.Errorf("%s: --bs must be > 0, and with --direct --bs and --size multiples of 4KiB", op)
	}
	var (
		r   result
		err error
	)
	switch op {
	case "write":
		r, err = seqWrite(fs.Arg(0), o)
	case "read":
		r, err = seqRead(fs.Arg(0), o)
	case "randread":
		r, err = randRead(fs.Arg(0), o)
	default:
		return fmt.Errorf("unknown operation %q (write, read or randread)", op)
	}
	if err != nil {
		return err
	}
	return json.NewEncoder(out).Encode(r)
}

// buffer returns n bytes, page-aligned (mmap'd) for O_DIRECT; free
// releases them.
func buffer(n int) (buf []byte, free func(), err error) {
	buf, err = unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, nil, fmt.Errorf("buffer of %d bytes: %w", n, err)
	}
	return buf, func() { _ = unix.Munmap(buf) }, nil
}

func open(path string, flag int, o options) (*os.File, error) {
	if o.Direct {
		flag |= unix.O_DIRECT
	}
	return os.OpenFile(path, flag, 0o644)
}

func seqWrite(path string, o options) (result, error) {
	buf, free, err := buffer(int(o.BS))
	if err != nil {
		return result{}, err
	}
	defer free()
	for i := range buf {
		buf[i] = byte(i*7 + i>>12) // not zeros: no layer may skip or compress them
	}
	f, err := open(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, o)
	if err != nil {
		return result{}, err
	}
	defer f.Close()
	start := time.Now()
	var n, ops int64
	for n < int64(o.Size) {
		p := buf[:min(int64(len(buf)), int64(o.Size)-n)]
		w, err := f.Write(p)
		if err != nil {
			return result{}, fmt.Errorf("write %s at %d: %w", path, n, err)
		}
		n += int64(w)
		ops++
	}
	if err := f.Sync(); err != nil {
		return result{}, fmt.Errorf("fsync %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return result{}, fmt.Errorf("close %s: %w", path, err)
	}
	return newResult("write", n, ops, time.Since(start)), nil
}

func seqRead(path string, o options) (result, error) {
	buf, free, err := buffer(int(o.BS))
	if err != nil {
		return result{}, err
	}
	defer free()
	f, err := open(path, os.O_RDONLY, o)
	if err != nil {
		return result{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return result{}, err
	}
	start := time.Now()
	var n, ops int64
	for {
		r, err := f.Read(buf)
		n += int64(r)
		if r > 0 {
			ops++
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return result{}, fmt.Errorf("read %s at %d: %w", path, n, err)
		}
	}
	if n != fi.Size() {
		return result{}, fmt.Errorf("read %s: %d bytes of %d", path, n, fi.Size())
	}
	return newResult("read", n, ops, time.Since(start)), nil
}

func randRead(path string, o options) (result, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return result{}, err
	}
	blocks := fi.Size() / int64(o.BS)
	if blocks < 1 || o.Jobs < 1 {
		return result{}, fmt.Errorf("randread %s: needs --jobs >= 1 and at least one block of %d bytes (the file has %d)", path, o.BS, fi.Size())
	}
	var (
		ops     atomic.Int64
		stop    atomic.Bool
		wg      sync.WaitGroup
		errOnce sync.Once
		first   error
	)
	fail := func(err error) {
		errOnce.Do(func() { first = err })
		stop.Store(true)
	}
	files := make([]*os.File, o.Jobs)
	for j := range files {
		if files[j], err = open(path, os.O_RDONLY, o); err != nil {
			for _, f := range files[:j] {
				f.Close()
			}
			return result{}, err
		}
		defer files[j].Close()
	}
	start := time.Now()
	for j := range o.Jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf, free, err := buffer(int(o.BS))
			if err != nil {
				fail(err)
				return
			}
			defer free()
			rng := rand.New(rand.NewPCG(uint64(j), uint64(start.UnixNano())))
			for !stop.Load() {
				off := rng.Int64N(blocks) * int64(o.BS)
				r, err := files[j].ReadAt(buf, off)
				if err == nil && r != len(buf) {
					err = io.ErrUnexpectedEOF
				}
				if err != nil {
					fail(fmt.Errorf("randread %s at %d: %w", path, off, err))
					return
				}
				ops.Add(1)
			}
		}()
	}
	timer := time.AfterFunc(time.Duration(o.Time), func() { stop.Store(true) })
	wg.Wait()
	timer.Stop()
	if first != nil {
		return result{}, first
	}
	n := ops.Load()
	return newResult("randread", n*int64(o.BS), n, time.Since(start)), nil
}
