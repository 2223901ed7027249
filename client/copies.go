package client

import (
	"bytes"
	"context"

	"github.com/weft-fs/weft/proto"
)

// Copies of small files' bytes (proto.FileCopies): a file of at most
// proto.MaxFileCopy bytes that this client writes whole from size 0 offers
// its bytes with the WriteDone that first records them, and an open for
// reading of a file with a copy gets the bytes with the attributes, so its
// reads need no storage server.
//
// Invariants (under inodeState.mu):
//   - shadowOK says shadow holds every byte this client wrote to the file
//     since it was opened here at size 0 (zeros in holes, len(shadow) the
//     end of the furthest write), and that nothing else this client did
//     to the file (a truncate, fallocate, a copy into it) changed its
//     bytes. It starts true only for a state made from attributes of
//     size 0, is cleared for good by any of those, by a write past
//     proto.MaxFileCopy or one that failed, and after the WriteDone that
//     offered the shadow (the service takes a copy only from a file's
//     first WriteDone).
//   - offered (atomic) says this client offered a copy and has not
//     changed the file since: before a handle changes the file's bytes
//     again, dropOffered records that, which drops the copy.
//   - changes (per client, by inode) counts this client's changes to a
//     file's bytes, so that an open installs the copy it got only if
//     nothing changed here while its request was out.
//   - small, when not nil, is the file's content as the service's copy
//     gave it at the last open, len(small) == the size then; it is only
//     set while this client has no write of the file unrecorded, and
//     dropRALocked drops it wherever it drops read-ahead (a write, a
//     truncate, a flush, an open, a lock, the last release), so it is
//     served exactly where fetched read-ahead would be.

// openMeta opens ino on the metadata service, with the file's copy when
// the service keeps one and want is read-only.
func (c *Client) openMeta(ctx context.Context, ino proto.Ino, want proto.Access) (a proto.Attr, cap, data []byte, err error) {
	if fc, ok := c.copies.get(); ok && !want.Has(proto.AccessWrite) {
		a, cap, data, err = fc.OpenCopy(ctx, ino, want)
		if !c.copies.lacks(err) {
			return a, cap, data, err
		}
	}
	a, cap, err = c.meta.Open(ctx, ino, want)
	return a, cap, nil, err
}

// shadowLocked records a write of p at off in the shadow, or gives the
// shadow up if the file grows past what a copy may hold.
func (st *inodeState) shadowLocked(p []byte, off uint64) {
	if !st.shadowOK {
		return
	}
	end := off + uint64(len(p))
	if end > proto.MaxFileCopy {
		st.noShadowLocked()
		return
	}
	if uint64(len(st.shadow)) < end {
		if uint64(cap(st.shadow)) < end {
			grown := make([]byte, end, proto.MaxFileCopy)
			copy(grown, st.shadow)
			st.shadow = grown
		} else {
			st.shadow = st.shadow[:end]
		}
	}
	copy(st.shadow[off:], p)
}

// noShadowLocked gives the shadow up for good.
func (st *inodeState) noShadowLocked() {
	st.shadowOK = false
	st.shadow = nil
}

// offerLocked returns a copy of the shadow to offer as the file's copy
// with a WriteDone recording end, or nil: only when the shadow is the
// file's whole content up to end, every write sent. A copy, because a
// write accepted while the WriteDone is out writes into the shadow.
func (st *inodeState) offerLocked(end uint64, settled bool) []byte {
	if !st.shadowOK || !settled || end == 0 || uint64(len(st.shadow)) != end || st.end != end || st.err != nil {
		return nil
	}
	return bytes.Clone(st.shadow)
}

// dropOffered makes sure the service has no copy this client offered
// before it changes the file's bytes again (a write, fallocate, a copy
// into it through a handle that was open when the copy was offered): it
// records an empty write (end 0, the last write's time), which drops the
// copy like any WriteDone. Otherwise this client's new bytes could reach
// the objects while the copy still answers opens, and if it died before
// recording them at a moment no server noticed (a failover), the copy
// would hide them for good. gen is the handle's session generation.
func (st *inodeState) dropOffered(ctx context.Context, gen uint64) error {
	if !st.offered.Load() { // every write asks: no lock for the answer
		return nil
	}
	st.doneMu.Lock()
	defer st.doneMu.Unlock()
	if !st.offered.Load() {
		return nil
	}
	st.mu.Lock()
	mtime := st.lastWrite
	st.mu.Unlock()
	rctx, cancel := st.c.rpcCtx(ctx)
	defer cancel()
	if _, _, err := st.recordWrite(rctx, gen, 0, mtime, proto.NoBlocks, nil); err != nil {
		return err
	}
	st.offered.Store(false)
	return nil
}

// recordWrite sends the WriteDone that records end, mtime and blocks,
// offering offer (if not nil) as the file's copy where the service keeps
// copies, and keeps this client's cached attributes in step. offered
// says the copy was offered. The caller holds doneMu.
func (st *inodeState) recordWrite(rctx context.Context, gen, end uint64, mtime int64, blocks uint64, offer []byte) (a proto.Attr, offered bool, err error) {
	c := st.c
	s0 := c.creating(0, "", st.ino)
	err = c.handleCall(rctx, st.ino, gen, func() (err error) {
		if fc, ok := c.copies.get(); ok && offer != nil {
			a, err = fc.WriteDoneCopy(rctx, st.ino, end, mtime, blocks, offer)
			if offered = !c.copies.lacks(err); offered {
				return err
			}
		}
		a, err = c.meta.WriteDone(rctx, st.ino, end, mtime, blocks)
		return err
	})
	c.changed(s0, st.ino, a, err)
	return a, offered, err
}

// installCopyLocked keeps data, the file's content from the service's
// copy at this open, to serve reads, if nothing this client did could be
// missing from it: no write of its own unrecorded, and no change to the
// file here since mark (changeMark, taken before the open was sent).
func (st *inodeState) installCopyLocked(data []byte, size, mark uint64) {
	if data == nil || uint64(len(data)) != size || st.dirty || len(st.open) > 0 || len(st.inflight) > 0 ||
		st.truncating > 0 || st.size() != size || st.c.changeMark(st.ino) != mark {
		return
	}
	st.small = data
}

// changeShards is how many counters Client.changes spreads inodes over.
const changeShards = 64

// noteChange counts a change to ino's bytes by this client (a write
// accepted, a truncate, fallocate or copy begun).
func (c *Client) noteChange(ino proto.Ino) { c.changes[uint64(ino)%changeShards].Add(1) }

// changeMark returns ino's change counter (shared with the inodes of its
// shard: a change to one of them only costs the others an install).
func (c *Client) changeMark(ino proto.Ino) uint64 { return c.changes[uint64(ino)%changeShards].Load() }

// readSmallLocked serves a read from the copy: n bytes into p, ok false if
// there is no copy to serve it.
func (st *inodeState) readSmallLocked(p []byte, off, size uint64) (n int, ok bool) {
	if st.small == nil || uint64(len(st.small)) != size || off >= size {
		return 0, false
	}
	return copy(p, st.small[off:]), true
}
