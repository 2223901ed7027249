package client

import (
	"context"
	"errors"
	"syscall"
	"time"

	"github.com/weft-fs/weft/proto"
)

// Opens from the lease cache (docs/caching.md, "Opens from the cache").
//
// A read-only open of a file whose whole content this client holds under a
// trusted metadata lease needs nothing from the leader: the lease says the
// attributes are the leader's (every change made elsewhere breaks it before
// it is acknowledged, so close-to-open holds), and nothing will be read
// from the servers. That is a regular file every class may read (whoever
// the caller is, root squashed or not, the server would let it read) that
// is empty (mdtest's and IO500's files, marker and lock files) or whose
// copy a lookup brought (proto.LookupCopier: a small file read cold, such
// as mdtest-hard's, in one round trip instead of a lookup and an open).
// Such a handle is local: the leader does not count it, and its release
// sends nothing.
//
// What an open count is for still holds: a file is not reclaimed while a
// handle reads it. The leader leaves a file an orphan when its last name is
// removed while another session holds a lease on it, or has not yet
// acknowledged an invalidation of it (meta.Server.UnlinkAt), and reclaims
// it only after that session acknowledged the unlink's break; this client
// pins its local handles of an inode (proto.LeasePinner: the leader counts
// them as opens, and their releases are sent from then on) before it
// acknowledges any invalidation of that inode, before it removes or
// replaces a name itself (its own changes are not broken to it: removing
// counts them, and no open is made from the cache meanwhile), before a
// lock or a restripe's follow goes through such a handle, and after the
// session is re-registered with a restarted server or a new leader.
//
// An open from the cache takes only attributes that a poll sent after they
// were cached has confirmed (leaseCache.getOpenable): an unlink that
// reclaims a file by itself fences it, and a lease granted on it meanwhile
// comes with an invalidation, which that poll's answer carries. A lookup
// that brought a copy says whether its lease came with no invalidation
// queued (openable): then its attributes need no poll; so are the copies
// a read-ahead brought (ahead.go: the leader answers only files the
// session holds with nothing to invalidate).
//
// A pin the leader refuses (the file is gone: it was removed while this
// client could not be asked, cut off for longer than the lease term; or
// its mode no longer lets every class read) leaves the handle local: the
// leader does not count it, so a removal elsewhere reclaims the file
// under it, and its reads then fail with ENOENT (the kernel asks for the
// attributes first). A pin that gets no answer within pinTimeout marks its handles
// uncertain: the leader may have counted them, so they are neither pinned
// again nor released (at worst the file is kept until the session ends).
// docs/caching.md lists what such a handle cannot do.

// localOpens counts one inode's handles this session opened from its lease
// cache and has not pinned; guarded by session.mu. pinned: they were
// counted by the leader, and are released as any handle.
type localOpens struct {
	n      uint32
	pinned bool
	// uncertain: a pin of them got no answer; the leader may have
	// counted them, so they are neither pinned again nor released.
	uncertain bool
}

// pinTimeout bounds a pin (its retries included): it holds the session's
// lock, which every open and release of this client takes, and a mount
// that cannot reach the leader for longer loses its leases anyway.
const pinTimeout = time.Second

// OpenCached opens ino for want without asking the metadata leader when
// this client may (above): want is read only, the cache holds ino's
// attributes under a trusted lease, it is a regular file every class may
// read, empty or with its copy cached, nothing of this client has it open
// already, and this client is not removing or replacing a name. ok false:
// use Open.
func (c *Client) OpenCached(ctx context.Context, ino proto.Ino, want proto.Access) (f *File, a proto.Attr, ok bool) {
	s := c.sess
	if want != proto.AccessRead || c.leases == nil || s == nil || c.pinner == nil || c.noPins.Load() || c.removing.Load() > 0 {
		return nil, proto.Attr{}, false
	}
	s0 := c.leases.begin()
	// The change mark before the cache is read: a write of this client
	// after it (through a handle opened meanwhile) keeps the copy out of
	// the state (installCopyLocked), where the mark taken later would
	// not.
	mark := c.changeMark(ino)
	a, data, ok := c.leases.getOpenable(ino)
	if !ok || !a.ReadableByAll() || (a.Size != 0 && uint64(len(data)) != a.Size) {
		return nil, proto.Attr{}, false
	}
	st := c.acquireIfNone(&a, data, mark)
	if st == nil {
		return nil, proto.Attr{}, false
	}
	gen, g := s.openedLocal(ino)
	if g == nil {
		c.unref(st)
		return nil, proto.Attr{}, false
	}
	f = &File{c: c, ino: ino, gen: gen, want: want, local: g}
	f.view.Store(&fileView{st: st})
	// An invalidation of ino that came in since the attributes were read
	// may have been pinned and acknowledged before this handle was
	// counted, and a removal by this client may have started (its pin
	// before this count): then the handle is given up as a release would
	// (it may have been pinned meanwhile), and the open asks the leader.
	if c.leases.moved(s0, ino) || c.removing.Load() > 0 {
		if err := f.Release(ctx); err != nil {
			c.log.Warn("giving up an open from the metadata cache", "ino", ino, "err", err)
		}
		return nil, proto.Attr{}, false
	}
	c.cachedOpens.Add(1)
	c.demand.opened(ino)
	if data != nil && c.leases.tookCopy(ino) {
		if i, after, ok := c.ahead.opened(ino); ok {
			c.readAhead(ctx, i, after)
		}
	}
	return f, a, true
}

// CachedOpens returns how many opens this client made from its lease cache
// (OpenCached) and how many of those handles it pinned since.
func (c *Client) CachedOpens() (opened, pinned uint64) {
	return c.cachedOpens.Load(), c.pinnedOpens.Load()
}

// acquireIfNone is acquire of a new state from a (and the file's copy,
// data, read from the cache after mark was taken), or nil if this client
// already has ino open: an open from the cache must not merge its cached
// attributes into a state other handles (perhaps writing) use.
func (c *Client) acquireIfNone(a *proto.Attr, data []byte, mark uint64) *inodeState {
	c.mu.Lock()
	if c.open[a.Ino] != nil {
		c.mu.Unlock()
		return nil
	}
	c.mu.Unlock()
	// acquire looks again under c.mu; a state made in between is merged
	// into, which Open would have done too. The copy is installed only in
	// a state made here, and only if this client changed nothing of the
	// file since mark (installCopyLocked's rules).
	return c.acquire(a, data, mark)
}

// openedLocal counts a local handle of ino and returns the session
// generation and its inode's group (nil: the session is not registered).
func (s *session) openedLocal(ino proto.Ino) (uint64, *localOpens) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.registered {
		return 0, nil
	}
	g := s.local[ino]
	if g == nil {
		g = &localOpens{}
		s.local[ino] = g
	}
	g.n++
	return s.gen.Load(), g
}

// pin has the leader count the local handles of inos (all of them if
// inos is nil) as opens of this session; from then on they are handles
// like any other. It holds the session's lock through the call, so that
// no local handle of an inode is opened or released between the count
// sent and its group marked pinned. A failure is logged (why: before
// what): the handles stay local or uncertain (pinLocked).
func (s *session) pin(ctx context.Context, inos []proto.Ino, why string) {
	lp := s.c.pinner
	if lp == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.pinLocked(ctx, lp, inos); err != nil {
		s.c.log.Warn("registering opens made from the metadata cache failed", "before", why, "err", err)
	}
}

// pinLocked is pin with s.mu held.
func (s *session) pinLocked(ctx context.Context, lp proto.LeasePinner, inos []proto.Ino) error {
	var (
		pins   []proto.OpenHandle
		groups []*localOpens
	)
	add := func(ino proto.Ino) {
		if g := s.local[ino]; g != nil && g.n > 0 {
			pins = append(pins, proto.OpenHandle{Ino: ino, Count: g.n})
			groups = append(groups, g)
		}
	}
	if inos == nil {
		for ino := range s.local {
			add(ino)
		}
	} else {
		for _, ino := range inos {
			add(ino)
		}
	}
	if len(pins) == 0 {
		return nil
	}
	// Not cancelled with the caller: a signal to the process whose
	// unlink or lock this pin goes before must not leave a handle
	// unpinned while the change itself goes ahead.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(pinTimeout, max(s.c.cfg.Timeout, time.Millisecond)))
	done, err := lp.PinOpens(rctx, pins)
	cancel()
	if errors.Is(err, syscall.ENOSYS) {
		// A leader that takes no pins (an older member leading during
		// an upgrade): open nothing from the cache any more. These
		// handles stay local, as refused ones do.
		s.c.noPins.Store(true)
	}
	if err != nil && !refusedBeforeCounting(err) {
		// No answer: the leader may have counted them. Pinning them
		// again could count them twice, and releasing them could drop
		// another handle's count, so neither is done: at worst the
		// leader keeps the file until this session ends.
		for i, p := range pins {
			groups[i].uncertain = true
			delete(s.local, p.Ino)
		}
	}
	if err != nil {
		return err
	}
	for i, p := range pins {
		if !done[i] {
			continue
		}
		groups[i].pinned = true
		s.c.pinnedOpens.Add(uint64(p.Count))
		delete(s.local, p.Ino)
		s.countLocked(p.Ino, p.Count, false)
	}
	return nil
}

// refusedBeforeCounting reports whether a PinOpens error is the leader's
// refusal of the whole request, made before it counted anything (not the
// leader, an unknown session, a malformed request, no such operation).
func refusedBeforeCounting(err error) bool {
	for _, e := range []syscall.Errno{syscall.ENOSYS, syscall.EINVAL, syscall.ESTALE, syscall.EACCES, syscall.EPERM, syscall.EAGAIN} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// pinLocal pins f's inode's local handles if f is one of them (why:
// before what).
func (f *File) pinLocal(ctx context.Context, why string) {
	if f.local != nil {
		f.c.sess.pin(ctx, []proto.Ino{f.ino}, why)
	}
}

// removingName marks a removal or replacement of a name by this client
// under way (no open is made from the cache until it returns) and pins
// every local handle first: the change is not broken to this client, so
// nothing else would. It returns the end of the removal.
func (c *Client) removingName(ctx context.Context) func() {
	c.removing.Add(1)
	if c.sess != nil {
		c.sess.pin(ctx, nil, "a removal of a name")
	}
	return func() { c.removing.Add(-1) }
}

// pinInvalidated pins the local handles of the inodes of invals: before
// they are acknowledged (leaseCache.run). all: the whole cache was dropped
// (a new epoch).
func (c *Client) pinInvalidated(invals []proto.LeaseInval, all bool) {
	if c.sess == nil {
		return
	}
	var inos []proto.Ino
	if !all {
		inos = make([]proto.Ino, 0, len(invals))
		for _, iv := range invals {
			inos = append(inos, iv.Ino)
		}
	}
	c.sess.pin(context.Background(), inos, "acknowledging an invalidation")
}
