package meta

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/weft-fs/weft/meta/metarpc"
	"github.com/weft-fs/weft/meta/raftlog"
	"github.com/weft-fs/weft/meta/store"
	"github.com/weft-fs/weft/transport"
)

// RaftDir is the directory of a member's raft log inside its data
// directory (a pebble instance of its own, beside the store's).
const RaftDir = "raft"

// member is what Run adds for a member of a replicated group: its raft
// log, the transport that carries raft messages to the other members, and
// the pool it calls them through.
type member struct {
	replica *Replica
	log     *raftlog.Storage
	tcp     *raftlog.TCPTransport
	pool    *transport.Pool
}

// startMember checks the group (checkPeers: every member that answers has
// the same peer list, and the same file system), records the data
// directory's membership at a first start, and opens the raft log.
func startMember(ctx context.Context, cfg Config, tr transport.Transport, st *store.Pebble, fresh bool, log *slog.Logger) (*member, error) {
	m := &member{pool: transport.NewPool(tr, transport.PoolOptions{})}
	ask := func(ctx context.Context, addr string) (metarpc.Membership, error) {
		return metarpc.NewClient(m.pool, addr).Group(ctx)
	}
	fsid := ""
	if v, err := st.Get(store.CounterKey(store.CounterFSID)); err == nil {
		fsid = string(v)
	}
	if err := checkPeers(ctx, ask, cfg.ID, cfg.Peers, fsid); err != nil {
		m.pool.Close()
		return nil, err
	}
	if fresh {
		if err := writeMemberFile(cfg.DataDir, cfg.ID, cfg.Peers); err != nil {
			m.pool.Close()
			return nil, err
		}
	}
	lg, err := raftlog.OpenStorage(filepath.Join(cfg.DataDir, RaftDir), raftlog.StorageOptions{Logger: log})
	if err != nil {
		m.pool.Close()
		return nil, fmt.Errorf("meta: %w", err)
	}
	m.log = lg
	peers := map[uint64]string{}
	for id, a := range cfg.Peers {
		peers[id] = a
	}
	m.tcp, err = raftlog.NewTCPTransport(raftlog.TCPOptions{ID: cfg.ID, Peers: peers, Pool: m.pool,
		AllowUnauthenticated: cfg.AllowUnauthenticated, Logger: log})
	if err != nil {
		m.close()
		return nil, fmt.Errorf("meta: %w", err)
	}
	var lease time.Duration
	if cfg.LeaseReads {
		lease = cmp.Or(cfg.TickInterval, 100*time.Millisecond) * time.Duration(cmp.Or(cfg.ElectionTicks, 10)) / 2
	}
	m.replica = &Replica{
		ReadLease: lease,
		ID:        cfg.ID, Peers: cfg.Peers.IDs(), Addrs: cfg.Peers, Log: lg, Transport: m.tcp,
		Started: m.tcp.Start, OnRole: cfg.OnRole,
		TickInterval: cfg.TickInterval, ElectionTick: cfg.ElectionTicks, HeartbeatTick: cfg.HeartbeatTicks,
	}
	return m, nil
}

// handler serves raft's ops (raftlog.OpFirst..OpLast) with the raft
// transport and every other op with h.
func (m *member) handler(h transport.Handler) transport.Handler {
	return func(ctx context.Context, op uint16, req []byte) ([]byte, error) {
		if op >= raftlog.OpFirst && op <= raftlog.OpLast {
			return m.tcp.Handler(ctx, op, req)
		}
		return h(ctx, op, req)
	}
}

// close stops the raft transport and closes the log (after the server,
// which stops the node, closed). A nil member closes nothing.
func (m *member) close() error {
	if m == nil {
		return nil
	}
	if m.tcp != nil {
		m.tcp.Close()
	}
	var err error
	if m.log != nil {
		err = m.log.Close()
	}
	return errors.Join(err, m.pool.Close())
}

// clearDir removes everything in dir (a data directory that was empty
// before a first start that failed).
func clearDir(dir string) {
	names, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, n := range names {
		os.RemoveAll(filepath.Join(dir, n.Name()))
	}
}
