package store

import (
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Pebble is a Store on a pebble database.
type Pebble struct {
	db *pebble.DB
}

// PebbleOptions tunes OpenPebble. The zero value is fine.
type PebbleOptions struct {
	// InMemory keeps the database in memory (vfs.NewMem): for tests that
	// want pebble's behaviour without a directory.
	InMemory bool
	// CacheSize is the block cache size in bytes (0 = 64 MiB).
	CacheSize int64
	// FS, if set, is the file system the database lives on instead of the
	// OS's: tests pass vfs.NewCrashableMem to check what survives a crash.
	FS vfs.FS
}

// OpenPebble opens (or creates) the pebble database in dir.
func OpenPebble(dir string, o PebbleOptions) (*Pebble, error) {
	cache := o.CacheSize
	if cache == 0 {
		cache = 64 << 20
	}
	c := pebble.NewCache(cache)
	defer c.Unref()
	opts := &pebble.Options{Cache: c, Logger: quietLogger{}}
	// Bloom filters on every level (the others inherit L0's): most point
	// reads of the metadata service miss (the lookup before every create,
	// the dirent check of every create), and without a filter each miss
	// searches an index and a data block of every table that may hold the
	// key. Tables written before keep working without one.
	opts.Levels[0].FilterPolicy = bloom.FilterPolicy(10)
	switch {
	case o.FS != nil:
		opts.FS = o.FS
	case o.InMemory:
		opts.FS = vfs.NewMem()
	}
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return nil, fmt.Errorf("store: open pebble in %s: %w", dir, err)
	}
	return &Pebble{db: db}, nil
}

// Get implements Reader.
func (p *Pebble) Get(key []byte) ([]byte, error) {
	v, closer, err := p.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("store: get: %w", err)
	}
	out := append([]byte(nil), v...)
	closer.Close()
	return out, nil
}

// Scan implements Reader.
func (p *Pebble) Scan(lower, upper []byte, fn func(key, value []byte) bool) error {
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return fmt.Errorf("store: scan: %w", err)
	}
	for valid := it.First(); valid; valid = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			it.Close()
			return fmt.Errorf("store: scan: %w", err)
		}
		if !fn(it.Key(), v) {
			break
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("store: scan: %w", err)
	}
	return nil
}

// NewBatch implements Store.
func (p *Pebble) NewBatch() Batch { return &pebbleBatch{b: p.db.NewBatch()} }

// Sync implements Store: a synced empty log record flushes the WAL, and with
// it every earlier unsynced commit.
func (p *Pebble) Sync() error {
	if err := p.db.LogData(nil, pebble.Sync); err != nil {
		return fmt.Errorf("store: sync: %w", err)
	}
	return nil
}

// Close implements Store.
func (p *Pebble) Close() error {
	if err := p.db.Close(); err != nil {
		return fmt.Errorf("store: close: %w", err)
	}
	return nil
}

type pebbleBatch struct {
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
	opts := pebble.NoSync
	if sync {
		opts = pebble.Sync
	}
	err := b.b.Commit(opts)
	b.b.Close()
	if err != nil {
		return fmt.Errorf("store: commit: %w", err)
	}
	return nil
}

func (b *pebbleBatch) Close() {
	if !b.done {
		b.done = true
		b.b.Close()
	}
}

// quietLogger drops pebble's informational logging; errors still surface
// through return values.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("store: pebble fatal: "+format, args...))
}
