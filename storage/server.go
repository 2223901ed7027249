package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"syscall"

	"github.com/weft-fs/weft/proto"
)

// ErrUnknownTarget is wrapped (with syscall.ESTALE) by the error for a
// request naming a target this server does not serve. ESTALE, not ENOENT:
// a missing object is not an error for Read and Remove, so the client can
// tell "wrong server or target gone" (refresh the target map) apart.
var ErrUnknownTarget = errors.New("storage: unknown target")

// Server is the set of targets one storage process serves, addressed by
// target id. It implements proto.StorageService, so the RPC handler and
// tests use it the same way.
type Server struct {
	mu      sync.RWMutex
	targets map[proto.TargetID]*Target
	peers   proto.StorageService // other servers' targets, for Copy (SetPeers)

	// First registrations in flight (Registering). The metadata service
	// may hand a new target's id to clients as soon as it records the
	// registration, before its reply reaches this server and Add runs;
	// a request for an unknown target waits for those replies instead of
	// failing (a mount writing to a target registered a moment ago).
	registering int
	settled     chan struct{} // closed when registering drops to 0
}

var _ proto.StorageService = (*Server)(nil)

// NewServer returns a server with no targets.
func NewServer() *Server {
	return &Server{targets: make(map[proto.TargetID]*Target)}
}

// Add starts serving t under its id, which must be set.
func (s *Server) Add(t *Target) error {
	id := t.ID()
	if id == 0 {
		return fmt.Errorf("storage: target %s has no id yet: %w", t.Dir(), syscall.EINVAL)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if o, ok := s.targets[id]; ok && o != t {
		return fmt.Errorf("storage: targets %s and %s both have id %d: %w", o.Dir(), t.Dir(), id, syscall.EEXIST)
	}
	s.targets[id] = t
	return nil
}

// Registering marks the first registration of a target without an id as
// in flight; the caller calls the returned function once the reply has
// been handled (the target added, or the call failed), exactly once.
// Requests for an unknown target wait until no first registration is in
// flight.
func (s *Server) Registering() (done func()) {
	s.mu.Lock()
	if s.registering == 0 {
		s.settled = make(chan struct{})
	}
	s.registering++
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		s.registering--
		if s.registering == 0 {
			close(s.settled)
		}
		s.mu.Unlock()
	}
}

// target is Target for a request: an id not served yet waits while a
// first registration is in flight (its reply may carry that id), until
// none is or ctx ends.
func (s *Server) target(ctx context.Context, id proto.TargetID) (*Target, error) {
	for {
		s.mu.RLock()
		t, pending, settled := s.targets[id], s.registering > 0, s.settled
		s.mu.RUnlock()
		if t != nil {
			return t, nil
		}
		if !pending {
			return s.Target(id)
		}
		select {
		case <-settled:
		case <-ctx.Done():
			return s.Target(id)
		}
	}
}

// Target returns the target with id, or an error wrapping ErrUnknownTarget
// and syscall.ESTALE. It does not wait (see target).
func (s *Server) Target(id proto.TargetID) (*Target, error) {
	s.mu.RLock()
	t := s.targets[id]
	s.mu.RUnlock()
	if t == nil {
		return nil, fmt.Errorf("%w %d: %w", ErrUnknownTarget, id, syscall.ESTALE)
	}
	return t, nil
}

// Targets returns the served targets in id order.
func (s *Server) Targets() []*Target {
	s.mu.RLock()
	out := make([]*Target, 0, len(s.targets))
	for _, t := range s.targets {
		out = append(out, t)
	}
	s.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID() < out[j].ID() })
	return out
}

func (s *Server) Read(ctx context.Context, id proto.TargetID, obj proto.ObjectID, off uint64, p []byte) (int, error) {
	t, err := s.target(ctx, id)
	if err != nil {
		return 0, err
	}
	return t.Read(ctx, obj, off, p)
}

func (s *Server) Write(ctx context.Context, id proto.TargetID, obj proto.ObjectID, off uint64, data []byte) (uint64, error) {
	t, err := s.target(ctx, id)
	if err != nil {
		return 0, err
	}
	return t.Write(ctx, obj, off, data)
}

// WriteCounting implements proto.CountingWriter.
func (s *Server) WriteCounting(ctx context.Context, id proto.TargetID, obj proto.ObjectID, off uint64, data []byte) (version, allocated uint64, err error) {
	t, err := s.target(ctx, id)
	if err != nil {
		return 0, 0, err
	}
	return t.WriteCounting(ctx, obj, off, data)
}

func (s *Server) Truncate(ctx context.Context, id proto.TargetID, obj proto.ObjectID, size uint64) error {
	t, err := s.target(ctx, id)
	if err != nil {
		return err
	}
	return t.Truncate(ctx, obj, size)
}

// Extend implements proto.ObjectExtender.
func (s *Server) Extend(ctx context.Context, id proto.TargetID, obj proto.ObjectID, size uint64) error {
	t, err := s.target(ctx, id)
	if err != nil {
		return err
	}
	return t.Extend(ctx, obj, size)
}

func (s *Server) Sync(ctx context.Context, id proto.TargetID, obj proto.ObjectID) error {
	t, err := s.target(ctx, id)
	if err != nil {
		return err
	}
	return t.Sync(ctx, obj)
}

func (s *Server) Remove(ctx context.Context, id proto.TargetID, obj proto.ObjectID) error {
	t, err := s.target(ctx, id)
	if err != nil {
		return err
	}
	return t.Remove(ctx, obj)
}

// RemoveMany removes the objects one after the other and stops at the first
// failure (the caller retries the whole list).
func (s *Server) RemoveMany(ctx context.Context, id proto.TargetID, objs []proto.ObjectID) error {
	t, err := s.target(ctx, id)
	if err != nil {
		return err
	}
	for _, obj := range objs {
		if err := t.Remove(ctx, obj); err != nil {
			return err
		}
	}
	return nil
}

func (s *Server) Space(ctx context.Context, id proto.TargetID, obj proto.ObjectID, mode proto.SpaceMode, off, n uint64) error {
	t, err := s.target(ctx, id)
	if err != nil {
		return err
	}
	return t.Space(ctx, obj, mode, off, n)
}

func (s *Server) Seek(ctx context.Context, id proto.TargetID, obj proto.ObjectID, off uint64, what proto.SeekWhat) (uint64, error) {
	t, err := s.target(ctx, id)
	if err != nil {
		return 0, err
	}
	return t.Seek(ctx, obj, off, what)
}

func (s *Server) Allocated(ctx context.Context, id proto.TargetID, obj proto.ObjectID) (uint64, error) {
	t, err := s.target(ctx, id)
	if err != nil {
		return 0, err
	}
	return t.Allocated(ctx, obj)
}

// ReadSpan is Target.ReadSpan on the target id names (storagerpc's
// SpanReader, OpReadSums).
func (s *Server) ReadSpan(ctx context.Context, id proto.TargetID, obj proto.ObjectID, off uint64, n int, sums []byte) (io.ReaderAt, int64, int, func(), error) {
	t, err := s.target(ctx, id)
	if err != nil {
		return nil, 0, 0, func() {}, err
	}
	return t.ReadSpan(ctx, obj, off, n, sums)
}
