package store

import (
	"errors"
	"fmt"
	iofs "io/fs"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/weft-fs/weft/internal/walprefill"
)

// Pebble is a Store on a pebble database.
type Pebble struct {
	db  *pebble.DB
	fs  vfs.FS
	dir string
	log *slog.Logger
	// failed is set when pebble reports corruption or a fatal error after
	// open; every later call fails with it (see fail).
	failed atomic.Pointer[error]
	// checked is what the consistency check at open read.
	checked CheckStats
	opts    PebbleOptions
	// mu guards db against Replace: every use of db holds it shared,
	// Replace exclusively while it swaps the database.
	mu sync.RWMutex
}

// CheckStats is what OpenPebble's consistency check read.
type CheckStats struct {
	Points int64         // point keys read (every version, in every level)
	Took   time.Duration // how long the check took
}

// PebbleOptions tunes OpenPebble. The zero value is fine.
type PebbleOptions struct {
	// InMemory keeps the database in memory (vfs.NewMem): for tests that
	// want pebble's behaviour without a directory.
	InMemory bool
	// CacheSize is the block cache size in bytes (0: DefaultCacheSize).
	CacheSize int64
	// FS, if set, is the file system the database lives on instead of the
	// OS's: tests pass vfs.NewCrashableMem to check what survives a crash.
	FS vfs.FS
	// Logger receives pebble's own log: errors, background errors and
	// corruption at error level, everything else at debug, each message
	// prefixed "store: pebble". Nil: slog.Default().
	Logger *slog.Logger
	// SkipCheck skips the consistency check at open (see OpenPebble).
	SkipCheck bool
	// NoWAL opens the database without a write-ahead log (pebble's
	// DisableWAL): a commit is a memtable insert only, and it becomes
	// durable when its memtable is flushed to a table (when it fills, or
	// by Flush, Sync, Commit(true), Checkpoint and Close, which all flush
	// first). After a crash the store is its last flushed state: a
	// prefix of its batches, whole. For a replica's store, whose raft log
	// holds every entry and is applied again from the index the store
	// recorded (package meta); never for a store that is its own record.
	// A WAL left by an earlier open with one is still replayed, then
	// flushed, at open.
	NoWAL bool
}

// OpenPebble opens (or creates) the pebble database in dir. It refuses,
// with an error wrapping ErrCorrupt, a database whose WAL or tables fail a
// checksum:
//
//   - the database is kept at pebble.FormatNewest, whose WAL chunks carry
//     the offset synced so far, so that replay tells a torn tail (a crash
//     mid-write, tolerated) from a damaged record followed by synced ones
//     (refused: pebble would otherwise replay up to the damage, drop the
//     rest and open as if nothing had happened). Damage in the WAL's last
//     32 KiB block, or a WAL cut short, still looks like a torn tail to
//     pebble; package meta's durable mark catches those (see Mark).
//   - unless SkipCheck, every table is read through with its block
//     checksums verified (pebble's CheckLevels), so a damaged table is
//     refused at open instead of failing a read, or a compaction, later.
//     It reads the whole database: see BenchmarkOpenCheck for its cost.
//
// A directory that holds files but no pebble database is refused with
// ErrNotStore, so a wrong --data does not become an empty store beside
// someone else's files.
func OpenPebble(dir string, o PebbleOptions) (*Pebble, error) {
	p := &Pebble{dir: dir, log: o.Logger, opts: o}
	if p.log == nil {
		p.log = slog.Default()
	}
	switch {
	case o.FS != nil:
		p.fs = o.FS
	case o.InMemory:
		p.fs = vfs.NewMem()
	default:
		p.fs = vfs.Default
	}
	// A Replace that a crash interrupted is finished first (or undone,
	// if it had not reached its commit point): see Replace.
	if err := finishReplace(p.fs, dir); err != nil {
		return nil, err
	}
	if err := checkIsStore(p.fs, dir); err != nil {
		return nil, err
	}
	if err := p.open(); err != nil {
		return nil, err
	}
	return p, nil
}

// DefaultCacheSize is the pebble store's block cache when
// PebbleOptions.CacheSize is 0 (weft meta --store-cache).
const DefaultCacheSize = 64 << 20

// open opens the database in p.dir and checks it (p.db is set on success).
func (p *Pebble) open() error {
	dir, o := p.dir, p.opts
	cache := o.CacheSize
	if cache == 0 {
		cache = DefaultCacheSize
	}
	c := pebble.NewCache(cache)
	defer c.Unref()
	opts := &pebble.Options{
		Cache: c, Logger: pebbleLogger{p}, FS: p.fs,
		FormatMajorVersion: pebble.FormatNewest,
		DisableWAL:         o.NoWAL,
		EventListener: &pebble.EventListener{
			BackgroundError: func(err error) {
				p.log.Error("store: pebble background error", "dir", dir, "err", err)
			},
			DataCorruption: func(info pebble.DataCorruptionInfo) {
				// Not info's own format: its %+v details carry a stack.
				p.fail(fmt.Errorf("%w: %s: %v", ErrCorrupt, info.Path, info.Details))
			},
		},
	}
	if !o.NoWAL && !o.InMemory {
		// Every commit group is synced: new logs written full before use
		// sync as cheaply as recycled ones (package walprefill).
		walprefill.Prefill(opts)
	}
	// Bloom filters on every level (the others inherit L0's): most point
	// reads of the metadata service miss (the lookup before every create,
	// the dirent check of every create), and without a filter each miss
	// searches an index and a data block of every table that may hold the
	// key. Tables written before keep working without one.
	opts.Levels[0].FilterPolicy = bloom.FilterPolicy(10)
	// Data blocks of 32 KiB (pebble's default is 4 KiB; the other levels
	// inherit L0's). The store keeps a copy of every small file (meta,
	// copies.go): a copy of a few KiB filled a 4 KiB block by itself, so
	// reading small files cold cost the leader a block read from the
	// disk, and its allocation and checksum, per file. Copies are keyed
	// by inode number, so files made together lie together: a block now
	// holds several, and a read of files in the order they were written
	// (mdtest-hard's read, a training set's shards) finds most in the
	// block cache. Point reads of small records (names, inodes) read a
	// bigger block when cold, at no measured cost to stats, creates or
	// unlinks (docs/performance.md, "Bigger blocks in the metadata
	// store"). Tables written with 4 KiB blocks are read as they are.
	opts.Levels[0].BlockSize = 32 << 10
	db, err := pebble.Open(dir, opts)
	if pebble.IsCorruptionError(err) {
		return fmt.Errorf("store: open pebble in %s: %w: %w (%s)", dir, ErrCorrupt, err, RecoverHint)
	}
	if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EACCES) || (err != nil && strings.Contains(err.Error(), "lock held by current process")) {
		return fmt.Errorf("store: %s: %w: another process (a weft meta, or a weft up, on the same --data) holds its lock; stop it first (%v)", dir, ErrInUse, err)
	}
	if err != nil {
		return fmt.Errorf("store: open pebble in %s: %w", dir, err)
	}
	p.db = db
	// The WAL that Open created was begun before the format version took
	// effect and so lacks sync offsets: rotate to one that has them (the
	// memtable is empty after replay, so this writes nothing). Without a
	// WAL (NoWAL) this flushes what a WAL of an earlier open replayed, so
	// that it is in a table before any new batch, which no WAL records,
	// follows it.
	if err := db.Flush(); err != nil {
		db.Close()
		return fmt.Errorf("store: open pebble in %s: rotate WAL: %w", dir, err)
	}
	if !o.SkipCheck {
		if err := p.check(); err != nil {
			db.Close()
			return fmt.Errorf("store: open pebble in %s: %w", dir, err)
		}
	}
	return nil
}

// checkIsStore refuses a directory that holds files but no pebble database.
func checkIsStore(fs vfs.FS, dir string) error {
	names, err := fs.List(dir)
	if errors.Is(err, iofs.ErrNotExist) {
		return nil // pebble creates it
	}
	if err != nil {
		return fmt.Errorf("store: %s: %w", dir, err)
	}
	desc, err := pebble.Peek(dir, fs)
	if err != nil {
		return fmt.Errorf("store: %s: %w", dir, err)
	}
	if desc.Exists {
		return nil
	}
	for _, n := range names {
		if n == MarkFile {
			return fmt.Errorf("store: %s has a durable mark but no database: the database was removed: %w (%s)",
				dir, ErrCorrupt, RecoverHint)
		}
	}
	for _, n := range names {
		if n != "lost+found" {
			return fmt.Errorf("store: %s holds %q but no pebble database: %w", dir, n, ErrNotStore)
		}
	}
	return nil
}

// check reads every level through with block checksums verified.
func (p *Pebble) check() error {
	start := time.Now()
	var stats pebble.CheckLevelsStats
	if err := p.db.CheckLevels(&stats); err != nil {
		p.fail(fmt.Errorf("%w: %w", ErrCorrupt, err))
		return fmt.Errorf("consistency check: %w (%s)", p.err(), RecoverHint)
	}
	if err := p.err(); err != nil {
		return fmt.Errorf("consistency check: %w", err)
	}
	p.checked = CheckStats{Points: stats.NumPoints, Took: time.Since(start)}
	p.log.Debug("store: consistency check passed", "dir", p.dir, "points", stats.NumPoints, "took", p.checked.Took)
	return nil
}

// Checked returns what the consistency check at open read (zero with
// SkipCheck).
func (p *Pebble) Checked() CheckStats { return p.checked }

// fail records that the database can no longer be trusted, logs it at
// error, and makes every later call return err.
func (p *Pebble) fail(err error) {
	p.log.Error("store: pebble: the database is damaged; refusing further use", "dir", p.dir, "err", err)
	p.failed.CompareAndSwap(nil, &err)
}

// checkCorrupt fails the store if err is pebble's corruption error (a
// checksum that did not match) and returns the error to report.
func (p *Pebble) checkCorrupt(err error) error {
	if pebble.IsCorruptionError(err) {
		p.fail(fmt.Errorf("%w: %w", ErrCorrupt, err))
		return p.err()
	}
	return err
}

// Flush writes the memtable out as a table, durably (tests, an operator
// who wants the WAL short before a copy, and every durability point of a
// store without a WAL).
func (p *Pebble) Flush() error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.flushLocked()
}

// flushLocked is Flush for a caller that holds p.mu.
func (p *Pebble) flushLocked() error {
	if err := p.err(); err != nil {
		return err
	}
	if err := p.db.Flush(); err != nil {
		return fmt.Errorf("store: flush: %w", p.checkCorrupt(err))
	}
	return nil
}

// NoWAL reports whether the store runs without a write-ahead log
// (PebbleOptions.NoWAL): what it has durably is its last flush.
func (p *Pebble) NoWAL() bool { return p.opts.NoWAL }

// Err returns the error every call returns once the database failed
// (nil while it is sound).
func (p *Pebble) Err() error { return p.err() }

// err is the error every call returns once the database failed.
func (p *Pebble) err() error {
	if e := p.failed.Load(); e != nil {
		return *e
	}
	return nil
}

// Get implements Reader.
func (p *Pebble) Get(key []byte) ([]byte, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if err := p.err(); err != nil {
		return nil, err
	}
	return p.get(p.db, key)
}

func (p *Pebble) get(r pebble.Reader, key []byte) ([]byte, error) {
	v, closer, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("store: get: %w", p.checkCorrupt(err))
	}
	out := append([]byte(nil), v...)
	closer.Close()
	return out, nil
}

// Scan implements Reader.
func (p *Pebble) Scan(lower, upper []byte, fn func(key, value []byte) bool) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if err := p.err(); err != nil {
		return err
	}
	return p.scan(p.db, lower, upper, fn)
}

func (p *Pebble) scan(r pebble.Reader, lower, upper []byte, fn func(key, value []byte) bool) error {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return fmt.Errorf("store: scan: %w", err)
	}
	for valid := it.First(); valid; valid = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			it.Close()
			return fmt.Errorf("store: scan: %w", p.checkCorrupt(err))
		}
		if !fn(it.Key(), v) {
			break
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("store: scan: %w", p.checkCorrupt(err))
	}
	return p.err()
}

// View implements Store with a pebble snapshot. The view holds mu shared
// until closed (Replace waits for it); its reads do not take mu again (a
// second shared lock would wait behind a waiting Replace: a deadlock).
func (p *Pebble) View() (View, error) {
	p.mu.RLock()
	if err := p.err(); err != nil {
		p.mu.RUnlock()
		return nil, err
	}
	return &pebbleView{p: p, snap: p.db.NewSnapshot()}, nil
}

type pebbleView struct {
	p    *Pebble
	snap *pebble.Snapshot
}

func (v *pebbleView) Get(key []byte) ([]byte, error) { return v.p.get(v.snap, key) }

func (v *pebbleView) Scan(lower, upper []byte, fn func(key, value []byte) bool) error {
	return v.p.scan(v.snap, lower, upper, fn)
}

func (v *pebbleView) Close() {
	v.snap.Close()
	v.p.mu.RUnlock()
}

// NewBatch implements Store.
func (p *Pebble) NewBatch() Batch {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return &pebbleBatch{p: p, db: p.db, b: p.db.NewBatch()}
}

// Sync implements Store: a synced empty log record flushes the WAL, and with
// it every earlier unsynced commit. Without a WAL it flushes the memtable.
func (p *Pebble) Sync() error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if err := p.err(); err != nil {
		return err
	}
	if p.opts.NoWAL {
		return p.flushLocked()
	}
	if err := p.db.LogData(nil, pebble.Sync); err != nil {
		return fmt.Errorf("store: sync: %w", p.checkCorrupt(err))
	}
	return nil
}

// Close implements Store. Without a WAL the memtable is flushed first, so
// a clean stop keeps every commit (a crash keeps the last flush).
func (p *Pebble) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.db == nil {
		return nil // a Replace failed to reopen it
	}
	var ferr error
	if p.opts.NoWAL && p.err() == nil {
		if ferr = p.db.Flush(); ferr != nil {
			ferr = fmt.Errorf("store: close: flush: %w", ferr)
		}
	}
	if err := p.db.Close(); err != nil {
		return errors.Join(ferr, fmt.Errorf("store: close: %w", err))
	}
	return ferr
}

type pebbleBatch struct {
	p    *Pebble
	db   *pebble.DB // the database the batch was made for
	b    *pebble.Batch
	done bool
}

func (b *pebbleBatch) Set(key, value []byte) { _ = b.b.Set(key, value, nil) }
func (b *pebbleBatch) Delete(key []byte)     { _ = b.b.Delete(key, nil) }
func (b *pebbleBatch) DeletePrefix(prefix []byte) {
	end := PrefixEnd(prefix)
	if end == nil {
		end = []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	}
	_ = b.b.DeleteRange(prefix, end, nil)
}
func (b *pebbleBatch) Len() int { return int(b.b.Count()) }

func (b *pebbleBatch) Commit(sync bool) error {
	if b.done {
		return errors.New("store: batch reused")
	}
	b.done = true
	b.p.mu.RLock()
	defer b.p.mu.RUnlock()
	if err := b.p.err(); err != nil {
		b.b.Close()
		return err
	}
	if b.db != b.p.db {
		b.b.Close()
		return errors.New("store: commit: the store was replaced since the batch was made")
	}
	opts := pebble.NoSync
	if sync && !b.p.opts.NoWAL {
		opts = pebble.Sync
	}
	err := b.b.Commit(opts)
	b.b.Close()
	if err != nil {
		return fmt.Errorf("store: commit: %w", b.p.checkCorrupt(err))
	}
	if sync && b.p.opts.NoWAL {
		// Without a WAL a batch is durable once its memtable is flushed.
		return b.p.flushLocked()
	}
	return nil
}

func (b *pebbleBatch) Close() {
	if !b.done {
		b.done = true
		b.b.Close()
	}
}

// pebbleLogger passes pebble's log to slog: pebble reports background
// failures only through it, so nothing is dropped.
type pebbleLogger struct{ p *Pebble }

func (l pebbleLogger) Infof(format string, args ...any) {
	l.p.log.Debug("store: pebble: " + fmt.Sprintf(format, args...))
}

func (l pebbleLogger) Errorf(format string, args ...any) {
	l.p.log.Error("store: pebble: " + fmt.Sprintf(format, args...))
}

// Fatalf is what pebble calls when it cannot go on (an invariant violated,
// a MANIFEST write that failed); pebble's contract is that it does not
// return. The message is logged at error and the store marked failed
// before the panic, so the cause is in the log even when the panic's
// output is lost. Corruption does not come here: the DataCorruption
// listener fails the store instead and the caller sees ErrCorrupt.
func (l pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	l.p.fail(fmt.Errorf("store: pebble fatal: %s", msg))
	panic("store: pebble fatal: " + msg)
}
