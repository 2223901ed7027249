package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"

	"github.com/weft-fs/weft/proto"
)

// ReadSpan serves a read whose bytes the client checks (storagerpc
// OpReadSums): it fills sums with the sidecar entries of the blocks of
// [off, off+n) (8 bytes each, {cur, prev} little-endian as on disk;
// entries of blocks past the object's end are zero, holes) and returns
// the object's data file and the range of it to send, [dataOff,
// dataOff+dataLen): the object's bytes there, up to its end. The bytes
// are not read here, so not checked here either: the caller sends them
// (sendfile(2) where it can) with the entries, and the reader checks
// every block against them exactly as Read does, reading again with Read
// on a mismatch (which checks, fails with EIO and reports the object as
// corrupt, or returns the bytes of a write that raced with the first
// read).
//
// The entries are read under the object's read lock, which is let go
// before ReadSpan returns: a client that does not read its responses must
// not hold up writers. So a write may change the bytes before they are
// sent; the reader's check then fails and it reads again with Read (and a
// truncate may cut the file: the sender pads with zeros, which fail the
// check the same way). The object's open handle is held until release is
// called (exactly once, also on error: then it is a no-op), so the
// descriptor stays open while the bytes are sent. off
// and n must be multiples of BlockSize, so the range is of whole blocks
// (each checksum covers a whole block; the last one may be cut by the
// object's end, past which a block counts as zeros), and len(sums) at
// least 8 per block of n (EINVAL otherwise). A missing object has no data and only hole entries.
func (t *Target) ReadSpan(ctx context.Context, obj proto.ObjectID, off uint64, n int, sums []byte) (data io.ReaderAt, dataOff int64, dataLen int, release func(), err error) {
	release = func() {}
	if err := checkCtx(ctx); err != nil {
		return nil, 0, 0, release, err
	}
	nb := blocksFor(uint64(n))
	if off%BlockSize != 0 || n%BlockSize != 0 || n < 0 || uint64(len(sums)) < nb*entrySize {
		return nil, 0, 0, release, fmt.Errorf("storage: span read of %d bytes at %d with %d bytes of entries: %w", n, off, len(sums), syscall.EINVAL)
	}
	sums = sums[:nb*entrySize]
	clear(sums)
	if n == 0 || off >= MaxObjectSize {
		return nil, 0, 0, release, nil
	}
	l := t.lockFor(obj)
	l.RLock()
	defer l.RUnlock()
	h, err := t.acquire(obj, false)
	if errors.Is(err, errMissing) {
		return nil, 0, 0, release, nil
	}
	if err != nil {
		return nil, 0, 0, release, err
	}
	done := func() { t.cache.release(h) }
	if off >= h.size {
		done()
		return nil, 0, 0, release, nil
	}
	dn := min(uint64(n), h.size-off)
	b0, b1 := off/BlockSize, blocksFor(off+dn)
	if err := t.readEntryBytes(h, b0, sums[:(b1-b0)*entrySize]); err != nil {
		done()
		return nil, 0, 0, release, err
	}
	t.reads.Add(1)
	t.readBytes.Add(dn)
	return h.data, int64(off), int(dn), done, nil
}
