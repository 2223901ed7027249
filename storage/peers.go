package storage

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/weft-fs/weft/proto"
)

// peerResolver maps target ids to the addresses of the storage servers
// that serve them, from the metadata server's target list, fetched again
// when an id is unknown or the list is older than peerRefresh.
type peerResolver struct {
	list func(ctx context.Context) ([]proto.TargetInfo, error)

	mu      sync.Mutex
	addrs   map[proto.TargetID]string
	fetched time.Time
}

const peerRefresh = 10 * time.Second

func (r *peerResolver) resolve(ctx context.Context, t proto.TargetID) (string, error) {
	r.mu.Lock()
	addr, ok := r.addrs[t]
	fresh := time.Since(r.fetched) < peerRefresh
	r.mu.Unlock()
	if ok && fresh {
		return addr, nil
	}
	ts, err := r.list(ctx)
	if err != nil {
		if ok {
			return addr, nil
		}
		return "", fmt.Errorf("storage: peers: %w", err)
	}
	m := make(map[proto.TargetID]string, len(ts))
	for _, ti := range ts {
		m[ti.ID] = ti.Addr
	}
	r.mu.Lock()
	r.addrs, r.fetched = m, time.Now()
	r.mu.Unlock()
	if addr, ok = m[t]; !ok {
		return "", fmt.Errorf("storage: peers: unknown target %d: %w", t, syscall.ESTALE)
	}
	return addr, nil
}
