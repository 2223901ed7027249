package storage

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/weft-fs/weft/internal/pace"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/storage/vfs"
)

func TestParseObjName(t *testing.T) {
	for _, tc := range []struct {
		name string
		obj  proto.ObjectID
		ok   bool
	}{
		{"77.2", proto.ObjectID{Ino: 77, Stripe: 2}, true},
		{"77.1f.2", proto.ObjectID{Ino: 77, Gen: 0x1f, Stripe: 2}, true},
		{"18446744073709551615.ffffffffffffffff.4294967295", proto.ObjectID{Ino: 1<<64 - 1, Gen: 1<<64 - 1, Stripe: 1<<32 - 1}, true},
		{"77.2.crc", proto.ObjectID{}, false},
		{"77.1f.2.crc", proto.ObjectID{}, false},
		{"77.1f.2.ver", proto.ObjectID{}, false},
		{"77.0.2", proto.ObjectID{}, false}, // generation 0 is spelled without it
		{"077.2", proto.ObjectID{}, false},
		{"+77.2", proto.ObjectID{}, false},
		{"77.1F.2", proto.ObjectID{}, false}, // objName writes lower case
		{"77", proto.ObjectID{}, false},
		{"77.4294967296", proto.ObjectID{}, false},
		{"target.json", proto.ObjectID{}, false},
		{"", proto.ObjectID{}, false},
	} {
		obj, ok := parseObjName(tc.name)
		if ok != tc.ok || obj != tc.obj {
			t.Errorf("parseObjName(%q) = %+v, %v; want %+v, %v", tc.name, obj, ok, tc.obj, tc.ok)
		}
	}
}

// FuzzParseObjName: names come off the disk; a name parses only to the
// object whose name it is.
func FuzzParseObjName(f *testing.F) {
	for _, s := range []string{"1.2", "1.a.2", "1.2.crc", "", ".", "..", "9.0.1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if obj, ok := parseObjName(name); ok && objName(obj) != name {
			t.Fatalf("%q parsed to %+v, named %q", name, obj, objName(obj))
		}
	})
}

// flip flips one byte of an object's data file at off.
func flip(t *testing.T, tg *Target, obj proto.ObjectID, off int64) {
	t.Helper()
	f, err := tg.fs.OpenFile(tg.objPath(obj), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x40
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// corruptSet collects what a target reports corrupt.
type corruptSet struct {
	mu   sync.Mutex
	objs []proto.ObjectID
}

func (c *corruptSet) hook(obj proto.ObjectID) {
	c.mu.Lock()
	c.objs = append(c.objs, obj)
	c.mu.Unlock()
}

func (c *corruptSet) list() []proto.ObjectID {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := slices.Clone(c.objs)
	slices.SortFunc(out, func(a, b proto.ObjectID) int { return int(a.Ino) - int(b.Ino) })
	return slices.Compact(out)
}

// TestScrubPass: a pass checks every object's data, skips holes and files
// that are not objects, reports exactly the corrupt objects (a flipped
// byte deep in a large object, an unreadable sidecar), counts its bytes
// and objects, and records its times in scrub.json, which a reopened
// target reads back.
func TestScrubPass(t *testing.T) {
	mem := newMemFS(t)
	log, _ := newLogger()
	tg := openMem(t, mem, TargetOptions{Logger: log})
	var got corruptSet
	tg.SetCorruptHook(got.hook)

	good := proto.ObjectID{Ino: 1, Gen: 9, Stripe: 0}
	big := proto.ObjectID{Ino: 2, Gen: 9, Stripe: 1}    // 3.5 chunks, flipped in the third
	sparse := proto.ObjectID{Ino: 3, Gen: 9, Stripe: 0} // data, a hole of 8 MiB, data
	badCRC := proto.ObjectID{Ino: 4, Stripe: 3}         // generation 0, sidecar header broken
	old := proto.ObjectID{Ino: 256 + 1, Stripe: 0}      // same fan-out directory as good
	var want uint64
	write := func(obj proto.ObjectID, off int, b []byte) {
		if _, err := tg.Write(ctx, obj, uint64(off), b); err != nil {
			t.Fatal(err)
		}
		want += uint64(len(b))
	}
	write(good, 0, pattern(1, 10000))
	write(big, 0, pattern(2, 3*scrubChunk+scrubChunk/2))
	write(sparse, 0, pattern(3, 5000))
	write(sparse, 8<<20, pattern(4, 4096))
	want += 2*BlockSize - 5000 // the scrub checks whole blocks: the rest of the second is zeros
	write(badCRC, 0, pattern(5, 100))
	write(old, 0, pattern(6, 1))
	flip(t, tg, big, 2*scrubChunk+12345)
	tg.cache.drop(badCRC) // the next open reads the broken header
	f, err := mem.OpenFile(tg.objPath(badCRC)+".crc", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte{0xee}, 9)
	f.Close()
	// Not objects: skipped.
	for _, junk := range []string{"objects/05/junk", "objects/05/5.1.tmp", "objects/06/7.1"} {
		if f, err := mem.Create(filepath.Join(tg.Dir(), junk)); err != nil {
			t.Fatal(err)
		} else {
			f.WriteAt([]byte("x"), 0)
			f.Close()
		}
	}

	before := time.Now().UnixNano()
	var paced uint64
	if err := tg.ScrubPass(ctx, pace.New(0), func(n uint64) { paced += n }); err != nil {
		t.Fatal(err)
	}
	st := tg.ScrubState()
	if gotObjs, wantObjs := got.list(), []proto.ObjectID{big, badCRC}; !slices.Equal(gotObjs, wantObjs) {
		t.Fatalf("reported corrupt %+v, want %+v", gotObjs, wantObjs)
	}
	// The corrupt big object stops at its bad chunk; the broken sidecar
	// reads nothing. Everything else is checked whole, holes skipped.
	wantBytes := want - (3*scrubChunk + scrubChunk/2 - 2*scrubChunk) - 100
	if st.Running || st.Objects != 5 || st.Corrupt != 2 || st.Passes != 1 || st.Bytes != wantBytes || st.Total != wantBytes || paced != wantBytes {
		t.Fatalf("state after the pass %+v (paced %d), want 5 objects, 2 corrupt, %d bytes", st, paced, wantBytes)
	}
	if st.Start < before || st.End < st.Start {
		t.Fatalf("pass times %d..%d, began after %d", st.Start, st.End, before)
	}
	tg.Close()
	tg2 := openMem(t, mem, TargetOptions{})
	tg2.loadScrubRecord()
	if st2 := tg2.ScrubState(); st2.Start != st.Start || st2.End != st.End {
		t.Fatalf("reopened target's scrub times %d..%d, want %d..%d", st2.Start, st2.End, st.Start, st.End)
	}
}

// TestScrubReadReports: a client's read that finds a corrupt block reports
// the object as the scrub does.
func TestScrubReadReports(t *testing.T) {
	tg := openMem(t, newMemFS(t), TargetOptions{})
	var got corruptSet
	tg.SetCorruptHook(got.hook)
	obj := proto.ObjectID{Ino: 12, Gen: 3}
	if _, err := tg.Write(ctx, obj, 0, pattern(1, 3*BlockSize)); err != nil {
		t.Fatal(err)
	}
	if _, err := tg.Read(ctx, obj, 0, make([]byte, 3*BlockSize)); err != nil {
		t.Fatal(err)
	}
	if l := got.list(); len(l) != 0 {
		t.Fatalf("a good read reported %+v", l)
	}
	flip(t, tg, obj, BlockSize+1)
	if _, err := tg.Read(ctx, obj, 0, make([]byte, 3*BlockSize)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("read of a flipped byte: %v", err)
	}
	if l := got.list(); !slices.Equal(l, []proto.ObjectID{obj}) {
		t.Fatalf("reported %+v", l)
	}
}

// TestScrubPaced: the scrub reads no chunk before the pacer allows it: at
// one byte per second, the first chunk goes at once and the second never
// within the test, so cancelling finds exactly one chunk checked.
func TestScrubPaced(t *testing.T) {
	tg := openMem(t, newMemFS(t), TargetOptions{})
	obj := proto.ObjectID{Ino: 5, Gen: 1}
	if _, err := tg.Write(ctx, obj, 0, pattern(1, 3*scrubChunk)); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		n   uint64
		err error
	}
	res := make(chan result, 1)
	go func() {
		n, err := tg.ScrubObject(cctx, obj, pace.New(1), make([]byte, scrubChunk))
		res <- result{n, err}
	}()
	deadline := time.Now().Add(time.Minute) // against hangs only
	for tg.ScrubState().Bytes < scrubChunk {
		if time.Now().After(deadline) {
			t.Fatal("the first chunk was never checked")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	r := <-res
	if r.n != scrubChunk || !errors.Is(r.err, context.Canceled) {
		t.Fatalf("paced scrub checked %d bytes, %v; want one chunk (%d), cancelled", r.n, r.err, scrubChunk)
	}
}

// TestScrubStartNow: with no interval, passes run only when asked for
// (StartScrub), one per request.
func TestScrubStartNow(t *testing.T) {
	srv, tg := serveMem(t, nil, 3)
	if _, err := tg.Write(ctx, proto.ObjectID{Ino: 1}, 0, pattern(1, 100)); err != nil {
		t.Fatal(err)
	}
	sc := newScrubber()
	sc.interval.Store(0)
	cctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { sc.loop(cctx, tg) })
	defer func() { cancel(); wg.Wait() }()
	if err := srv.StartScrub(ctx, 4); err == nil {
		t.Fatal("StartScrub of a target the server does not serve succeeded")
	}
	for want := uint64(1); want <= 2; want++ {
		if err := srv.StartScrub(ctx, 3); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(time.Minute) // against hangs only
		for st := tg.ScrubState(); st.Passes < want; st = tg.ScrubState() {
			if time.Now().After(deadline) {
				t.Fatalf("pass %d never ran: %+v", want, st)
			}
			time.Sleep(5 * time.Millisecond)
		}
		if st := tg.ScrubState(); st.Passes != want || st.Objects != 1 || st.Bytes != 100 || st.Target != 3 {
			t.Fatalf("after request %d: %+v", want, st)
		}
	}
}

// TestScrubParams: scrub.rate and scrub.interval reach the scrubber;
// unset or unreadable values give the defaults.
func TestScrubParams(t *testing.T) {
	log, _ := newLogger()
	cfg := Config{Logger: log}
	sc := newScrubber()
	applyStorageParams(cfg, sc, map[string]string{"scrub.rate": "10MiB", "scrub.interval": "72h0m0s"})
	if sc.pace.Rate() != 10<<20 || sc.interval.Load() != 72*time.Hour {
		t.Fatalf("rate %d, interval %v", sc.pace.Rate(), sc.interval.Load())
	}
	applyStorageParams(cfg, sc, map[string]string{"scrub.rate": "0", "scrub.interval": "0s"})
	if sc.pace.Rate() != 0 || sc.interval.Load() != 0 {
		t.Fatalf("off: rate %d, interval %v", sc.pace.Rate(), sc.interval.Load())
	}
	applyStorageParams(cfg, sc, map[string]string{"scrub.rate": "fast"})
	if sc.pace.Rate() != DefaultScrubRate || sc.interval.Load() != DefaultScrubInterval {
		t.Fatalf("defaults: rate %d, interval %v", sc.pace.Rate(), sc.interval.Load())
	}
}

// TestScrubNotClientIO: the scrub's reads do not count as the target's
// I/O (what df and the dashboard show as clients' throughput).
func TestScrubNotClientIO(t *testing.T) {
	tg := openMem(t, newMemFS(t), TargetOptions{})
	if _, err := tg.Write(ctx, proto.ObjectID{Ino: 1}, 0, pattern(1, 3*BlockSize)); err != nil {
		t.Fatal(err)
	}
	before, err := tg.Usage()
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.ScrubPass(ctx, pace.New(0), nil); err != nil {
		t.Fatal(err)
	}
	after, err := tg.Usage()
	if err != nil {
		t.Fatal(err)
	}
	if tg.ScrubState().Bytes != 3*BlockSize || after.IO != before.IO {
		t.Fatalf("scrub state %+v; I/O counters %+v before, %+v after", tg.ScrubState(), before.IO, after.IO)
	}
	if _, err := tg.Read(ctx, proto.ObjectID{Ino: 1}, 0, make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	if u, _ := tg.Usage(); u.IO.Reads != before.IO.Reads+1 || u.IO.ReadBytes != before.IO.ReadBytes+100 {
		t.Fatalf("a client read counted as %+v (was %+v)", u.IO, before.IO)
	}
}

// flakyReceiver records reports; the first fails.
type flakyReceiver struct {
	mu      sync.Mutex
	calls   int
	reports []proto.ScrubReport
}

func (f *flakyReceiver) ReportScrub(_ context.Context, r proto.ScrubReport) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.calls == 1 {
		return errors.New("meta: not now")
	}
	f.reports = append(f.reports, r)
	return nil
}

func (f *flakyReceiver) found() []proto.ObjectID {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []proto.ObjectID
	for _, r := range f.reports {
		out = append(out, r.Found...)
	}
	return out
}

// TestScrubReporter: objects a target finds corrupt reach the metadata
// service with the target's state, once each, and again after a failed
// report.
func TestScrubReporter(t *testing.T) {
	srv, tg := serveMem(t, nil, 3)
	rep := newScrubReporter()
	rep.every = 5 * time.Millisecond
	tg.SetCorruptHook(func(obj proto.ObjectID) { rep.found(tg, obj) })
	obj := proto.ObjectID{Ino: 9, Gen: 2, Stripe: 1}
	if _, err := tg.Write(ctx, obj, 0, pattern(1, BlockSize)); err != nil {
		t.Fatal(err)
	}
	flip(t, tg, obj, 7)
	for range 3 { // three reads find it: one object to report
		if _, err := tg.Read(ctx, obj, 0, make([]byte, BlockSize)); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("read: %v", err)
		}
	}
	rec := &flakyReceiver{}
	log, _ := newLogger()
	cctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { rep.loop(cctx, srv, rec, log) })
	defer func() { cancel(); wg.Wait() }()
	deadline := time.Now().Add(time.Minute) // against hangs only
	for len(rec.found()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the corrupt object was never reported")
		}
		time.Sleep(5 * time.Millisecond)
	}
	rec.mu.Lock()
	first := rec.reports[0]
	calls := rec.calls
	rec.mu.Unlock()
	if calls < 2 || first.Target != 3 || first.Corrupt != 3 || !slices.Equal(first.Found, []proto.ObjectID{obj}) {
		t.Fatalf("after %d calls the first report that went through: %+v", calls, first)
	}
	// Reported once: later reports (the state, unchanged) name it no more.
	time.Sleep(50 * time.Millisecond)
	if got := rec.found(); len(got) != 1 {
		t.Fatalf("reported %d times: %+v", len(got), got)
	}
}

// TestScrubDiskErrors: an object the disk fails to read (EIO) is reported
// as corrupt; one skipped for a reason that is not the object's (out of
// descriptors) is not, and the pass goes on past both.
func TestScrubDiskErrors(t *testing.T) {
	fs := vfs.NewFaulty(newMemFS(t))
	log, _ := newLogger()
	tg := openMem(t, fs, TargetOptions{Logger: log})
	var got corruptSet
	tg.SetCorruptHook(got.hook)
	eio, emfile, good := proto.ObjectID{Ino: 1}, proto.ObjectID{Ino: 2}, proto.ObjectID{Ino: 3}
	for _, obj := range []proto.ObjectID{eio, emfile, good} {
		if _, err := tg.Write(ctx, obj, 0, pattern(int(obj.Ino), 2*BlockSize)); err != nil {
			t.Fatal(err)
		}
	}
	fs.Inject(vfs.Rule{Ops: vfs.OpRead, Match: vfs.Suffix("/" + objName(eio)), Err: syscall.EIO})
	fs.Inject(vfs.Rule{Ops: vfs.OpRead, Match: vfs.Suffix("/" + objName(emfile)), Err: syscall.EMFILE})
	if err := tg.ScrubPass(ctx, pace.New(0), nil); err != nil {
		t.Fatal(err)
	}
	if l := got.list(); !slices.Equal(l, []proto.ObjectID{eio}) {
		t.Fatalf("reported %+v, want only the object the disk failed to read", l)
	}
	if st := tg.ScrubState(); st.Objects != 3 || st.Bytes != 2*BlockSize {
		t.Fatalf("state %+v: want 3 objects visited, one checked whole", st)
	}
}
