package meta

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"syscall"

	"github.com/weft-fs/weft/meta/store"
	"github.com/weft-fs/weft/proto"
)

// Copies of small files' bytes (proto.FileCopies).
//
// A file of at most proto.MaxFileCopy bytes may have a copy of its whole
// content in the store (key store.AppendCopyKey, inode.Keyed's
// inodeHasCopy), so that an open for reading answers the bytes with the
// attributes and the reader needs no storage server. The objects remain
// the file's data: the copy is a cache the state machine keeps exact.
//
// Invariant: if a file has a copy, its bytes are the copy. Kept by
//   - taking a copy only from the WriteDone that first records a file's
//     bytes: the file never had a WriteDone (inode.Written) nor a truncate
//     (inodeTruncated), so the writer's bytes, which it has whole from
//     size 0, are all the file holds; and only if no other session holds
//     the file open for writing (the proposer checks, and marks the
//     command writeWithCopy), as another writer's bytes may be in the
//     objects without a WriteDone yet;
//   - dropping it in the same batch as anything that may change the
//     bytes: every other WriteDone (a later one of the same writer
//     included), a truncate, the inode's removal;
//   - the writer's client dropping it itself (an empty WriteDone) before
//     a handle that was open when it offered the copy changes the bytes
//     again (package client, dropOffered), and never offering bytes a
//     write failed to store;
//   - dropping it when a session that held the file open for writing
//     ends, after any copy's WriteDone under way (a writer that died
//     between its writes and their WriteDone: those bytes were never
//     acknowledged, but a copy would hide them until it is dropped);
//   - dropping it (OpDropCopy) before an open for writing returns: no
//     writer that opens after a copy was taken can write without it
//     gone. The open waits for a copy's WriteDone under way (copying),
//     and counts its handle before it looks, so a copy proposed later
//     sees the writer and is refused. A copy's WriteDone that failed may
//     still be applied later (a timeout): the inode stays marked
//     (copyUnsure) and the next writer's open drops through the log,
//     after it, whatever it left;
//
// A copy proposed while the server is in its grace period (it may not
// know every session's handles yet) is refused, and none is taken while
// the parameter meta.file_copies is off.
//
// Not covered: a writer of another session that the server stopped
// knowing without dropping it (its session was neither reclaimed after a
// failover nor expired here) and that still writes with a capability it
// holds: its unrecorded bytes may sit in the objects under a copy taken
// after its session was forgotten. Sessions have no fence on the storage
// servers; this is the same window in which such a writer's bytes reach
// a file its server already considers closed.

// copyRecordVersion is the first byte of a copy record: u8 version, u32
// crc32c of the bytes, the bytes.
const copyRecordVersion = 1

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// appendCopyRecord appends the record of data to dst.
func appendCopyRecord(dst, data []byte) []byte {
	dst = append(dst, copyRecordVersion)
	dst = binary.BigEndian.AppendUint32(dst, crc32.Checksum(data, castagnoli))
	return append(dst, data...)
}

// decodeCopyRecord returns the bytes of a copy record after checking its
// version and checksum.
func decodeCopyRecord(v []byte) ([]byte, error) {
	if len(v) < 5 {
		return nil, fmt.Errorf("copy record of %d bytes", len(v))
	}
	if v[0] != copyRecordVersion {
		return nil, fmt.Errorf("copy record version %d not supported", v[0])
	}
	data := v[5:]
	if want, got := binary.BigEndian.Uint32(v[1:5]), crc32.Checksum(data, castagnoli); want != got {
		return nil, fmt.Errorf("copy record checksum %08x, its bytes sum to %08x", want, got)
	}
	return data, nil
}

// writeWithCopy (OpWriteDone): the command's Value is the file's whole
// content, offered as its copy; the proposer found no other session with
// the file open for writing.
const writeWithCopy = 2

// takeCopy applies the copy a WriteDone offers, if the file may have one,
// or drops the copy the file had: n is the file before the WriteDone
// changes it.
func (t *txn) takeCopy(n *inode, c *Command) {
	fresh := !n.Written && n.Flags&inodeTruncated == 0
	if c.Flags&writeWithCopy != 0 && fresh && len(c.Value) > 0 && len(c.Value) <= proto.MaxFileCopy &&
		uint64(len(c.Value)) == c.Size {
		t.setScratch(store.AppendCopyKey(t.sm.kb, uint64(n.Ino)), appendCopyRecord(t.sm.vb, c.Value))
		n.Keyed |= inodeHasCopy
		return
	}
	t.dropCopy(n)
}

// dropCopy deletes n's copy, if it has one, in the txn's batch; the caller
// puts n.
func (t *txn) dropCopy(n *inode) {
	if n.Keyed&inodeHasCopy == 0 {
		return
	}
	t.deleteScratch(store.AppendCopyKey(t.sm.kb, uint64(n.Ino)))
	n.Keyed &^= inodeHasCopy
}

// dropCopyOp applies OpDropCopy: the file's copy goes (an open for
// writing is about to return).
func (t *txn) dropCopyOp(c *Command) error {
	n, err := t.get(c.Ino)
	if err != nil || n.Keyed&inodeHasCopy == 0 {
		return err
	}
	t.dropCopy(n)
	t.put(n)
	return nil
}

// waitCopyLocked waits (s.mu held, released meanwhile) until no WriteDone
// offering a copy of ino is under way.
func (s *Server) waitCopyLocked(ino proto.Ino) {
	for ch := s.copying[ino]; ch != nil; ch = s.copying[ino] {
		s.mu.Unlock()
		<-ch
		s.mu.Lock()
	}
}

// takeUnsureLocked reports whether a copy's WriteDone for ino failed
// since a writer last looked (copyUnsure), and forgets it: the caller
// drops whatever that WriteDone may leave.
func (s *Server) takeUnsureLocked(ino proto.Ino) bool {
	unsure := s.copyUnsure[ino]
	delete(s.copyUnsure, ino)
	return unsure
}

// dropCopyFor deletes the copy of n's file for a writer, through the log
// (a proposal made after a copy's WriteDone was appended is applied after
// it), if the file may have one: n has one, or a copy's WriteDone failed
// for it (unsure). It reports whether it proposed the deletion.
func (s *Server) dropCopyFor(ctx context.Context, n *inode, unsure bool) (bool, error) {
	if !unsure && n.Keyed&inodeHasCopy == 0 {
		return false, nil
	}
	_, err := s.propose(ctx, &Command{Op: OpDropCopy, Now: s.now(), Ino: n.Ino})
	return true, err
}

// dropWriterCopy drops the copy of ino for a writer counted without
// Server.open (a session that ended, a CreateOpen retry), after any
// copy's WriteDone under way for it.
func (s *Server) dropWriterCopy(ctx context.Context, ino proto.Ino) error {
	s.mu.Lock()
	s.waitCopyLocked(ino)
	unsure := s.takeUnsureLocked(ino)
	s.mu.Unlock()
	n, err := s.readInode(ino)
	if err != nil {
		return err
	}
	_, err = s.dropCopyFor(ctx, n, unsure)
	return err
}

// dropWritersCopies drops the copies of the inodes a session that ended
// held open for writing.
func (s *Server) dropWritersCopies(inos []proto.Ino) {
	for _, ino := range inos {
		if err := s.dropWriterCopy(s.ctx, ino); err != nil && !errors.Is(err, errClosed) && !errors.Is(err, syscall.ENOENT) {
			s.log.Warn("meta: drop the copy of a file a dropped session wrote", "ino", ino, "err", err)
		}
	}
}

// OpenCopy implements proto.FileCopies.
func (s *Server) OpenCopy(ctx context.Context, ino proto.Ino, want proto.Access) (proto.Attr, []byte, []byte, error) {
	n, cap, err := s.open(ctx, ino, want)
	if err != nil {
		return proto.Attr{}, nil, nil, err
	}
	if want.Has(proto.AccessWrite) || n.Keyed&inodeHasCopy == 0 || n.Size == 0 || n.Size > proto.MaxFileCopy {
		return n.Attr, cap, nil, nil
	}
	return n.Attr, cap, s.loadCopy(n), nil
}

// LookupCopy implements proto.LookupCopier: Lookup that also answers the
// file's copy where the caller's session may keep it in its lease cache
// and open the file from there (client/cached.go): the session was
// granted a lease on the file with nothing of it to invalidate (openable),
// and every class may read the file (proto.PinMode), so whoever on the
// client opens it from the cache, this server would let them read it. A
// copy is never replaced by other bytes (only a new file's first
// WriteDone takes one; anything that may change the bytes drops it, and
// that breaks the lease), so the copy read here belongs to the attributes
// read before it, or is gone (loadCopy).
func (s *Server) LookupCopy(ctx context.Context, parent proto.Ino, name string) (proto.Attr, []byte, bool, error) {
	n, openable, err := s.lookup(ctx, parent, name)
	if err != nil {
		return proto.Attr{}, nil, false, err
	}
	if !openable || !n.ReadableByAll() || n.Keyed&inodeHasCopy == 0 || n.Size == 0 || n.Size > proto.MaxFileCopy {
		return n.Attr, nil, openable, nil
	}
	return n.Attr, s.loadCopy(n), true, nil
}

// maxCopiesAfterBytes bounds the bytes of one CopiesAfter answer.
const maxCopiesAfterBytes = 512 << 10

// CopiesAfter implements proto.CopyPrefetcher (docs/caching.md, "Small
// files read ahead"). The copies and the inodes are read in one view of
// the store, so each copy belongs to the attributes answered with it (a
// copy is only ever taken whole or dropped, never replaced); the files are
// kept only if the session holds leases on them, checked against the
// break generation taken before that view: a change applied since breaks
// the lease and the file is left out, as LookupCopy's grant would report
// it unclean, and a change applied later queues an invalidation for the
// session, which holds the lease. Cost: one scan of the copies' keys
// (copies of files made together share the store's blocks), and one inode
// read per copy of a file the session holds.
func (s *Server) CopiesAfter(ctx context.Context, ino proto.Ino, window uint32) ([]proto.FileCopy, proto.Ino, error) {
	cl, err := s.reader(ctx)
	if err != nil {
		return nil, 0, err
	}
	window = min(window, proto.MaxCopiesWindow)
	if window == 0 || uint64(ino) > math.MaxUint64-uint64(window)-1 {
		return nil, ino, nil
	}
	through := ino + proto.Ino(window)
	if !s.leases.polls(cl.sess) {
		return nil, through, nil
	}
	g := s.leases.begin()
	v, err := s.st.View()
	if err != nil {
		return nil, 0, errnof(syscall.EIO, "copies after inode %d: %v", ino, err)
	}
	defer v.Close()
	var (
		fcs   []proto.FileCopy
		bytes int
	)
	lo := store.AppendCopyKey(nil, uint64(ino)+1)
	hi := store.AppendCopyKey(nil, uint64(through)+1)
	err = v.Scan(lo, hi, func(k, val []byte) bool {
		x := proto.Ino(binary.BigEndian.Uint64(k[1:]))
		data, err := decodeCopyRecord(val)
		if err != nil {
			s.log.Error("meta: a file's copy is damaged; its reader reads the objects", "ino", x, "err", err)
			return true
		}
		fcs = append(fcs, proto.FileCopy{Attr: proto.Attr{Ino: x}, Data: append([]byte(nil), data...)})
		bytes += len(data)
		if len(fcs) == proto.MaxCopiesAfter || bytes >= maxCopiesAfterBytes {
			through = x // cut short: the caller asks again after x
			return false
		}
		return true
	})
	if err != nil {
		return nil, 0, errnof(syscall.EIO, "copies after inode %d: %v", ino, err)
	}
	fcs = s.leases.keepHeld(cl.sess, g, fcs)
	kept := fcs[:0]
	for _, fc := range fcs {
		n, err := loadInode(v, fc.Attr.Ino)
		if err != nil || !n.ReadableByAll() || n.Keyed&inodeHasCopy == 0 || n.Size == 0 || n.Size != uint64(len(fc.Data)) {
			continue // gone, not for every class, or the copy is not of this size
		}
		fc.Attr = n.Attr
		kept = append(kept, fc)
	}
	return kept, through, nil
}

// loadCopy returns n's copy if it is there and whole, of n's size; nil
// otherwise (a copy dropped since n was read, a damaged record: the
// reader reads the objects).
func (s *Server) loadCopy(n *inode) []byte {
	v, err := s.st.Get(store.AppendCopyKey(nil, uint64(n.Ino)))
	if err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			s.log.Error("meta: reading a file's copy", "ino", n.Ino, "err", err)
		}
		return nil
	}
	data, err := decodeCopyRecord(v)
	if err != nil {
		s.log.Error("meta: a file's copy is damaged; its reader reads the objects", "ino", n.Ino, "err", err)
		return nil
	}
	if uint64(len(data)) != n.Size {
		return nil // taken or dropped since n was read
	}
	return data
}

// WriteDoneCopy implements proto.FileCopies.
func (s *Server) WriteDoneCopy(ctx context.Context, ino proto.Ino, end uint64, mtime int64, blocks uint64, data []byte) (proto.Attr, error) {
	if len(data) > proto.MaxFileCopy || uint64(len(data)) != end {
		return proto.Attr{}, errnof(syscall.EINVAL, "copy of %d bytes for a file of %d (at most %d)", len(data), end, proto.MaxFileCopy)
	}
	cl, c, err := s.writeDoneCommand(ctx, ino, end, mtime, blocks)
	if err != nil {
		return proto.Attr{}, err
	}
	s.mu.Lock()
	var done chan struct{}
	if c.Flags&writeViaHandle != 0 && !s.noCopies.Load() && !s.inGrace() && s.copying[ino] == nil && !s.otherWriterLocked(cl.sess, ino) {
		done = make(chan struct{})
		s.copying[ino] = done
		c.Flags |= writeWithCopy
		c.Value = data
	}
	s.mu.Unlock()
	r, err := s.proposeAs(ctx, cl, c)
	if done != nil {
		s.mu.Lock()
		delete(s.copying, ino)
		if err != nil {
			// It may still be applied (a timeout, a lost leadership): the
			// next writer to open the file, or the end of a session that
			// holds it open for writing, drops what it may leave.
			s.copyUnsure[ino] = true
		}
		s.mu.Unlock()
		close(done)
	}
	return r.attr, err
}

// otherWriterLocked reports whether a session other than sess holds ino
// open for writing.
func (s *Server) otherWriterLocked(sess session, ino proto.Ino) bool {
	writers := s.writers[ino]
	if o := s.sessOpens[sess][ino]; o.n > 0 && o.write {
		writers--
	}
	return writers > 0
}
