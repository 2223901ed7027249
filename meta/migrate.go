package meta

import (
	"context"
	"encoding/binary"
	"slices"
	"syscall"
	"time"

	"github.com/weft-fs/weft/capability"
	"github.com/weft-fs/weft/layout"
	"github.com/weft-fs/weft/meta/store"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/transport"
)

// Online restripe (`weft migrate`; see doc.go, "Online restripe"): begin
// places a new layout whose objects are named by a new generation, the
// client copies the file into them through its own write path, and commit
// swaps layout and generation in one command if the file was not written
// meanwhile; the old objects are removed MovedObjectGrace later.
const (
	// DefaultMigrateTicketLife is how long a begun restripe's new objects
	// are kept without a commit or a renewal (Options.MigrateTicketLife):
	// a client that died mid-copy leaves them on the GC queue, due then.
	// Its capability lasts as long; the client renews both while it copies.
	DefaultMigrateTicketLife = time.Hour
	// migrateCommitMargin: a commit or renewal is refused this close to
	// the ticket's end (a quarter of the ticket's life if that is less),
	// so the object GC (which removes the new objects at the end) can
	// never race it, even with some clock skew between leaders.
	migrateCommitMargin = 5 * time.Minute
)

// migrateMargin is how close to its end a ticket is no longer committed
// or renewed.
func (s *Server) migrateMargin() time.Duration {
	return min(migrateCommitMargin, s.opts.MigrateTicketLife/4)
}

// MigrateBegin implements proto.Migrator.
func (s *Server) MigrateBegin(ctx context.Context, ino proto.Ino, policy layout.Layout) (proto.MigrateTicket, error) {
	cl, err := s.caller(ctx)
	if err != nil {
		return proto.MigrateTicket{}, err
	}
	n, err := s.readInode(ino)
	if err != nil {
		return proto.MigrateTicket{}, err
	}
	switch {
	case n.IsDir():
		return proto.MigrateTicket{}, errnof(syscall.EISDIR, "migrate inode %d: a directory", ino)
	case !n.IsRegular():
		return proto.MigrateTicket{}, errnof(syscall.EINVAL, "migrate inode %d: not a regular file", ino)
	}
	if err := checkAccess(cl, &n.Attr, proto.AccessReadWrite); err != nil {
		return proto.MigrateTicket{}, err
	}
	if s.inGrace() || s.anyWriteOpen(ino) {
		return proto.MigrateTicket{}, errnof(syscall.EBUSY, "migrate inode %d: open for writing (or the server is in its grace period after a restart)", ino)
	}
	pol := policy.Clone()
	now := s.now()
	c := &Command{Op: OpMigrateBegin, Now: now, Ino: ino, Gen: n.Gen, NewGen: newGen(),
		Until: now + int64(s.opts.MigrateTicketLife), Layout: &pol, Cred: cl.cred}
	s.placement(c)
	// Not deduplicated (a retry begins a second restripe; the first one's
	// objects go at its ticket's end): the reply carries the new layout.
	r, err := s.propose(ctx, c)
	if err != nil {
		return proto.MigrateTicket{}, err
	}
	s.reg.notePlaced(r.newLayout.Targets)
	t := proto.MigrateTicket{Ino: ino, Gen: c.Gen, NewGen: c.NewGen, Layout: r.newLayout,
		Mtime: r.attr.Mtime, Ctime: r.attr.Ctime, Size: r.attr.Size, Until: c.Until}
	if t.Cap, err = s.issueGen(ctx, ino, c.NewGen, proto.AccessReadWrite, time.Unix(0, c.Until)); err != nil {
		return proto.MigrateTicket{}, err
	}
	s.log.Info("meta: migrate begun", "ino", ino, "kind", kindName(r.newLayout), "targets", r.newLayout.Targets)
	return t, nil
}

// issueGen is issue for objects of generation gen (a restripe's new
// objects), valid until expiry.
func (s *Server) issueGen(ctx context.Context, ino proto.Ino, gen uint64, want proto.Access, expiry time.Time) ([]byte, error) {
	if s.capKey == nil {
		return nil, nil
	}
	var holder string
	if p, ok := transport.PeerFrom(ctx); ok && p.Role == transport.RoleClient {
		holder = p.Name
	}
	b, err := s.capKey.Sign(capability.Capability{Ino: ino, Gen: gen, Rights: want.Grants(), Issued: s.opts.Now(),
		Expiry: expiry, Holder: holder})
	if err != nil {
		return nil, errnof(syscall.EIO, "capability for inode %d: %v", ino, err)
	}
	return b, nil
}

// MigrateCommit implements proto.Migrator. While it is proposed, opens
// for writing of the file wait (Server.open, on Server.migrating): a writer
// either held the file open before, and the commit is refused, or opens
// it after, and gets the new layout.
func (s *Server) MigrateCommit(ctx context.Context, t proto.MigrateTicket) (proto.Attr, error) {
	cl, err := s.caller(ctx)
	if err != nil {
		return proto.Attr{}, err
	}
	if s.inGrace() {
		// Clients are still taking back their handles: one may hold the
		// file open for writing without this server knowing yet.
		return proto.Attr{}, errnof(syscall.EBUSY, "migrate inode %d: the metadata server restarted and is in its grace period", t.Ino)
	}
	s.mu.Lock()
	if s.migrating[t.Ino] != nil {
		s.mu.Unlock()
		return proto.Attr{}, errnof(syscall.EBUSY, "migrate inode %d: another commit is under way", t.Ino)
	}
	if s.anyWriteOpenLocked(t.Ino) {
		s.mu.Unlock()
		return proto.Attr{}, errnof(syscall.EBUSY, "migrate inode %d: opened for writing during the copy", t.Ino)
	}
	if n, err := s.readInode(t.Ino); err == nil && n.Gen != t.NewGen {
		// (Committed already: a retry whose reply was lost succeeds again.)
		if err := s.ticketLive(t); err != nil {
			s.mu.Unlock()
			return proto.Attr{}, err
		}
	}
	done := make(chan struct{})
	s.migrating[t.Ino] = done
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.migrating, t.Ino)
		s.mu.Unlock()
		close(done)
	}()
	l := t.Layout.Clone()
	now := s.now()
	c := &Command{Op: OpMigrateCommit, Now: now, Ino: t.Ino, Gen: t.Gen, NewGen: t.NewGen, Layout: &l,
		Until: now + int64(s.opts.MovedObjectGrace), Size: uint64(s.migrateMargin()), Cred: cl.cred}
	c.SetAttr.Mtime, c.SetAttr.Ctime, c.SetAttr.Size = t.Mtime, t.Ctime, t.Size
	if t.Blocks != proto.NoBlocks {
		blocks := t.Blocks
		c.Blocks = &blocks
	}
	r, err := s.propose(ctx, c)
	if err != nil {
		return proto.Attr{}, err
	}
	if r.gcQueued > 0 {
		s.log.Info("meta: migrate committed", "ino", t.Ino, "kind", kindName(l), "targets", l.Targets)
	}
	return r.attr, nil
}

// MigrateRenew implements proto.Migrator: the ticket's new objects are
// kept (and its capability valid) for another MigrateTicketLife from now.
// A ticket too close to its end (the margin of a commit), committed,
// aborted or of a file changed meanwhile is not renewed.
func (s *Server) MigrateRenew(ctx context.Context, t proto.MigrateTicket) (proto.MigrateTicket, error) {
	cl, err := s.caller(ctx)
	if err != nil {
		return proto.MigrateTicket{}, err
	}
	if err := s.ticketLive(t); err != nil {
		return proto.MigrateTicket{}, err
	}
	l := t.Layout.Clone()
	now := s.now()
	c := &Command{Op: OpMigrateRenew, Now: now, Ino: t.Ino, Gen: t.Gen, NewGen: t.NewGen, Layout: &l,
		Until: now + int64(s.opts.MigrateTicketLife), Size: uint64(s.migrateMargin()), Cred: cl.cred}
	if _, err := s.propose(ctx, c); err != nil {
		return proto.MigrateTicket{}, err
	}
	t.Until = c.Until
	if t.Cap, err = s.issueGen(ctx, t.Ino, t.NewGen, proto.AccessReadWrite, time.Unix(0, c.Until)); err != nil {
		return proto.MigrateTicket{}, err
	}
	return t, nil
}

// ticketLive refuses a ticket that ended (or is within the margin of its
// end) by this server's clock, with a clear error: its new objects may be
// removed already. Apply checks the queue itself as well.
func (s *Server) ticketLive(t proto.MigrateTicket) error {
	if s.now() > t.Until-int64(s.migrateMargin()) {
		return errnof(syscall.ETIMEDOUT, "migrate inode %d: the ticket ended (the copy took too long; its new objects are removed)", t.Ino)
	}
	return nil
}

// MigrateAbort implements proto.Migrator.
func (s *Server) MigrateAbort(ctx context.Context, t proto.MigrateTicket) error {
	cl, err := s.caller(ctx)
	if err != nil {
		return err
	}
	l := t.Layout.Clone()
	_, err = s.propose(ctx, &Command{Op: OpMigrateAbort, Now: s.now(), Ino: t.Ino, Gen: t.Gen, NewGen: t.NewGen, Layout: &l, Cred: cl.cred})
	return err
}

// migrateFile returns the regular file a restripe command acts on, after
// the caller's write permission.
func (t *txn) migrateFile(c *Command) (*inode, error) {
	if c.Layout == nil || c.NewGen == 0 {
		return nil, errnof(syscall.EINVAL, "%v without a layout or a generation", c.Op)
	}
	n, err := t.get(c.Ino)
	if err != nil {
		return nil, err
	}
	if !n.IsRegular() {
		return nil, errnof(syscall.EINVAL, "migrate inode %d: not a regular file", c.Ino)
	}
	if err := may(c.Cred, &n.Attr, accessWrite, "migrate"); err != nil {
		return nil, err
	}
	return n, nil
}

// migrateBegin applies OpMigrateBegin: it places the new layout (as a
// create places a file, from c.Candidates) and queues its objects, named
// by generation NewGen, for removal at Until: unless a commit takes them
// off the queue, they go then. The file itself does not change.
func (t *txn) migrateBegin(c *Command) error {
	n, err := t.migrateFile(c)
	if err != nil {
		return err
	}
	if n.Gen != c.Gen {
		return errnof(syscall.ESTALE, "inode %d is generation %#x, not %#x", c.Ino, n.Gen, c.Gen)
	}
	l, err := t.placeFile(*c.Layout, c)
	if err != nil {
		return err
	}
	for slot, tg := range l.Targets {
		t.b.Set(store.GCKey(uint32(tg), uint64(c.Ino), uint32(slot), c.NewGen), u64(uint64(c.Until)))
	}
	t.res.attr = n.Attr
	t.res.newLayout = l
	return nil
}

// migrateCommit applies OpMigrateCommit: if the file is still generation
// Gen with the data version the restripe began from (mtime, ctime and
// size in c.SetAttr), and every object of the new layout was queued by its
// begin (and is not due yet), the file takes the new layout and
// generation; the new objects leave the GC queue and the old ones join it,
// due at Until (readers that opened the file before keep reading them
// until then), and Attr.Blocks what the new objects hold (when the client
// counted it). Written meanwhile: EBUSY, nothing changes. Times, size and
// quota usage (the size) do not change. A commit applied before (its
// reply lost) succeeds again.
func (t *txn) migrateCommit(c *Command) error {
	n, err := t.migrateFile(c)
	if err != nil {
		return err
	}
	l := c.Layout.Clone()
	if n.Gen == c.NewGen && layoutEqual(n.Layout, l) {
		t.res.attr = n.Attr
		return nil
	}
	if n.Gen != c.Gen {
		return errnof(syscall.ESTALE, "inode %d is generation %#x, not %#x", c.Ino, n.Gen, c.Gen)
	}
	if n.Mtime != c.SetAttr.Mtime || n.Ctime != c.SetAttr.Ctime || n.Size != c.SetAttr.Size {
		return errnof(syscall.EBUSY, "inode %d was changed during its migration", c.Ino)
	}
	if err := l.ValidateFile(); err != nil || !l.ObjectsSized || len(l.Stale) > 0 {
		return errnof(syscall.EINVAL, "migrate inode %d: not a placed layout (%v)", c.Ino, err)
	}
	for slot, tg := range l.Targets {
		k := store.GCKey(uint32(tg), uint64(c.Ino), uint32(slot), c.NewGen)
		v, err := t.sm.st.Get(k)
		if err != nil || len(v) != 8 {
			return errnof(syscall.EINVAL, "migrate inode %d: slot %d on target %d was not placed by a migrate begin", c.Ino, slot, tg)
		}
		if due := int64(binary.BigEndian.Uint64(v)); c.Now > due-c.migrateMargin() {
			return errnof(syscall.ETIMEDOUT, "migrate inode %d: the copy took too long (its new objects are due for removal)", c.Ino)
		}
		t.b.Delete(k)
	}
	for slot, tg := range n.Layout.Targets {
		var notBefore []byte
		if c.Until > 0 {
			notBefore = u64(uint64(c.Until))
		}
		t.b.Set(store.GCKey(uint32(tg), uint64(c.Ino), uint32(slot), n.Gen), notBefore)
		t.res.gcQueued++
	}
	t.b.DeletePrefix(store.LostGenPrefix(uint64(c.Ino), n.Gen)) // the old objects go
	// The old generation joins the file's lineage: handles opened at it
	// follow the file to the new objects (Server.Follow).
	n.Migrated = append(slices.Clone(n.Migrated), n.Gen)
	if k := len(n.Migrated) - maxMigrated; k > 0 {
		n.Migrated = n.Migrated[k:]
	}
	n.Gen = c.NewGen
	n.Layout = l
	if c.Blocks != nil {
		n.Blocks = *c.Blocks // what the new objects hold, as the client counted
	}
	t.put(n)
	t.res.attr = n.Attr
	return nil
}

// Follow implements proto.MigrateFollower: the file's attributes and a
// capability for want on its current objects, after the same permission
// check as Capability, if ino is still the file that had generation gen:
// its current generation, or one a restripe replaced (inode.Migrated).
// Anything else is another file that reuses the number (a metadata store
// put back to an earlier state): ESTALE, as generations promise.
func (s *Server) Follow(ctx context.Context, ino proto.Ino, gen uint64, want proto.Access) (proto.Attr, []byte, error) {
	return s.capabilityOf(ctx, ino, want, func(n *inode) error {
		if n.Gen != gen && !slices.Contains(n.Migrated, gen) {
			return errnof(syscall.ESTALE, "inode %d is generation %#x, not %#x or a restripe of it", ino, n.Gen, gen)
		}
		return nil
	})
}

// migrateMargin is the margin a commit or renewal carries (Size), or
// migrateCommitMargin for a commit logged before it was carried.
func (c *Command) migrateMargin() int64 {
	if c.Size == 0 {
		return int64(migrateCommitMargin)
	}
	return int64(c.Size)
}

// migrateRenew applies OpMigrateRenew: while the file is still
// generation Gen and every new object of the restripe is queued and not
// within the margin of its removal, they are all due at Until instead.
// Otherwise nothing changes: ETIMEDOUT (the ticket ended: its objects are
// or will be removed), EBUSY (committed already), ESTALE (another file).
func (t *txn) migrateRenew(c *Command) error {
	n, err := t.migrateFile(c)
	if err != nil {
		return err
	}
	switch {
	case n.Gen == c.NewGen:
		return errnof(syscall.EBUSY, "migrate inode %d: already committed", c.Ino)
	case n.Gen != c.Gen:
		return errnof(syscall.ESTALE, "inode %d is generation %#x, not %#x", c.Ino, n.Gen, c.Gen)
	}
	keys := make([][]byte, 0, len(c.Layout.Targets))
	for slot, tg := range c.Layout.Targets {
		k := store.GCKey(uint32(tg), uint64(c.Ino), uint32(slot), c.NewGen)
		v, err := t.sm.st.Get(k)
		if err != nil || len(v) != 8 {
			return errnof(syscall.ETIMEDOUT, "migrate inode %d: the ticket ended (slot %d on target %d is no longer kept for it)", c.Ino, slot, tg)
		}
		if due := int64(binary.BigEndian.Uint64(v)); c.Now > due-c.migrateMargin() {
			return errnof(syscall.ETIMEDOUT, "migrate inode %d: the ticket ended (its new objects are due for removal)", c.Ino)
		}
		keys = append(keys, k)
	}
	for _, k := range keys {
		t.b.Set(k, u64(uint64(c.Until)))
	}
	t.res.attr = n.Attr
	return nil
}

// migrateAbort applies OpMigrateAbort: the new objects of a restripe that
// was not committed are due for removal now.
func (t *txn) migrateAbort(c *Command) error {
	n, err := t.migrateFile(c)
	if err != nil {
		return err
	}
	if n.Gen == c.NewGen {
		return errnof(syscall.EBUSY, "migrate inode %d: already committed", c.Ino)
	}
	// Every slot, queued or not: a ticket that ended had its objects
	// removed and dropped from the queue, and a write of the copy after
	// that made one again. Objects of a generation other than the file's
	// are never the file's data.
	for slot, tg := range c.Layout.Targets {
		t.b.Set(store.GCKey(uint32(tg), uint64(c.Ino), uint32(slot), c.NewGen), nil)
		t.res.gcQueued++
	}
	t.res.attr = n.Attr
	return nil
}

// layoutEqual reports whether two file layouts name the same objects.
func layoutEqual(a, b layout.Layout) bool {
	return a.Kind == b.Kind && a.Mirror == b.Mirror && a.ECData == b.ECData && a.ECParity == b.ECParity &&
		a.StripeSize == b.StripeSize && a.StripeCount == b.StripeCount && slices.Equal(a.Targets, b.Targets)
}
