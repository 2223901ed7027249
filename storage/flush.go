package storage

import (
	"context"
	"time"

	"github.com/weft-fs/weft/storage/vfs"
)

// The background sync. A write acknowledged to a client is in the target's
// page cache; only Sync (the client's fsync) forces it to the disk. So that
// what nobody fsyncs still reaches the disk within a bound of weft's own
// (the durability contract in README.md: at most 1 s after write(2); the
// mount sends its buffered writes within 250 ms), each target whose
// objects changed since the last round syncs its whole file system
// (syncfs(2): one call for every object written, where a fsync of each
// would cost thousands of calls a second under small-file loads) every
// FlushInterval. The kernel would write the pages back anyway, after
// dirty_expire_centisecs (30 s by default).

// FlushInterval is how often a target that was written to syncs.
const FlushInterval = 500 * time.Millisecond

// markWritten records that an object of t changed since its last sync.
// Every write calls it: a load first keeps the flag's cache line shared
// between cores while it is already set.
func (t *Target) markWritten() {
	if !t.written.Load() {
		t.written.Store(true)
	}
}

// flushLoop syncs t every interval while it is written to, and once more
// when ctx ends.
func (t *Target) flushLoop(ctx context.Context, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			t.flushWritten()
			return
		case <-tick.C:
			t.flushWritten()
		}
	}
}

// flushWritten syncs t's file system if t was written to since the last
// time. A file system that cannot (an in-memory one in tests) holds
// nothing that a power loss could take. A failure is logged: the pages it
// concerns may be lost, and a client's fsync of an object among them fails
// too (the kernel reports a writeback error to each open file).
func (t *Target) flushWritten() {
	if !t.written.Swap(false) {
		return
	}
	fs, ok := t.fs.(vfs.FSSyncer)
	if !ok {
		return
	}
	if err := fs.SyncFS(t.dir); err != nil {
		t.log.Error("storage: background sync failed: what was written to this target in the last moments may not be on its disk", "target", t.dir, "err", err)
	}
}
