package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/weft-fs/weft/meta/metarpc"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/storage/localread"
	"github.com/weft-fs/weft/storage/storagerpc"
	"github.com/weft-fs/weft/transport"
)

// New connects a client to the metadata server at cfg.MetaAddr over TCP.
// Storage targets are found through MetaService.Targets, cached, and looked
// up again when a target is unknown or a call to it failed. Connections are
// made lazily, so New succeeds even if the servers are not up yet.
func New(ctx context.Context, cfg Config) (*Client, error) {
	if cfg.MetaAddr == "" {
		return nil, fmt.Errorf("client: no metadata server address: %w", syscall.EINVAL)
	}
	tr := cfg.Transport
	if tr == nil {
		tr = transport.NewTCP()
	}
	pool := transport.NewPool(tr, transport.PoolOptions{})
	meta := metarpc.NewClient(pool, cfg.MetaAddr)
	r := &resolver{meta: meta}
	rpc := storagerpc.NewClient(pool, r.resolve)
	storage := &resolvingStorage{StorageService: rpc, r: r}
	var local *localread.Reader
	if !cfg.NoLocalReads {
		// Objects of storage servers on this host are read from their
		// files (package storage/localread).
		o := localread.Options{Logger: cfg.Logger}
		if cfg.BufferedLocalReads {
			o.DirectMin = -1
		}
		local = localread.New(rpc, o)
		storage.StorageService = local
	}
	c := NewWithServices(meta, storage, cfg)
	r.timeout = c.cfg.Timeout
	c.close = append(c.close, pool.Close)
	if local != nil {
		c.close = append(c.close, local.Close)
	}
	return c, nil
}

// resolver maps target ids to storage server addresses from a cached copy
// of MetaService.Targets.
type resolver struct {
	meta    proto.MetaService
	timeout time.Duration

	mu        sync.Mutex
	addrs     map[proto.TargetID]string
	stale     bool
	refreshed time.Time
}

// minRefresh keeps a dead target from turning every failed call into a
// metadata round trip.
const minRefresh = 500 * time.Millisecond

func (r *resolver) resolve(ctx context.Context, t proto.TargetID) (string, error) {
	r.mu.Lock()
	addr, ok := r.addrs[t]
	refresh := !ok || (r.stale && time.Since(r.refreshed) >= minRefresh)
	r.mu.Unlock()
	if !refresh {
		return addr, nil
	}
	ts, err := r.meta.Targets(ctx)
	if err != nil {
		if ok {
			return addr, nil // keep using what we had
		}
		return "", err
	}
	m := make(map[proto.TargetID]string, len(ts))
	for _, ti := range ts {
		m[ti.ID] = ti.Addr
	}
	r.mu.Lock()
	r.addrs, r.stale, r.refreshed = m, false, time.Now()
	r.mu.Unlock()
	addr, ok = m[t]
	if !ok {
		return "", fmt.Errorf("client: unknown storage target %d: %w", t, syscall.EIO)
	}
	return addr, nil
}

// invalidate marks the cache stale after a failed call: the target may have
// moved to another server.
func (r *resolver) invalidate(err error) {
	if errors.Is(err, syscall.EIO) || errors.Is(err, syscall.ETIMEDOUT) || errors.Is(err, syscall.ECONNREFUSED) {
		r.mu.Lock()
		r.stale = true
		r.mu.Unlock()
	}
}

// resolvingStorage reports transport failures to the resolver.
type resolvingStorage struct {
	proto.StorageService
	r *resolver
}

func (s *resolvingStorage) Read(ctx context.Context, t proto.TargetID, obj proto.ObjectID, off uint64, p []byte) (int, error) {
	n, err := s.StorageService.Read(ctx, t, obj, off, p)
	s.r.invalidate(err)
	return n, err
}

func (s *resolvingStorage) Write(ctx context.Context, t proto.TargetID, obj proto.ObjectID, off uint64, data []byte) (uint64, error) {
	v, err := s.StorageService.Write(ctx, t, obj, off, data)
	s.r.invalidate(err)
	return v, err
}

// WriteCounting implements proto.CountingWriter (the count unknown when
// the storage client does not count).
func (s *resolvingStorage) WriteCounting(ctx context.Context, t proto.TargetID, obj proto.ObjectID, off uint64, data []byte) (version, allocated uint64, err error) {
	version, allocated, err = proto.WriteCounting(ctx, s.StorageService, t, obj, off, data)
	s.r.invalidate(err)
	return version, allocated, err
}

func (s *resolvingStorage) Truncate(ctx context.Context, t proto.TargetID, obj proto.ObjectID, size uint64) error {
	err := s.StorageService.Truncate(ctx, t, obj, size)
	s.r.invalidate(err)
	return err
}

func (s *resolvingStorage) Sync(ctx context.Context, t proto.TargetID, obj proto.ObjectID) error {
	err := s.StorageService.Sync(ctx, t, obj)
	s.r.invalidate(err)
	return err
}

// Extend implements proto.ObjectExtender when the storage client does.
func (s *resolvingStorage) Extend(ctx context.Context, t proto.TargetID, obj proto.ObjectID, size uint64) error {
	x, ok := s.StorageService.(proto.ObjectExtender)
	if !ok {
		return fmt.Errorf("client: storage cannot extend objects: %w", syscall.ENOSYS)
	}
	err := x.Extend(ctx, t, obj, size)
	s.r.invalidate(err)
	return err
}

// Forget forwards to the storage client (localread.Reader: the file's
// objects' descriptors are closed).
func (s *resolvingStorage) Forget(ino proto.Ino) {
	if f, ok := s.StorageService.(forgetter); ok {
		f.Forget(ino)
	}
}

// LocalReads forwards to the storage client (localread.Reader).
func (s *resolvingStorage) LocalReads() (localread.Counts, bool) {
	if lr, isLocal := s.StorageService.(*localread.Reader); isLocal {
		return lr.Counts(), true
	}
	return localread.Counts{}, false
}

// ReadRow, WriteRow and Fence implement proto.RowVersioner when the
// storage client does.
func (s *resolvingStorage) rowVersioner() (proto.RowVersioner, error) {
	rv, ok := s.StorageService.(proto.RowVersioner)
	if !ok {
		return nil, fmt.Errorf("client: storage has no object versions: %w", syscall.ENOSYS)
	}
	return rv, nil
}

func (s *resolvingStorage) ReadRow(ctx context.Context, t proto.TargetID, obj proto.ObjectID, off, unit uint64, p []byte) (int, proto.RowVersion, error) {
	rv, err := s.rowVersioner()
	if err != nil {
		return 0, proto.RowVersion{}, err
	}
	n, v, err := rv.ReadRow(ctx, t, obj, off, unit, p)
	s.r.invalidate(err)
	return n, v, err
}

func (s *resolvingStorage) WriteRow(ctx context.Context, t proto.TargetID, obj proto.ObjectID, w proto.RowWrite) (uint64, error) {
	rv, err := s.rowVersioner()
	if err != nil {
		return 0, err
	}
	v, err := rv.WriteRow(ctx, t, obj, w)
	s.r.invalidate(err)
	return v, err
}

func (s *resolvingStorage) Fence(ctx context.Context, t proto.TargetID, obj proto.ObjectID) error {
	rv, err := s.rowVersioner()
	if err != nil {
		return err
	}
	err = rv.Fence(ctx, t, obj)
	s.r.invalidate(err)
	return err
}

// CopyRow implements proto.RowCopier when the storage client does.
func (s *resolvingStorage) CopyRow(ctx context.Context, t proto.TargetID, dst proto.ObjectID, rc proto.RowCopy) error {
	x, ok := s.StorageService.(proto.RowCopier)
	if !ok {
		return fmt.Errorf("client: storage cannot copy versioned rows: %w", syscall.ENOSYS)
	}
	err := x.CopyRow(ctx, t, dst, rc)
	s.r.invalidate(err)
	return err
}
