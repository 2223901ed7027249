package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/weft-fs/weft/capability"
	"github.com/weft-fs/weft/proto"
)

// OpenAccess is the access an open(2) with flags asks for: its access mode,
// with O_TRUNC counting as write.
func OpenAccess(flags uint32) proto.Access {
	var a proto.Access
	switch flags & syscall.O_ACCMODE {
	case syscall.O_RDONLY:
		a = proto.AccessRead
	case syscall.O_WRONLY:
		a = proto.AccessWrite
	default:
		a = proto.AccessReadWrite
	}
	if flags&fmodeExec != 0 && a == proto.AccessRead {
		a = proto.AccessExec // execve: execute permission, not read
	}
	if flags&syscall.O_TRUNC != 0 {
		a |= proto.AccessWrite
	}
	return a
}

// fmodeExec is Linux's __FMODE_EXEC: execve(2) opens the binary with it
// (O_RDONLY|__FMODE_EXEC), and FUSE passes the flag on.
const fmodeExec = 0x20

// heldCap is a capability this client holds for an open inode. It is
// immutable; renewal replaces it.
type heldCap struct {
	b        []byte        // nil: the metadata server issues none
	mode     proto.Access  // what was asked for (renewals ask the same)
	rights   proto.Access  // what it grants (mode.Grants())
	lifetime time.Duration // 0: unknown (never renewed in the background)
	renewAt  time.Time     // by this client's clock; zero: never
	cred     proto.Cred
	hasCred  bool // cred is whom it was issued for (renewals ask as them)
}

// caps are the capabilities of one open inode (part of inodeState). There
// is one for reading and one for writing (the same one when a handle
// opened the file read-write): handles opened with different modes, maybe
// by different users, each contribute the rights they were granted, so
// the inode is accessed with the union (until its last handle here closes:
// the kernel keeps each handle to its own mode). A timer renews them when
// 2/3 of their lifetime has passed, for files that stay open longer.
//
// Invariants: read grants AccessRead and write AccessWrite when set; they
// are stored under mu (readers load them without it: every storage request
// does); the timer is armed for the earliest renewAt of the two unless
// closed. renewMu serializes renewals, so a burst of refusals renews once.
type caps struct {
	read, write atomic.Pointer[heldCap]
	mu          sync.Mutex
	timer       *time.Timer
	closed      bool
	renewMu     sync.Mutex
}

// newHeldCap describes capability b, granted for an open (or renewal)
// asking for mode, received now for the caller of ctx.
func newHeldCap(ctx context.Context, b []byte, mode proto.Access) *heldCap {
	h := &heldCap{b: b, mode: mode, rights: mode.Grants()}
	h.cred, h.hasCred = proto.CredFrom(ctx)
	if c, err := capability.Parse(b); err == nil && c.Lifetime() > 0 {
		// The lifetime is measured on the issuer's clock; counting it
		// from the moment it arrived here makes this client's clock
		// irrelevant (it renews early by the RPC's latency at most).
		h.lifetime = c.Lifetime()
		h.renewAt = time.Now().Add(h.lifetime * 2 / 3)
	}
	return h
}

// get returns the capability held for want (nil if none).
func (cs *caps) get(want proto.Access) *heldCap {
	if want&proto.AccessWrite != 0 {
		return cs.write.Load()
	}
	return cs.read.Load()
}

// setCap stores h for the rights it grants and re-arms the renewal timer.
func (st *inodeState) setCap(h *heldCap) {
	cs := &st.caps
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.closed {
		return
	}
	if h.rights&proto.AccessRead != 0 {
		cs.read.Store(h)
	}
	if h.rights&proto.AccessWrite != 0 {
		cs.write.Store(h)
	}
	st.armCapTimerLocked()
}

func (st *inodeState) armCapTimerLocked() {
	cs := &st.caps
	var next time.Time
	for _, h := range []*heldCap{cs.read.Load(), cs.write.Load()} {
		if h != nil && !h.renewAt.IsZero() && (next.IsZero() || h.renewAt.Before(next)) {
			next = h.renewAt
		}
	}
	if next.IsZero() {
		return
	}
	d := max(time.Until(next), 0)
	if cs.timer == nil {
		cs.timer = time.AfterFunc(d, st.renewDue)
	} else {
		cs.timer.Reset(d)
	}
}

// stopCaps stops renewing (the inode's last handle is gone, or the client
// is closing).
func (st *inodeState) stopCaps() {
	cs := &st.caps
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.closed = true
	if cs.timer != nil {
		cs.timer.Stop()
	}
}

// renewDue renews the capabilities whose time has come (the timer's
// function). A renewal that fails is retried after a tenth of the
// lifetime, until the capability expires (storage then refuses with
// EACCES, and the next request renews once more, see withCap).
func (st *inodeState) renewDue() {
	c, cs := st.c, &st.caps
	cs.mu.Lock()
	if cs.closed {
		cs.mu.Unlock()
		return
	}
	c.wg.Add(1) // Close waits for a renewal under way
	var due []*heldCap
	now := time.Now()
	for _, h := range []*heldCap{cs.read.Load(), cs.write.Load()} {
		if h != nil && !h.renewAt.IsZero() && !h.renewAt.After(now) && (len(due) == 0 || due[0] != h) {
			due = append(due, h)
		}
	}
	cs.mu.Unlock()
	defer c.wg.Done()
	for _, h := range due {
		if _, err := st.renewCap(c.base, h.rights, h); err != nil {
			if !errors.Is(err, errMoved) { // else its handles follow at their next read
				c.log.Warn("capability renewal failed", "ino", st.ino, "mode", h.mode.String(), "err", err)
			}
			retry := *h
			retry.renewAt = time.Now().Add(max(100*time.Millisecond, h.lifetime/10))
			st.replaceCap(h, &retry)
		}
	}
}

// replaceCap puts h where old is held (a renewal's retry time).
func (st *inodeState) replaceCap(old, h *heldCap) {
	cs := &st.caps
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.closed {
		return
	}
	cs.read.CompareAndSwap(old, h)
	cs.write.CompareAndSwap(old, h)
	st.armCapTimerLocked()
}

// renewCap asks the metadata server for a new capability granting want
// (asking as old was asked, by its caller, when there is one), unless old
// was replaced meanwhile; it returns the capability now held for want.
func (st *inodeState) renewCap(ctx context.Context, want proto.Access, old *heldCap) (*heldCap, error) {
	cs := &st.caps
	cs.renewMu.Lock()
	defer cs.renewMu.Unlock()
	if cur := cs.get(want); cur != nil && (old == nil || !bytes.Equal(cur.b, old.b)) {
		return cur, nil // renewed by someone else meanwhile
	}
	mode := want
	if old != nil {
		mode = old.mode
		if old.hasCred {
			ctx = proto.WithCred(ctx, old.cred)
		}
	}
	rctx, cancel := st.c.rpcCtx(ctx)
	defer cancel()
	var b []byte
	fw, follow := st.c.follower()
	if follow {
		// Named by generation: a capability for the objects this state
		// reads, or news that a restripe replaced them (follow.go).
		a, cb, err := fw.Follow(rctx, st.ino, st.gen, mode)
		switch {
		case errors.Is(err, syscall.ENOSYS): // a server from before Follow
			st.c.noFollow.Store(true)
			follow = false
		case err != nil:
			return nil, err
		case a.Gen != st.gen:
			st.moved.Store(a.Gen)
			return nil, fmt.Errorf("%w: ino %d generation %#x is %#x now: %w", errMoved, st.ino, st.gen, a.Gen, syscall.ESTALE)
		default:
			b = cb
		}
	}
	if !follow {
		var err error
		if b, err = st.c.meta.Capability(rctx, st.ino, mode); err != nil {
			return nil, err
		}
	}
	h := newHeldCap(ctx, b, mode)
	st.setCap(h)
	return h, nil
}

// withCap runs a storage operation needing want on this inode's objects
// with the capability held for it in ctx. If storage refuses it (EACCES:
// the capability expired, say after the client was suspended, or the
// handle lacks the right), it renews the capability once and retries.
func (st *inodeState) withCap(ctx context.Context, want proto.Access, op func(context.Context) error) error {
	h := st.caps.get(want)
	err := op(capCtx(ctx, h))
	if !errors.Is(err, syscall.EACCES) {
		return err
	}
	h2, rerr := st.renewCap(ctx, want, h)
	if errors.Is(rerr, errMoved) {
		return rerr // the handle follows the restripe (follow.go)
	}
	if rerr != nil {
		st.c.log.Warn("capability renewal after a refusal failed", "ino", st.ino, "err", rerr)
		return err
	}
	return op(capCtx(ctx, h2))
}

func capCtx(ctx context.Context, h *heldCap) context.Context {
	if h == nil || h.b == nil {
		return ctx
	}
	return proto.WithCapability(ctx, h.b)
}
