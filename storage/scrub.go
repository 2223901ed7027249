package storage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/weft-fs/weft/internal/pace"
	"github.com/weft-fs/weft/proto"
)

// Scrub defaults (run-time parameters scrub.rate and scrub.interval).
const (
	// DefaultScrubRate bounds the bytes/s the scrub reads over all the
	// targets of one storage server: a few percent of a disk's bandwidth.
	DefaultScrubRate = 50 << 20
	// DefaultScrubInterval is the time from the start of one pass of a
	// target to the start of the next.
	DefaultScrubInterval = 7 * 24 * time.Hour
	// scrubChunk is what one read of the scrub checks (under the object's
	// read lock, so writers wait at most for one chunk).
	scrubChunk = 1 << 20
	// scrubFile keeps a target's last pass times across restarts.
	scrubFile = "scrub.json"
	// scrubFileVersion is the format of scrubFile.
	scrubFileVersion = 1
	// scrubRecheck is how often a waiting scrub loop looks again at its
	// interval (a run-time parameter may have changed it).
	scrubRecheck = 30 * time.Second
)

// scrubRecord is what scrub.json holds: when the last complete pass
// began and ended (Unix ns).
type scrubRecord struct {
	Version int   `json:"version"`
	Start   int64 `json:"start"`
	End     int64 `json:"end"`
}

// parseObjName is objName's inverse: it returns the object a file name in
// a fan-out directory names, and false for anything else (sidecars,
// version files, temporary files, names objName would not make).
func parseObjName(name string) (proto.ObjectID, bool) {
	parts := strings.Split(name, ".")
	if len(parts) != 2 && len(parts) != 3 {
		return proto.ObjectID{}, false
	}
	ino, err := strconv.ParseUint(parts[0], 10, 64)
	if err != nil {
		return proto.ObjectID{}, false
	}
	stripe, err := strconv.ParseUint(parts[len(parts)-1], 10, 32)
	if err != nil {
		return proto.ObjectID{}, false
	}
	obj := proto.ObjectID{Ino: proto.Ino(ino), Stripe: uint32(stripe)}
	if len(parts) == 3 {
		if obj.Gen, err = strconv.ParseUint(parts[1], 16, 64); err != nil {
			return proto.ObjectID{}, false
		}
	}
	if objName(obj) != name { // not canonical: "+1", leading zeros, generation 0 spelled out
		return proto.ObjectID{}, false
	}
	return obj, true
}

// walkObjects calls fn for every object of the target, one fan-out
// directory after the other, until fn fails or ctx ends. Objects created
// during the walk may be missed, removed ones may still be named.
func (t *Target) walkObjects(ctx context.Context, fn func(proto.ObjectID) error) error {
	for i := range 256 {
		if err := ctx.Err(); err != nil {
			return err
		}
		names, err := t.fs.ReadDir(t.fanoutDir(i))
		if err != nil {
			return fmt.Errorf("storage: target %s: scrub: %w", t.dir, err)
		}
		for _, n := range names {
			obj, ok := parseObjName(n)
			if !ok || int(obj.Ino&0xff) != i {
				continue
			}
			if err := fn(obj); err != nil {
				return err
			}
		}
	}
	return nil
}

// SetCorruptHook sets what is called, with the object, each time the
// target finds an object corrupt (a checksum mismatch, an unreadable
// sidecar or version file, a read error of the disk under the scrub). It
// is called with the object's lock held: it must not block.
func (t *Target) SetCorruptHook(f func(proto.ObjectID)) { t.onCorrupt.Store(&f) }

// noteCorrupt counts a corrupt object and calls the hook.
func (t *Target) noteCorrupt(obj proto.ObjectID) {
	t.scrubMu.Lock()
	t.scrub.Corrupt++
	t.scrubMu.Unlock()
	if f := t.onCorrupt.Load(); f != nil && *f != nil {
		(*f)(obj)
	}
}

// ScrubState returns the target's scrub state.
func (t *Target) ScrubState() proto.ScrubTarget {
	t.scrubMu.Lock()
	defer t.scrubMu.Unlock()
	st := t.scrub
	st.Target = t.ID()
	return st
}

// ScrubObject reads every block of obj that holds data (holes, which the
// sidecar marks, are skipped: a read of them checks they are zeros) and
// checks it against its CRC, chunk by chunk, each chunk after p allows
// it. It returns the bytes checked. A corrupt object fails with EIO
// wrapping ErrCorrupt, and was reported to the corrupt hook; a missing
// object is no error.
func (t *Target) ScrubObject(ctx context.Context, obj proto.ObjectID, p *pace.Pacer, buf []byte) (uint64, error) {
	var checked uint64
	for off := uint64(0); ; {
		at, err := t.Seek(ctx, obj, off, proto.SeekData)
		if errors.Is(err, syscall.ENXIO) {
			return checked, nil // no data past off
		}
		if err != nil {
			return checked, err
		}
		want, err := t.dataRun(obj, at, uint64(len(buf)))
		if err != nil || want == 0 {
			return checked, err // want 0: punched or cut since the seek
		}
		if err := p.Wait(ctx, want); err != nil {
			return checked, err
		}
		n, err := t.read(ctx, obj, at, buf[:want])
		if err != nil {
			return checked, err
		}
		if n == 0 {
			return checked, nil // shortened meanwhile
		}
		checked += uint64(n)
		t.scrubMu.Lock()
		t.scrub.Bytes += uint64(n)
		t.scrub.Total += uint64(n)
		t.scrubMu.Unlock()
		off = at + uint64(n)
	}
}

// dataRun returns how many bytes from off (at most limit) are allocated
// blocks: the run of data a scrub reads, not the hole after it. It reads
// only the entries of that range (a Seek for the next hole reads up to
// the end of the object each time).
func (t *Target) dataRun(obj proto.ObjectID, off, limit uint64) (uint64, error) {
	var run uint64
	err := t.viewObject(obj, func(h *handle) error {
		if off >= h.size {
			return nil
		}
		end := min(off+limit, h.size)
		b0, b1 := off/BlockSize, blocksFor(end)
		es, err := t.readEntries(h, b0, b1)
		if err != nil {
			return err
		}
		run = end - off
		for i, e := range es {
			if !e.allocated() {
				run = max((b0+uint64(i))*BlockSize, off) - off
				break
			}
		}
		return nil
	})
	if errors.Is(err, errMissing) {
		return 0, nil
	}
	return run, err
}

// ScrubPass checks every object of the target (ScrubObject), paced by p,
// and records the pass in scrub.json. Corrupt objects do not stop it
// (each was reported to the corrupt hook); an object the disk fails to
// read is reported the same way. It returns ctx's error when ctx ends
// first, or the error of a directory it cannot list.
func (t *Target) ScrubPass(ctx context.Context, p *pace.Pacer, onBytes func(uint64)) error {
	start := time.Now().UnixNano()
	t.scrubMu.Lock()
	t.scrub.Running, t.scrub.Start, t.scrub.Bytes, t.scrub.Objects = true, start, 0, 0
	t.scrubMu.Unlock()
	defer func() {
		t.scrubMu.Lock()
		t.scrub.Running = false
		t.scrubMu.Unlock()
	}()
	log := t.logger()
	log.Info("storage: scrub pass begins")
	buf := make([]byte, scrubChunk)
	err := t.walkObjects(ctx, func(obj proto.ObjectID) error {
		// Every object costs a block of the pace (its sidecar is read),
		// so a target of many empty objects is not walked at full speed.
		if err := p.Wait(ctx, BlockSize); err != nil {
			return err
		}
		n, err := t.ScrubObject(ctx, obj, p, buf)
		if onBytes != nil && n > 0 {
			onBytes(n)
		}
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err == nil, errors.Is(err, ErrCorrupt):
			// Corrupt objects were reported by the read that found them.
		case errors.Is(err, syscall.EIO), errors.Is(err, io.ErrUnexpectedEOF):
			// The disk failed to read it, or it is shorter than its
			// sidecar says: as good as corrupt.
			log.Error("storage: scrub could not read an object", "object", objName(obj), "err", err)
			t.noteCorrupt(obj)
		default:
			// Not the object's fault (out of descriptors, say): it is
			// checked again by the next pass.
			log.Warn("storage: scrub skipped an object", "object", objName(obj), "err", err)
		}
		t.scrubMu.Lock()
		t.scrub.Objects++
		t.scrubMu.Unlock()
		return nil
	})
	if err != nil {
		log.Warn("storage: scrub pass stopped", "err", err)
		return err
	}
	end := time.Now().UnixNano()
	t.scrubMu.Lock()
	t.scrub.End = end
	t.scrub.Passes++
	st := t.scrub
	t.scrubMu.Unlock()
	log.Info("storage: scrub pass done", "objects", st.Objects, "bytes", st.Bytes, "bad_objects_found", st.Corrupt)
	b, _ := json.Marshal(scrubRecord{Version: scrubFileVersion, Start: start, End: end})
	if err := replaceFile(t.fs, t.dir, scrubFile, append(b, '\n')); err != nil {
		log.Warn("storage: scrub pass not recorded", "err", err)
	}
	return nil
}

// loadScrubRecord reads scrub.json into the target's state. A missing
// file is a target never scrubbed; a bad one is logged and ignored (the
// next pass rewrites it).
func (t *Target) loadScrubRecord() {
	f, err := t.fs.Open(filepath.Join(t.dir, scrubFile))
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	var rec scrubRecord
	if err == nil {
		var b []byte
		b, err = io.ReadAll(io.NewSectionReader(f, 0, 1<<16))
		f.Close()
		if err == nil {
			err = json.Unmarshal(b, &rec)
		}
		if err == nil && rec.Version != scrubFileVersion {
			err = fmt.Errorf("format version %d, want %d", rec.Version, scrubFileVersion)
		}
	}
	if err != nil {
		t.logger().Warn("storage: ignoring a bad scrub record", "file", scrubFile, "err", err)
		return
	}
	t.scrubMu.Lock()
	t.scrub.Start, t.scrub.End = rec.Start, rec.End
	t.scrubMu.Unlock()
}

// scrubber runs the scrub passes of one server's targets; all of them
// share its pace.
type scrubber struct {
	pace     *pace.Pacer
	interval atomicDuration
	onBytes  func(proto.TargetID, uint64)
}

func newScrubber() *scrubber {
	sc := &scrubber{pace: pace.New(DefaultScrubRate)}
	sc.interval.Store(DefaultScrubInterval)
	return sc
}

// StartScrub implements proto.ScrubStarter: a pass of the target begins
// now (unless one is under way). Only metadata servers may ask (the RPC
// handler checks).
func (s *Server) StartScrub(ctx context.Context, id proto.TargetID) error {
	t, err := s.target(ctx, id)
	if err != nil {
		return err
	}
	select {
	case t.scrubKick <- struct{}{}:
	default:
	}
	return nil
}

var _ proto.ScrubStarter = (*Server)(nil)

// loop runs t's passes until ctx ends: one when it is due (interval after
// the start of the last; 0: never by itself) and one whenever it is asked
// for (StartScrub).
func (sc *scrubber) loop(ctx context.Context, t *Target) {
	t.loadScrubRecord()
	for {
		wait := scrubRecheck
		if iv := sc.interval.Load(); iv > 0 {
			last := t.ScrubState().Start
			due := time.Unix(0, last).Add(iv)
			if last == 0 || !time.Now().Before(due) {
				wait = 0
			} else {
				wait = min(wait, time.Until(due))
			}
		}
		if wait > 0 {
			timer := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				timer.Stop()
				return
			case <-timer.C:
				continue // look at the interval again
			case <-t.scrubKick:
				timer.Stop()
			}
		}
		select { // a request made before this pass is served by it
		case <-t.scrubKick:
		default:
		}
		var onBytes func(uint64)
		if sc.onBytes != nil {
			onBytes = func(n uint64) { sc.onBytes(t.ID(), n) }
		}
		if err := t.ScrubPass(ctx, sc.pace, onBytes); err != nil {
			if ctx.Err() != nil {
				return
			}
			// A directory that cannot be listed: try again later, not at once.
			timer := time.NewTimer(scrubRecheck)
			select {
			case <-ctx.Done():
				timer.Stop()
				return
			case <-timer.C:
			}
		}
	}
}

// atomicDuration is a time.Duration safe for concurrent use.
type atomicDuration struct{ v atomic.Int64 }

func (d *atomicDuration) Load() time.Duration   { return time.Duration(d.v.Load()) }
func (d *atomicDuration) Store(v time.Duration) { d.v.Store(int64(v)) }
