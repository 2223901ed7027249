package storage

import (
	"context"
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
	dt, err := s.Target(t)
	if err != nil {
		return err
	}
	read := func(off uint64, p []byte) (int, error) {
		if st, err := s.Target(srcT); err == nil {
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
