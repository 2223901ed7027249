package storage

import (
	"context"
	"log/slog"
	"time"

	"github.com/weft-fs/weft/internal/units"
	"github.com/weft-fs/weft/meta/metarpc"
)

// paramsInterval is how often a storage server fetches the run-time
// parameters from the metadata service (docs/params.md).
const paramsInterval = 10 * time.Second

// paramLister is what the registry offers for run-time parameters
// (metarpc.Client has it).
type paramLister interface {
	Params(ctx context.Context) ([]metarpc.Param, error)
}

// RebuildRate returns the parameter rebuild.rate: the bytes per second a
// rebuild may use (0: unlimited). The rebuild code reads it.
func (s *Server) RebuildRate() uint64 { return s.rebuildRate.Load() }

// paramsLoop fetches the run-time parameters every paramsInterval (at
// once first) and applies those storage servers read: log.level.storage
// and rebuild.rate. It returns when ctx ends.
func paramsLoop(ctx context.Context, cfg Config, srv *Server) {
	pl, ok := cfg.Registry.(paramLister)
	if !ok {
		return
	}
	var last map[string]string
	for {
		cctx, cancel := context.WithTimeout(ctx, paramsInterval)
		ps, err := pl.Params(cctx)
		cancel()
		if err == nil {
			now := map[string]string{}
			for _, p := range ps {
				now[p.Name] = p.Value
			}
			if !sameParams(last, now) {
				applyStorageParams(cfg, srv, now)
				last = now
			}
		} else if ctx.Err() == nil {
			cfg.Logger.Debug("storage: fetching run-time parameters failed", "err", err)
		}
		t := time.NewTimer(paramsInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func applyStorageParams(cfg Config, srv *Server, p map[string]string) {
	var rate uint64
	if n, err := units.ParseSize(p["rebuild.rate"]); err == nil {
		rate = n
	}
	srv.rebuildRate.Store(rate)
	if lv := cfg.LogLevel; lv != nil {
		level := cfg.DefaultLogLevel
		if v := p["log.level.storage"]; v != "" {
			var l slog.Level
			if l.UnmarshalText([]byte(v)) == nil {
				level = l
			}
		}
		lv.Set(level)
	}
	cfg.Logger.Info("storage: run-time parameters applied", "rebuild.rate", p["rebuild.rate"], "log.level.storage", p["log.level.storage"])
}

func sameParams(a, b map[string]string) bool {
	if a == nil || len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
