package meta

import (
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weft-fs/weft/layout"
	"github.com/weft-fs/weft/meta/metarpc"
	"github.com/weft-fs/weft/meta/store"
	"github.com/weft-fs/weft/proto"
)

// gcDue returns when the queued object is due for removal (unix ns; 0: at
// once) and whether it is queued at all.
func gcDue(e *env, tg proto.TargetID, ino proto.Ino, slot int, gen uint64) (int64, bool) {
	v, err := e.st.Get(store.GCKey(uint32(tg), uint64(ino), uint32(slot), gen))
	if err != nil {
		return 0, false
	}
	if len(v) != 8 {
		return 0, true
	}
	return int64(binary.BigEndian.Uint64(v)), true
}

// TestMigrateCommit: begin places the new layout (the file unchanged, the
// new objects queued for removal at the ticket's end); commit swaps layout
// and generation, takes the new objects off the queue and queues the old
// ones after the moved-object grace; a second commit (a lost reply)
// succeeds again; size, times and quota usage stay.
func TestMigrateCommit(t *testing.T) {
	e, _, a, _ := rebuildEnv(t)
	usage := e.usage(metarpc.QuotaUser, a.Uid)
	pol := layout.Layout{Kind: layout.RAID0, StripeSize: 1 << 20, StripeCount: 3}
	tk, err := e.srv.MigrateBegin(ctx, a.Ino, pol)
	e.must(err)
	if tk.Gen != a.Gen || tk.NewGen == a.Gen || tk.NewGen == 0 || tk.Size != a.Size || tk.Mtime != a.Mtime ||
		tk.Layout.Kind != layout.RAID0 || len(tk.Layout.Targets) != 3 || !tk.Layout.ObjectsSized {
		t.Fatalf("ticket %+v for %+v", tk, a)
	}
	for slot, tg := range tk.Layout.Targets {
		if due, ok := gcDue(e, tg, a.Ino, slot, tk.NewGen); !ok || due != tk.Until {
			t.Fatalf("new object %d on %d: queued %v, due %d, want %d", slot, tg, ok, due, tk.Until)
		}
	}
	if got, _ := e.srv.GetAttr(ctx, a.Ino); got.Gen != a.Gen || !layoutEqual(got.Layout, a.Layout) {
		t.Fatalf("begin changed the file: %+v", got)
	}
	got, err := e.srv.MigrateCommit(ctx, tk)
	e.must(err)
	if got.Gen != tk.NewGen || !layoutEqual(got.Layout, tk.Layout) || got.Size != a.Size || got.Mtime != a.Mtime || got.Ctime != a.Ctime {
		t.Fatalf("after commit %+v, was %+v", got, a)
	}
	for slot, tg := range tk.Layout.Targets {
		if _, ok := gcDue(e, tg, a.Ino, slot, tk.NewGen); ok {
			t.Fatalf("new object %d still queued after the commit", slot)
		}
	}
	grace := e.clock.Now().Add(e.srv.opts.MovedObjectGrace).UnixNano()
	for slot, tg := range a.Layout.Targets {
		if due, ok := gcDue(e, tg, a.Ino, slot, a.Gen); !ok || due != grace {
			t.Fatalf("old object %d: queued %v, due %d, want %d", slot, ok, due, grace)
		}
	}
	if again, err := e.srv.MigrateCommit(ctx, tk); err != nil || again.Gen != tk.NewGen {
		t.Fatalf("repeated commit: %+v %v", again, err)
	}
	// The bytes stay charged once.
	if got := e.usage(metarpc.QuotaUser, a.Uid); got != usage || got.Bytes != 5<<20 {
		t.Fatalf("usage after the migration %+v, before %+v", got, usage)
	}
	checkQuotaExact(t, e.st)
	// An abort of a committed restripe changes nothing.
	if err := e.srv.MigrateAbort(ctx, tk); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("abort after commit: %v", err)
	}
}

// TestMigrateRefused: a file open for writing is not begun; one written,
// opened for writing or changed since the begin is not committed (EBUSY)
// and keeps its layout; a layout the begin did not place, or a commit too
// close to the ticket's end, is refused; abort makes the new objects due
// at once; directories and special files are refused.
func TestMigrateRefused(t *testing.T) {
	e, _, a, _ := rebuildEnv(t)
	pol := layout.Layout{Kind: layout.RAID0, StripeSize: 1 << 20, StripeCount: 2}

	_, _, err := e.srv.Open(ctx, a.Ino, proto.AccessWrite)
	e.must(err)
	if _, err := e.srv.MigrateBegin(ctx, a.Ino, pol); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("begin while open for writing: %v", err)
	}
	tkOpen := func() proto.MigrateTicket {
		e.must(e.srv.Release(ctx, a.Ino))
		tk, err := e.srv.MigrateBegin(ctx, a.Ino, pol)
		e.must(err)
		return tk
	}
	tk := tkOpen()
	_, _, err = e.srv.Open(ctx, a.Ino, proto.AccessWrite)
	e.must(err)
	if _, err := e.srv.MigrateCommit(ctx, tk); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("commit while open for writing: %v", err)
	}
	tk = tkOpen()
	w, err := e.srv.WriteDone(ctx, a.Ino, 6<<20, a.Mtime+1000, proto.NoBlocks)
	e.must(err)
	if _, err := e.srv.MigrateCommit(ctx, tk); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("commit of a file written since the begin: %v", err)
	}
	if got, _ := e.srv.GetAttr(ctx, a.Ino); got.Gen != a.Gen || !layoutEqual(got.Layout, a.Layout) || got.Size != w.Size {
		t.Fatalf("refused commit changed the file: %+v", got)
	}

	if _, err := e.srv.MigrateBegin(ctx, proto.RootIno, pol); !errors.Is(err, syscall.EISDIR) {
		t.Fatalf("begin of a directory: %v", err)
	}
	fifo, err := e.srv.Create(ctx, proto.CreateIn{Parent: proto.RootIno, Name: "p", Mode: syscall.S_IFIFO | 0o644})
	e.must(err)
	if _, err := e.srv.MigrateBegin(ctx, fifo.Ino, pol); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("begin of a fifo: %v", err)
	}
	bad := pol
	bad.Targets = []proto.TargetID{99, 98}
	if _, err := e.srv.MigrateBegin(ctx, a.Ino, bad); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("begin onto unknown targets: %v", err)
	}
	if _, err := e.srv.MigrateBegin(ctx, a.Ino, layout.Layout{Kind: layout.EC, ECData: 4, ECParity: 2, StripeSize: 1 << 20, StripeCount: 1}); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("begin of ec 4+2 on three servers: %v", err)
	}
	tk, err = e.srv.MigrateBegin(ctx, a.Ino, pol)
	e.must(err)
	forged := tk
	forged.Layout = tk.Layout.Clone()
	slices.Reverse(forged.Layout.Targets) // not the slots the begin placed
	if _, err := e.srv.MigrateCommit(ctx, forged); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("commit of a layout the begin did not place: %v", err)
	}
	e.clock.Advance(e.srv.opts.MigrateTicketLife - e.srv.migrateMargin() + time.Second)
	if _, err := e.srv.MigrateCommit(ctx, tk); !errors.Is(err, syscall.ETIMEDOUT) {
		t.Fatalf("commit near the ticket's end: %v", err)
	}
	e.must(e.srv.MigrateAbort(ctx, tk))
	for slot, tg := range tk.Layout.Targets {
		if due, ok := gcDue(e, tg, a.Ino, slot, tk.NewGen); ok && due != 0 {
			t.Fatalf("aborted object %d due at %d", slot, due)
		}
	}
	if got, _ := e.srv.GetAttr(ctx, a.Ino); got.Gen != a.Gen {
		t.Fatalf("aborted restripe changed the file: %+v", got)
	}

}

// TestMigrateOpenWaits: an open for writing that arrives while a commit
// is being proposed waits for it and gets the new layout.
func TestMigrateOpenWaits(t *testing.T) {
	e, _, a, _ := rebuildEnv(t)
	tk, err := e.srv.MigrateBegin(ctx, a.Ino, layout.Layout{Kind: layout.RAID0, StripeSize: 1 << 20, StripeCount: 2})
	e.must(err)
	done := make(chan struct{})
	e.srv.mu.Lock()
	e.srv.migrating[a.Ino] = done
	e.srv.mu.Unlock()
	opened := make(chan proto.Attr, 1)
	go func() {
		a, _, err := e.srv.Open(ctx, a.Ino, proto.AccessWrite)
		e.must(err)
		opened <- a
	}()
	c := &Command{Op: OpMigrateCommit, Now: e.srv.now(), Ino: a.Ino, Gen: tk.Gen, NewGen: tk.NewGen, Layout: &tk.Layout}
	c.SetAttr.Mtime, c.SetAttr.Ctime, c.SetAttr.Size = tk.Mtime, tk.Ctime, tk.Size
	select {
	case got := <-opened:
		t.Fatalf("open for writing went on during the commit: %+v", got)
	case <-time.After(50 * time.Millisecond):
	}
	_, err = e.srv.propose(ctx, c)
	e.must(err)
	e.srv.mu.Lock()
	delete(e.srv.migrating, a.Ino)
	e.srv.mu.Unlock()
	close(done)
	if got := <-opened; got.Gen != tk.NewGen {
		t.Fatalf("open after the commit got generation %#x, want %#x", got.Gen, tk.NewGen)
	}
}

// TestMigrateGrace: after a restart, until clients took back their
// handles, a restripe is neither begun nor committed (a writer's handle
// may not be known yet).
func TestMigrateGrace(t *testing.T) {
	e, _, a, _ := rebuildEnv(t)
	pol := layout.Layout{Kind: layout.RAID0, StripeSize: 1 << 20, StripeCount: 2}
	tk, err := e.srv.MigrateBegin(ctx, a.Ino, pol)
	e.must(err)
	e.restart()
	if _, err := e.srv.MigrateBegin(ctx, a.Ino, pol); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("begin in the grace period: %v", err)
	}
	if _, err := e.srv.MigrateCommit(ctx, tk); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("commit in the grace period: %v", err)
	}
	if got, _ := e.srv.GetAttr(ctx, a.Ino); got.Gen != a.Gen {
		t.Fatalf("refused commit changed the file: %+v", got)
	}
}

// TestMigrateRenew: a renewal keeps the new objects queued until a new
// end, so a commit after the first ticket's end succeeds; a ticket that
// ended is not renewed nor committed (ETIMEDOUT, a clear message) and
// changes nothing; a renewal after the commit is refused. The replaced
// generation is kept for handles that follow (Follow), a generation the
// file never had is not.
func TestMigrateRenew(t *testing.T) {
	e, _, a, _ := rebuildEnv(t)
	life := e.srv.opts.MigrateTicketLife
	pol := layout.Layout{Kind: layout.RAID0, StripeSize: 1 << 20, StripeCount: 2}
	tk, err := e.srv.MigrateBegin(ctx, a.Ino, pol)
	e.must(err)
	ended, err := e.srv.MigrateBegin(ctx, a.Ino, pol) // never renewed
	e.must(err)
	e.clock.Advance(life / 2)
	tk2, err := e.srv.MigrateRenew(ctx, tk)
	e.must(err)
	want := e.clock.Now().Add(life).UnixNano()
	if tk2.Until != want || tk2.NewGen != tk.NewGen {
		t.Fatalf("renewed ticket until %d (want %d), %+v", tk2.Until, want, tk2)
	}
	for slot, tg := range tk.Layout.Targets {
		if due, ok := gcDue(e, tg, a.Ino, slot, tk.NewGen); !ok || due != want {
			t.Fatalf("new object %d after the renewal: queued %v, due %d, want %d", slot, ok, due, want)
		}
	}
	e.clock.Advance(life * 3 / 4) // past the first tickets' end

	if _, err := e.srv.MigrateRenew(ctx, ended); !errors.Is(err, syscall.ETIMEDOUT) || !strings.Contains(err.Error(), "ticket ended") {
		t.Fatalf("renewal of a ticket that ended: %v", err)
	}
	for slot, tg := range ended.Layout.Targets {
		if due, ok := gcDue(e, tg, a.Ino, slot, ended.NewGen); !ok || due != ended.Until {
			t.Fatalf("refused renewal changed object %d: queued %v, due %d", slot, ok, due)
		}
	}
	for _, old := range []proto.MigrateTicket{ended, tk} {
		if _, err := e.srv.MigrateCommit(ctx, old); !errors.Is(err, syscall.ETIMEDOUT) {
			t.Fatalf("commit of a ticket that ended: %v", err)
		}
	}
	if got, _ := e.srv.GetAttr(ctx, a.Ino); got.Gen != a.Gen {
		t.Fatalf("refused commits changed the file: %+v", got)
	}
	got, err := e.srv.MigrateCommit(ctx, tk2)
	e.must(err)
	if got.Gen != tk.NewGen {
		t.Fatalf("commit of the renewed ticket: %+v", got)
	}
	if _, err := e.srv.MigrateRenew(ctx, tk2); err == nil {
		t.Fatal("renewal after the commit succeeded")
	}
	for _, gen := range []uint64{a.Gen, tk.NewGen} {
		if fa, _, err := e.srv.Follow(ctx, a.Ino, gen, proto.AccessRead); err != nil || fa.Gen != tk.NewGen {
			t.Fatalf("follow from %#x: %+v %v", gen, fa, err)
		}
	}
	if _, _, err := e.srv.Follow(ctx, a.Ino, a.Gen+1, proto.AccessRead); !errors.Is(err, syscall.ESTALE) {
		t.Fatalf("follow from a generation the file never had: %v", err)
	}
}
