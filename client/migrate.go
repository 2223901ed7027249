package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/weft-fs/weft/layout"
	"github.com/weft-fs/weft/proto"
)

// Online restripe (`weft migrate`): the file is copied into a new set of
// objects through this client's own read and write paths, then the
// metadata service swaps the layout (proto.Migrator). The copy is the
// client's because only the client path can write every layout from every
// other: an EC target needs its rows encoded and versioned (ec.go), which
// the storage servers' object copy (proto.ObjectRebuilder, Copy) does not
// do across layouts.
//
//   - The new objects are named by a new generation, so they never collide
//     with the file's current objects, even on the same target and slot.
//   - Readers keep reading the old objects while the copy runs, and after
//     the commit until the moved-object grace ends; new opens get the new
//     layout. Bytes are never mixed: a reader reads through one layout.
//   - Writers: the metadata service refuses to begin while the file is
//     open for writing and refuses the commit if it was opened for writing
//     or written since (EBUSY); the new objects are then removed and the
//     file keeps its old layout, with every byte the writer wrote.
//   - The copy fails, rather than marking a copy stale, if any object of
//     the new layout misses a write (migrateState.strict).

// migrateChunk is about how many bytes one copy step reads and writes.
const migrateChunk = 8 << 20

// ErrMigrateBusy is wrapped when a restripe is refused because the file
// is or was open for writing, or was written, during it.
var ErrMigrateBusy = errors.New("client: file written during its migration")

// Migrate restripes file ino to policy (kind, stripe count and size, and
// optionally targets; placed by the metadata service as for a new file)
// and returns its new attributes. The caller needs read and write
// permission. On failure the file keeps its layout and data.
func (c *Client) Migrate(ctx context.Context, ino proto.Ino, policy layout.Layout) (proto.Attr, error) {
	m := c.meta
	if r, ok := m.(releasingMeta); ok {
		m = r.MetaService
	}
	mg, ok := m.(proto.Migrator)
	if !ok {
		return proto.Attr{}, fmt.Errorf("client: the metadata service cannot restripe files: %w", syscall.ENOSYS)
	}
	// A file this client just closed must not count as open for writing:
	// its release may still wait in the queue (as Unlink sends them).
	c.rel.drain()
	rctx, cancel := c.rpcCtx(ctx)
	t, err := mg.MigrateBegin(rctx, ino, policy)
	cancel()
	if err != nil {
		return proto.Attr{}, migrateErr(ino, "begin", err)
	}
	a, err := c.migrateCopy(ctx, mg, t)
	if err != nil {
		actx, cancel := c.rpcCtx(ctx)
		if aerr := mg.MigrateAbort(actx, t); aerr != nil {
			c.log.Warn("migrate abort failed: the new objects go when their ticket ends", "ino", ino, "err", aerr)
		}
		cancel()
		return proto.Attr{}, err
	}
	c.log.Info("file migrated", "ino", ino, "kind", t.Layout.Kind.String(), "targets", t.Layout.Targets)
	return a, nil
}

func migrateErr(ino proto.Ino, what string, err error) error {
	if errors.Is(err, syscall.EBUSY) {
		return fmt.Errorf("client: migrate ino %d: %s: %w (%w)", ino, what, ErrMigrateBusy, err)
	}
	return fmt.Errorf("client: migrate ino %d: %s: %w", ino, what, err)
}

// migrateCopy copies the file as ticket t found it into t's objects,
// syncs them and commits.
func (c *Client) migrateCopy(ctx context.Context, mg proto.Migrator, t proto.MigrateTicket) (proto.Attr, error) {
	rctx, cancel := c.rpcCtx(ctx)
	a, err := c.meta.GetAttr(rctx, t.Ino)
	cancel()
	if err != nil {
		return proto.Attr{}, migrateErr(t.Ino, "getattr", err)
	}
	if a.Gen != t.Gen || a.Mtime != t.Mtime || a.Size != t.Size {
		return proto.Attr{}, migrateErr(t.Ino, "copy", syscall.EBUSY)
	}
	size := a.Size
	src := &inodeState{c: c, ino: t.Ino, gen: a.Gen, layout: a.Layout, metaSize: size}
	src.cond = sync.NewCond(&src.mu)
	defer src.stopCaps()
	if _, err := src.renewCap(ctx, proto.AccessRead, nil); err != nil {
		return proto.Attr{}, migrateErr(t.Ino, "read capability", err)
	}
	nl := t.Layout
	dst := &inodeState{c: c, ino: t.Ino, gen: t.NewGen, layout: nl.Clone(), metaSize: size, strict: true,
		unsynced: map[int]bool{}, written: map[int]uint64{}}
	dst.cond = sync.NewCond(&dst.mu)
	defer dst.stopCaps()
	tr := ticketRenewal{c: c, mg: mg, t: &t, dst: dst}
	tr.took(ctx)

	// Every object first gets its share of the size (sized layouts: a
	// shorter object is lost data); then the bytes, then a sync.
	if err := c.truncateObjects(ctx, dst, nl, size); err != nil {
		return proto.Attr{}, migrateErr(t.Ino, "size the new objects", err)
	}
	unit := nl.StripeSize
	if nl.Kind == layout.EC {
		unit = nl.RowBytes()
	}
	chunk := max(unit, migrateChunk/unit*unit)
	buf := make([]byte, chunk)
	for off := uint64(0); off < size; off += chunk {
		if err := ctx.Err(); err != nil {
			return proto.Attr{}, migrateErr(t.Ino, "copy", err) // interrupted (the FUSE request's signal)
		}
		if err := tr.renewIfDue(ctx); err != nil {
			return proto.Attr{}, err
		}
		p := buf[:min(chunk, size-off)]
		if err := c.readRange(ctx, src, a.Layout, off, p); err != nil {
			return proto.Attr{}, migrateErr(t.Ino, fmt.Sprintf("read [%d,+%d)", off, len(p)), err)
		}
		if nl.Kind != layout.EC && allZero(p) {
			continue // a hole stays one (the objects read zeros there)
		}
		if err := c.migrateWrite(ctx, dst, nl, off, p); err != nil {
			return proto.Attr{}, migrateErr(t.Ino, fmt.Sprintf("write [%d,+%d)", off, len(p)), err)
		}
	}
	if err := tr.renewIfDue(ctx); err != nil {
		return proto.Attr{}, err
	}
	if err := c.migrateSync(ctx, dst, nl); err != nil {
		return proto.Attr{}, migrateErr(t.Ino, "sync", err)
	}
	if err := tr.renewIfDue(ctx); err != nil {
		return proto.Attr{}, err
	}
	t.Blocks = dst.allocatedBlocks(ctx, nl, size)
	rctx, cancel = c.rpcCtx(ctx)
	defer cancel()
	done := c.changing(0, "", t.Ino)
	na, err := mg.MigrateCommit(rctx, t)
	done()
	if err != nil {
		return proto.Attr{}, migrateErr(t.Ino, "commit", err)
	}
	return na, nil
}

// ticketRenewal keeps a restripe's ticket (its new objects and their
// capability) alive while the copy runs: a copy of a large file can
// outlast the ticket's life (meta.Options.MigrateTicketLife, an hour by
// default). It renews when half the life has passed, by this client's
// clock from when the ticket arrived. A ticket that ended cannot be
// renewed (ETIMEDOUT): the migrate then fails and aborts, and the new
// objects are removed.
type ticketRenewal struct {
	c       *Client
	mg      proto.Migrator
	t       *proto.MigrateTicket
	dst     *inodeState
	renewAt time.Time
}

// took holds the ticket's capability for the new objects (never renewed
// as a handle's are: that would name the file's current generation) and
// sets when to renew it.
func (tr *ticketRenewal) took(ctx context.Context) {
	h := newHeldCap(ctx, tr.t.Cap, proto.AccessReadWrite)
	life := h.lifetime
	now := tr.c.now()
	if life <= 0 { // no capabilities: the ticket's end by this clock
		life = time.Unix(0, tr.t.Until).Sub(now)
	}
	h.renewAt = time.Time{}
	tr.dst.setCap(h)
	tr.renewAt = now.Add(max(life/2, time.Millisecond))
}

func (tr *ticketRenewal) renewIfDue(ctx context.Context) error {
	if tr.c.now().Before(tr.renewAt) {
		return nil
	}
	rctx, cancel := tr.c.rpcCtx(ctx)
	nt, err := tr.mg.MigrateRenew(rctx, *tr.t)
	cancel()
	if errors.Is(err, syscall.ENOSYS) {
		// A server from before renewals: the copy has the ticket's life.
		tr.c.log.Warn("the metadata service cannot renew migrate tickets: the copy must end within the ticket's life", "ino", tr.t.Ino)
		tr.renewAt = tr.c.now().Add(100 * 365 * 24 * time.Hour) // never
		return nil
	}
	if err != nil {
		return migrateErr(tr.t.Ino, "renew the ticket", err)
	}
	tr.t.Until, tr.t.Cap = nt.Until, nt.Cap
	tr.took(ctx)
	return nil
}

// migrateWrite writes p at file offset off into dst's objects: EC row by
// row (encoded and versioned), else to every copy of each stripe unit.
func (c *Client) migrateWrite(ctx context.Context, dst *inodeState, l layout.Layout, off uint64, p []byte) error {
	wctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	return c.writeExtents(wctx, dst, l, "migrate", off, p, l.Extents(off, uint64(len(p))))
}

// migrateSync makes every object of dst durable on its target.
func (c *Client) migrateSync(ctx context.Context, dst *inodeState, l layout.Layout) error {
	sctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	return parallel(len(l.Targets), func(slot int) error {
		return dst.withCap(sctx, proto.AccessWrite, func(ctx context.Context) error {
			if err := c.storage.Sync(ctx, l.Targets[slot], dst.objectOf(slot)); err != nil {
				return fmt.Errorf("client: sync slot %d on target %d: %w", slot, l.Targets[slot], err)
			}
			return nil
		})
	})
}

func allZero(p []byte) bool {
	for _, b := range p {
		if b != 0 {
			return false
		}
	}
	return true
}
