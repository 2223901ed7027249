package store

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	iofs "io/fs"
	"path/filepath"

	"github.com/weft-fs/weft/wire"
)

// Mark is the durable high-water mark package meta keeps outside the
// store's own log: how many batches the store had applied and synced at
// some moment, and which file system it belongs to. After a restart a
// store that has applied fewer batches than its mark says lost
// acknowledged writes (a WAL cut short or damaged where pebble cannot
// tell, an older copy put back), which pebble alone would open without a
// word.
type Mark struct {
	FSID    string // the file system's uuid ("" before it was known)
	Applied uint64 // the store had durably applied at least this many batches
}

// Marker is implemented by stores that keep a Mark beside them (Pebble: a
// file in the database directory; Mem: in memory).
type Marker interface {
	// ReadMark returns the mark; ok is false if none was ever written.
	// A mark that fails its checksum is an error wrapping ErrCorrupt.
	ReadMark() (m Mark, ok bool, err error)
	// WriteMark replaces the mark durably and atomically.
	WriteMark(m Mark) error
}

// MarkFile is the name of the mark's file in a pebble store's directory.
const MarkFile = "WEFT-MARK"

const (
	markMagic   = "weftmark"
	markVersion = 1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// EncodeMark is the mark's file format: magic, version, fsid, applied,
// then a CRC-32C of all of it.
func EncodeMark(m Mark) []byte {
	e := wire.NewEncoder(64)
	e.B = append(e.B, markMagic...)
	e.U8(markVersion)
	e.String(m.FSID)
	e.U64(m.Applied)
	e.U32(crc32.Checksum(e.B, castagnoli))
	return e.B
}

// DecodeMark parses a mark written by EncodeMark; damage is an error
// wrapping ErrCorrupt.
func DecodeMark(b []byte) (Mark, error) {
	if len(b) < len(markMagic)+4 || !bytes.HasPrefix(b, []byte(markMagic)) {
		return Mark{}, fmt.Errorf("store: mark: not a weft mark: %w", ErrCorrupt)
	}
	body, sum := b[:len(b)-4], b[len(b)-4:]
	if crc32.Checksum(body, castagnoli) != wire.NewDecoder(sum).U32() {
		return Mark{}, fmt.Errorf("store: mark: checksum mismatch: %w", ErrCorrupt)
	}
	d := wire.NewDecoder(body[len(markMagic):])
	if v := d.U8(); v != markVersion {
		return Mark{}, fmt.Errorf("store: mark: version %d not supported", v)
	}
	m := Mark{FSID: d.StringMax(256), Applied: d.U64()}
	if err := d.Done(); err != nil {
		return Mark{}, fmt.Errorf("store: mark: %w: %w", ErrCorrupt, err)
	}
	return m, nil
}

// ReadMark implements Marker.
func (p *Pebble) ReadMark() (Mark, bool, error) {
	f, err := p.fs.Open(filepath.Join(p.dir, MarkFile))
	if errors.Is(err, iofs.ErrNotExist) {
		return Mark{}, false, nil
	}
	if err != nil {
		return Mark{}, false, fmt.Errorf("store: read mark: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return Mark{}, false, fmt.Errorf("store: read mark: %w", err)
	}
	m, err := DecodeMark(b)
	if err != nil {
		return Mark{}, false, fmt.Errorf("%w (%s)", err, filepath.Join(p.dir, MarkFile))
	}
	return m, true, nil
}

// WriteMark implements Marker: a new file is written and synced, then
// renamed over the old one and the directory synced, so a crash leaves
// the old mark or the new one.
func (p *Pebble) WriteMark(m Mark) error {
	tmp := filepath.Join(p.dir, MarkFile+".tmp")
	f, err := p.fs.Create(tmp, "")
	if err != nil {
		return fmt.Errorf("store: write mark: %w", err)
	}
	if _, err = f.Write(EncodeMark(m)); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = p.fs.Rename(tmp, filepath.Join(p.dir, MarkFile))
	}
	if err == nil {
		var d interface {
			Sync() error
			Close() error
		}
		if d, err = p.fs.OpenDir(p.dir); err == nil {
			err = d.Sync()
			d.Close()
		}
	}
	if err != nil {
		return fmt.Errorf("store: write mark: %w", err)
	}
	return nil
}

// ReadMark implements Marker.
func (m *Mem) ReadMark() (Mark, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mark == nil {
		return Mark{}, false, nil
	}
	return *m.mark, true, nil
}

// WriteMark implements Marker.
func (m *Mem) WriteMark(mk Mark) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mark = &mk
	return nil
}
