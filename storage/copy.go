package storage

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/weft-fs/weft/proto"
)

// copyChunk is how much of a Copy is read and written at a time.
const copyChunk = 4 << 20

// SetPeers gives the server a way to read objects of targets other
// servers serve (as a storage server: no capability needed), for Copy. Run
// sets it to a client of the other storage servers; without it a Copy
// from another server's target fails with EXDEV.
func (s *Server) SetPeers(p proto.StorageService) {
	s.mu.Lock()
	s.peers = p
	s.mu.Unlock()
}

// Copy implements proto.StorageService.Copy: dst must be on a target of
// this server; src is read from this server's target or through the
// peers, copyChunk at a time, and written to dst. A read that comes back
// short (a hole at the object's end) is written as zeros. The caller has
// checked the capabilities (the RPC handler does).
func (s *Server) Copy(ctx context.Context, t proto.TargetID, dst proto.ObjectID, dstOff uint64, srcT proto.TargetID, src proto.ObjectID, srcOff, n uint64, _ []byte) error {
	dt, err := s.target(ctx, t)
	if err != nil {
		return err
	}
	read := func(off uint64, p []byte) (int, error) {
		if st, err := s.target(ctx, srcT); err == nil {
			return st.Read(ctx, src, off, p)
		}
		s.mu.Lock()
		peers := s.peers
		s.mu.Unlock()
		if peers == nil {
			return 0, fmt.Errorf("storage: copy from target %d, which this server does not serve, without peers: %w", srcT, syscall.EXDEV)
		}
		return peers.Read(ctx, srcT, src, off, p)
	}
	buf := make([]byte, min(n, copyChunk))
	for done := uint64(0); done < n; {
		p := buf[:min(uint64(len(buf)), n-done)]
		got, err := read(srcOff+done, p)
		if err != nil {
			return fmt.Errorf("storage: copy: read target %d object %s at %d: %w", srcT, objName(src), srcOff+done, err)
		}
		clear(p[got:])
		if _, err := dt.Write(ctx, dst, dstOff+done, p); err != nil {
			return err
		}
		done += uint64(len(p))
	}
	return nil
}

var _ proto.RowCopier = (*Server)(nil)

// CopyRow implements proto.RowCopier: dst must be on a target of this
// server; the source unit is read with its version from this server's
// target or through the peers (as RebuildObject reads a shard), and
// written to dst with version {c.Tag, clean} only if it was c.Expect,
// else EAGAIN (wrapping ErrConflict) and dst is unchanged; a source that
// cannot be read is EREMOTEIO (EXDEV without peers), dst unchanged too.
// Bytes past the source object's end are copied as zeros. The caller has
// checked the capabilities (the RPC handler does); ctx carries dst's, for
// its fence.
func (s *Server) CopyRow(ctx context.Context, t proto.TargetID, dst proto.ObjectID, c proto.RowCopy) error {
	dt, err := s.target(ctx, t)
	if err != nil {
		return err
	}
	if err := checkUnit(c.Off, c.Len, c.Unit); err != nil {
		return err
	}
	if err := checkUnit(c.SrcOff, c.Len, c.Unit); err != nil {
		return err
	}
	p := make([]byte, c.Len)
	v, err := s.readRowAt(ctx, c.SrcTarget, c.Src, c.SrcOff, c.Unit, p)
	if errors.Is(err, syscall.EXDEV) {
		return err
	}
	if err != nil {
		// The source failed, not dst: EREMOTEIO tells the client so, and
		// it copies the row another way instead of marking dst stale.
		return fmt.Errorf("storage: copy row: the source: %v: %w", err, syscall.EREMOTEIO)
	}
	if v != c.Expect {
		return fmt.Errorf("storage: copy row: target %d object %s unit %d has version %+v, expected %+v: %w (%w)",
			c.SrcTarget, objName(c.Src), c.SrcOff/c.Unit, v, c.Expect, ErrConflict, syscall.EAGAIN)
	}
	_, err = dt.WriteRow(ctx, dst, proto.RowWrite{Off: c.Off, Unit: c.Unit, Data: p, Tag: c.Tag})
	return err
}

// readRowAt reads len(p) bytes of obj on target id at off (in one unit of
// unit bytes) with the unit's version, from this server's target or
// through the peers (as a storage server: no capability). Bytes past the
// object's end read as zeros.
func (s *Server) readRowAt(ctx context.Context, id proto.TargetID, obj proto.ObjectID, off, unit uint64, p []byte) (proto.RowVersion, error) {
	var n int
	var v proto.RowVersion
	var err error
	if st, terr := s.target(ctx, id); terr == nil {
		n, v, err = st.ReadRow(ctx, obj, off, unit, p)
	} else {
		s.mu.Lock()
		peers := s.peers
		s.mu.Unlock()
		rv, ok := peers.(proto.RowVersioner)
		if !ok {
			return v, fmt.Errorf("storage: read target %d, which this server does not serve, without versioned peers: %w", id, syscall.EXDEV)
		}
		n, v, err = rv.ReadRow(ctx, id, obj, off, unit, p)
	}
	if err != nil {
		return v, fmt.Errorf("storage: read target %d object %s at %d: %w", id, objName(obj), off, err)
	}
	clear(p[n:])
	return v, nil
}
