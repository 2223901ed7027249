package walprefill

import (
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// walCategory is the write category pebble creates its write-ahead log
// files with (pebble's wal package).
const walCategory vfs.DiskWriteCategory = "pebble-wal"

// chunk is the size of each zero write.
const chunk = 256 << 10

// defaultMemTableSize is pebble's own default (Options.MemTableSize 0).
const defaultMemTableSize = 4 << 20

// Size is how much of a log file to prefill for a database whose memtable
// holds memTableSize bytes: what pebble preallocates for a log (110 % of
// the memtable), since a log is rotated when its memtable is full.
func Size(memTableSize uint64) int64 {
	return int64(memTableSize + memTableSize/10)
}

// Prefill makes opts' database prefill its new logs: it fixes the
// memtable size (pebble's default unless set) and wraps opts.FS (the OS's
// if nil) so that each new log is written to Size of it.
func Prefill(opts *pebble.Options) {
	if opts.MemTableSize == 0 {
		opts.MemTableSize = defaultMemTableSize
	}
	fs := opts.FS
	if fs == nil {
		fs = vfs.Default
	}
	opts.FS = Wrap(fs, Size(opts.MemTableSize))
}

// FS is a vfs.FS whose new write-ahead log files are prefilled with zeros.
type FS struct {
	vfs.FS
	size int64
}

// Wrap returns fs with new write-ahead log files prefilled to size bytes.
func Wrap(fs vfs.FS, size int64) *FS {
	return &FS{FS: fs, size: size}
}

// Create implements vfs.FS.
func (fs *FS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, category)
	if err != nil || category != walCategory || fs.size <= 0 {
		return f, err
	}
	if err := prefill(f, fs.size); err != nil {
		err = fmt.Errorf("walprefill: write %d bytes of zeros into new log %s: %w", fs.size, name, err)
		return nil, errors.Join(err, f.Close(), fs.FS.Remove(name))
	}
	return f, nil
}

// prefill writes size bytes of zeros into f from offset 0, leaving f's
// offset where it was, and syncs them.
func prefill(f vfs.File, size int64) error {
	zeros := make([]byte, min(chunk, size))
	for off := int64(0); off < size; {
		n := min(int64(len(zeros)), size-off)
		if _, err := f.WriteAt(zeros[:n], off); err != nil {
			return err
		}
		off += n
	}
	return f.Sync()
}
