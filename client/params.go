package client

import (
	"context"
	"log/slog"
	"strconv"
	"sync/atomic"

	"github.com/weft-fs/weft/internal/units"
	"github.com/weft-fs/weft/meta/metarpc"
	"github.com/weft-fs/weft/storage/localread"
)

// paramLister is what a metadata service offers for run-time parameters
// (metarpc.Client has it; see docs/params.md).
type paramLister interface {
	Params(ctx context.Context) ([]metarpc.Param, error)
}

// clientParams are the run-time parameters the client applies, fetched
// from the metadata service with every session renewal.
type clientParams struct {
	raWindow atomic.Uint64 // client.read_ahead in bytes; 0: auto (raGeometry's)
	rpcs     atomic.Int64  // client.rpcs_in_flight applied; 0: no bound
	applied  atomic.Pointer[map[string]string]
}

// ParamValues returns the run-time parameters as this client applies
// them, as numbers (what a mount's --metrics shows as weft_client_param):
// client.read_ahead (bytes; 0: auto, from each file's layout),
// client.write_behind (bytes of the buffers' budget) and
// client.rpcs_in_flight (per storage server; 0: no bound).
func (c *Client) ParamValues() map[string]float64 {
	return map[string]float64{
		"client.read_ahead":     float64(c.ReadAheadWindow()),
		"client.write_behind":   float64(c.WriteBehindLimit()),
		"client.rpcs_in_flight": float64(c.params.rpcs.Load()),
	}
}

// outstander is a storage client that counts its requests under way per
// server (storagerpc.Client).
type outstander interface {
	Outstanding() map[string]int64
}

// StorageInflight returns the storage requests this client has under way
// at each storage server (by address) now; nil if its storage client
// does not count them.
func (c *Client) StorageInflight() map[string]int64 {
	if o, ok := c.storage.(outstander); ok {
		return o.Outstanding()
	}
	return nil
}

// LocalReads returns the storage reads this client served from local
// files (short-circuit, package storage/localread) and how many of them
// bypassed the page cache, those that went over RPC although their
// server is on this host, and the objects it opened locally; ok is false
// when local reads are off.
func (c *Client) LocalReads() (localread.Counts, bool) {
	if s, isRS := c.storage.(interface {
		LocalReads() (localread.Counts, bool)
	}); isRS {
		return s.LocalReads()
	}
	return localread.Counts{}, false
}

// Outstanding forwards to the storage client.
func (s *resolvingStorage) Outstanding() map[string]int64 {
	if o, ok := s.StorageService.(outstander); ok {
		return o.Outstanding()
	}
	return nil
}

// ReadAheadWindow returns the read-ahead window set by the parameter
// client.read_ahead (0: auto, from each file's layout).
func (c *Client) ReadAheadWindow() uint64 { return c.params.raWindow.Load() }

// WriteBehindLimit returns the bytes the mount's write-behind (and
// read-ahead) buffers may hold: client.write_behind, or with auto
// Config.CacheLimit (--cache-limit).
func (c *Client) WriteBehindLimit() uint64 { return c.budget.getLimit() }

// inflightLimiter is a storage client that bounds its requests in flight
// per server (storagerpc.Client).
type inflightLimiter interface {
	SetInflightLimit(n int)
}

// SetInflightLimit forwards client.rpcs_in_flight to the storage client.
func (s *resolvingStorage) SetInflightLimit(n int) {
	if l, ok := s.StorageService.(inflightLimiter); ok {
		l.SetInflightLimit(n)
	}
}

// applyParams fetches the run-time parameters and applies those the client
// reads: client.read_ahead, client.write_behind, client.rpcs_in_flight
// and log.level.client (client.checksums is read-only: the storage
// servers' checksums are always on). A failure is logged and
// leaves the current values (the next renewal tries again).
func (c *Client) applyParams(ctx context.Context) {
	svc := c.meta
	if rm, ok := svc.(releasingMeta); ok {
		svc = rm.MetaService
	}
	pl, ok := svc.(paramLister)
	if !ok {
		return
	}
	ps, err := pl.Params(ctx)
	if err != nil {
		c.log.Debug("client: fetching run-time parameters failed", "err", err)
		return
	}
	now := map[string]string{}
	for _, p := range ps {
		now[p.Name] = p.Value
	}
	if old := c.params.applied.Load(); old != nil && mapsEqual(*old, now) {
		return
	}
	var window uint64
	if v := now["client.read_ahead"]; v != "" && v != "auto" {
		if n, err := units.ParseSize(v); err == nil {
			window = n
		}
	}
	c.params.raWindow.Store(window)
	// client.write_behind: the budget of the mount's buffers.
	limit := c.cfg.CacheLimit
	if v := now["client.write_behind"]; v != "" && v != "auto" {
		if n, err := units.ParseSize(v); err == nil && n > 0 {
			limit = n
		}
	}
	c.budget.setLimit(limit)
	c.perFile.Store(min(maxFileInflight, limit))
	// client.rpcs_in_flight: storage requests outstanding per server.
	rpcs := 0
	if v := now["client.rpcs_in_flight"]; v != "" && v != "auto" {
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			rpcs = n
		}
	}
	if l, ok := c.storage.(inflightLimiter); ok {
		l.SetInflightLimit(rpcs)
	}
	c.params.rpcs.Store(int64(rpcs))
	if lv := c.cfg.LogLevel; lv != nil {
		level := c.cfg.DefaultLogLevel
		if v := now["log.level.client"]; v != "" {
			var l slog.Level
			if l.UnmarshalText([]byte(v)) == nil {
				level = l
			}
		}
		lv.Set(level)
	}
	c.params.applied.Store(&now)
	c.log.Info("client: run-time parameters applied", "client.read_ahead", now["client.read_ahead"],
		"client.write_behind", now["client.write_behind"], "client.rpcs_in_flight", now["client.rpcs_in_flight"],
		"log.level.client", now["log.level.client"])
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
