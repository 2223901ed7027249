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

// paramsLoop fetches the run-time parameters every paramsInterval (at
// once first) and applies those storage servers read: log.level.storage,
// scrub.rate and scrub.interval. It returns when ctx ends.
func paramsLoop(ctx context.Context, cfg Config, sc *scrubber) {
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
				applyStorageParams(cfg, sc, now)
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

func applyStorageParams(cfg Config, sc *scrubber, p map[string]string) {
	if sc != nil {
		// Checked by the metadata service when set; unset or unreadable
		// values give the defaults.
		rate, iv := uint64(DefaultScrubRate), DefaultScrubInterval
		if v, err := units.ParseSize(p["scrub.rate"]); err == nil {
			rate = v
		}
		if v, err := units.ParseDuration(p["scrub.interval"]); err == nil {
			iv = v
		}
		if rate != sc.pace.Rate() {
			sc.pace.Set(rate)
		}
		sc.interval.Store(iv)
	}
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
	// rebuild.rate paces the metadata service's rebuild (which drives the
	// storage servers' copies); it is logged with the rest so an admin
	// sees which values every server got.
	cfg.Logger.Info("storage: run-time parameters applied", "rebuild.rate", p["rebuild.rate"], "log.level.storage", p["log.level.storage"],
		"scrub.rate", p["scrub.rate"], "scrub.interval", p["scrub.interval"])
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
