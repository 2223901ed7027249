package store

import (
	"errors"
	"fmt"
	iofs "io/fs"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Checkpointer is a store that can write a consistent copy of itself and
// be replaced by such a copy: what a replica's snapshots are made of
// (package meta/raftlog sends the copy's files to a member that fell
// behind, which installs them with Replace).
type Checkpointer interface {
	Store
	// FS is the file system the store is on; checkpoints are written to,
	// and replacements read from, directories on it.
	FS() vfs.FS
	// Dir is the store's directory.
	Dir() string
	// Checkpoint writes a consistent copy of every batch committed so
	// far into dir (which must not exist), durable when it returns; those
	// batches are then durable in the store itself too (the WAL synced,
	// or, without one, the memtable flushed).
	Checkpoint(dir string) error
	// Replace replaces the store's whole content with the checkpoint in
	// dir, atomically: after a crash at any point the store opens as the
	// old one or the new one, never a mix. dir's files are not changed.
	Replace(dir string) error
}

// Directories beside a Pebble store's own (dir) while Replace runs:
//
//	dir.tmp  the copy being made (incomplete: removed at open)
//	dir.new  the complete copy: from the moment it exists the
//	         replacement is decided, and open finishes it
//	dir.old  the replaced store, removed once the new one is in place
const (
	replaceTmp = ".tmp"
	replaceNew = ".new"
	replaceOld = ".old"
)

// FS implements Checkpointer.
func (p *Pebble) FS() vfs.FS { return p.fs }

// Dir implements Checkpointer.
func (p *Pebble) Dir() string { return p.dir }

// Checkpoint implements Checkpointer with a pebble checkpoint (tables
// hard-linked, the WAL flushed and copied, every file synced). Without a
// WAL the memtable is flushed first: a checkpoint copies tables and WAL,
// and the commits since the last flush are in neither. That flush also
// makes them durable in the store itself, which a replica's log
// compaction after a snapshot relies on (package meta).
func (p *Pebble) Checkpoint(dir string) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if err := p.err(); err != nil {
		return err
	}
	if p.opts.NoWAL {
		if err := p.flushLocked(); err != nil {
			return fmt.Errorf("store: checkpoint: %w", err)
		}
	}
	if err := p.db.Checkpoint(dir, pebble.WithFlushedWAL()); err != nil {
		return fmt.Errorf("store: checkpoint: %w", p.checkCorrupt(err))
	}
	return nil
}

// Replace implements Checkpointer. The checkpoint's files are copied (the
// tables hard-linked, as pebble never changes a table) into dir.tmp, which
// is synced and renamed to dir.new: that rename is the commit point. Then
// the database is closed, dir renamed to dir.old and dir.new to dir, and
// the new database opened and checked as OpenPebble checks it. A crash
// before the commit point leaves the old store (dir.tmp is removed at
// the next open); after it, the next OpenPebble finishes the swap. The
// durable mark (WEFT-MARK) is not carried over: replicas do not use it.
// A store that had failed (ErrCorrupt) works again after a Replace: this
// is how a damaged member is re-synced from a snapshot.
func (p *Pebble) Replace(src string) error {
	fs := p.fs
	tmp, next := p.dir+replaceTmp, p.dir+replaceNew
	if err := fs.RemoveAll(tmp); err != nil {
		return fmt.Errorf("store: replace: %w", err)
	}
	if err := fs.MkdirAll(tmp, 0o755); err != nil {
		return fmt.Errorf("store: replace: %w", err)
	}
	names, err := fs.List(src)
	if err != nil {
		return fmt.Errorf("store: replace: %w", err)
	}
	for _, n := range names {
		from, to := fs.PathJoin(src, n), fs.PathJoin(tmp, n)
		if strings.HasSuffix(n, ".sst") {
			err = vfs.LinkOrCopy(fs, from, to)
		} else {
			err = vfs.Copy(fs, from, to)
		}
		if err == nil {
			err = syncFile(fs, to)
		}
		if err != nil {
			return fmt.Errorf("store: replace: copy %s: %w", n, err)
		}
	}
	if err := syncDir(fs, tmp); err != nil {
		return err
	}
	if err := fs.Rename(tmp, next); err != nil {
		return fmt.Errorf("store: replace: %w", err)
	}
	if err := syncDir(fs, fs.PathDir(p.dir)); err != nil {
		return err
	}
	// Committed: from here on the new store is the store.
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.db != nil {
		if err := p.db.Close(); err != nil {
			p.log.Warn("store: replace: closing the old database", "dir", p.dir, "err", err)
		}
		p.db = nil
	}
	if err := finishReplace(fs, p.dir); err != nil {
		p.fail(err)
		return err
	}
	p.failed.Store(nil)
	if err := p.open(); err != nil {
		p.fail(err)
		return err
	}
	p.log.Info("store: replaced by a checkpoint", "dir", p.dir, "from", src)
	return nil
}

// finishReplace completes a replacement that reached its commit point
// (dir.new exists), and removes what an interrupted one left behind.
func finishReplace(fs vfs.FS, dir string) error {
	tmp, next, old := dir+replaceTmp, dir+replaceNew, dir+replaceOld
	if err := fs.RemoveAll(tmp); err != nil {
		return fmt.Errorf("store: finish replace: %w", err)
	}
	if _, err := fs.Stat(next); err == nil {
		if _, err := fs.Stat(dir); err == nil {
			if err := fs.RemoveAll(old); err != nil {
				return fmt.Errorf("store: finish replace: %w", err)
			}
			if err := fs.Rename(dir, old); err != nil {
				return fmt.Errorf("store: finish replace: %w", err)
			}
		}
		if err := fs.Rename(next, dir); err != nil {
			return fmt.Errorf("store: finish replace: %w", err)
		}
		if err := syncDir(fs, fs.PathDir(dir)); err != nil {
			return err
		}
	} else if !errors.Is(err, iofs.ErrNotExist) {
		return fmt.Errorf("store: finish replace: %w", err)
	}
	if err := fs.RemoveAll(old); err != nil {
		return fmt.Errorf("store: finish replace: %w", err)
	}
	return nil
}

func syncFile(fs vfs.FS, name string) error {
	f, err := fs.OpenReadWrite(name, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

func syncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return fmt.Errorf("store: sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("store: sync %s: %w", dir, err)
	}
	return nil
}
