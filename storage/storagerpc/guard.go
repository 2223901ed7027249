package storagerpc

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"sync"
	"syscall"
	"time"

	"github.com/weft-fs/weft/capability"
	"github.com/weft-fs/weft/internal/checks"
	"github.com/weft-fs/weft/internal/ratelog"
	"github.com/weft-fs/weft/jobstats"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/transport"
)

// Options configure a Handler.
type Options struct {
	Logger *slog.Logger
	// CapabilityKey verifies the capabilities clients attach (the key the
	// metadata server signs them with). Nil: every request that needs a
	// capability is refused.
	CapabilityKey *capability.Key
	// AllowUnauthenticated trusts peers that did not authenticate
	// (transport.RoleNone) as it trusts servers: no capability needed.
	// Tests that serve storage over a transport without security set it;
	// the weft binary never does.
	AllowUnauthenticated bool
	// Now is the clock capabilities are checked against; default time.Now.
	Now func() time.Time

	// ReadBytesPerConn bounds the bytes of read buffers held for the
	// requests of one connection, from before the buffer is taken until its
	// response has been written (or dropped with the connection). A read
	// over the budget waits until earlier responses are written or its
	// connection ends. Default DefaultReadBytesPerConn; raised to MaxIO if
	// smaller.
	ReadBytesPerConn int64
	// ReadBytesPerServer bounds the same over all connections. Default
	// DefaultReadBytesPerServer; raised to ReadBytesPerConn if smaller.
	ReadBytesPerServer int64

	// Jobs, if set, counts the requests that name a job (OpJob); nil:
	// they are served but not counted, and OpJobStats answers ENOSYS.
	Jobs *jobstats.Table

	// Local is what OpLocalInfo answers: the server's local socket for
	// short-circuit reads (local.go) and its id; a zero Local says the
	// server has none.
	Local LocalInfo
}

// guard decides whether a request may reach the service, by the peer's role
// and, for clients, the capability the request carries.
type guard struct {
	key         *capability.Key
	allowUnauth bool
	now         func() time.Time
	log         *slog.Logger
	refusals    ratelog.Limiter

	mu       sync.RWMutex
	verified map[[macSize]byte]verifiedCap // by the capability's MAC, see verify
}

// macSize is the length of a capability's MAC (HMAC-SHA256), its last
// bytes.
const macSize = sha256.Size

// verifiedCap is a capability that verified: its exact bytes (a hit must
// match them all, not just the MAC) and its content.
type verifiedCap struct {
	b  []byte
	cp capability.Capability
}

func newGuard(o Options) *guard {
	if o.Now == nil {
		o.Now = time.Now
	}
	return &guard{key: o.CapabilityKey, allowUnauth: o.AllowUnauthenticated, now: o.Now, log: o.Logger,
		verified: map[[macSize]byte]verifiedCap{}}
}

// trusted reports whether the request's peer needs no capability: an
// in-process call (no peer in ctx), a server (meta or storage
// credentials), or an unauthenticated peer when that is allowed. A
// refusal (an unauthenticated peer not allowed) is returned as err.
func (g *guard) trusted(ctx context.Context, op uint16) (transport.Peer, bool, error) {
	p, ok := transport.PeerFrom(ctx)
	switch {
	case !ok, p.Role.IsServer():
		return p, true, nil
	case p.Role == transport.RoleNone:
		if g.allowUnauth {
			return p, true, nil
		}
		return p, false, g.refuse(p, op, "peer did not authenticate")
	}
	return p, false, nil
}

// object authorizes access want to obj with the capability c.
func (g *guard) object(ctx context.Context, op uint16, c []byte, obj proto.ObjectID, want proto.Access) error {
	p, ok, err := g.trusted(ctx, op)
	if ok || err != nil || checks.Off {
		return err
	}
	if g.key == nil {
		return g.refuse(p, op, "no capability key configured")
	}
	cp, err := g.verify(c)
	if err == nil {
		err = cp.Allows(obj.Ino, obj.Gen, want, p.Name)
	}
	if err != nil {
		return g.refuse(p, op, err.Error())
	}
	return nil
}

// verify verifies c, or finds it verified before: a client sends the same
// capability with every request of a file for minutes, and a map lookup
// costs a fraction of an HMAC. The cache is keyed by the MAC (the last
// macSize bytes) and a hit must match the whole capability, MAC included,
// so only the very bytes that verified hit; the expiry is checked on every
// use. The lookup allocates nothing (a sync.Map keyed by string(c) did, on
// every request).
func (g *guard) verify(c []byte) (capability.Capability, error) {
	now := g.now()
	var mac [macSize]byte
	if len(c) > macSize {
		copy(mac[:], c[len(c)-macSize:])
		g.mu.RLock()
		v, ok := g.verified[mac]
		g.mu.RUnlock()
		if ok && bytes.Equal(v.b, c) {
			if now.After(v.cp.Expiry.Add(capability.Skew)) {
				g.mu.Lock()
				if cur, ok := g.verified[mac]; ok && bytes.Equal(cur.b, c) {
					delete(g.verified, mac)
				}
				g.mu.Unlock()
				return g.key.Verify(c, now) // for its error
			}
			return v.cp, nil
		}
	}
	cp, err := g.key.Verify(c, now)
	if err != nil {
		return cp, err
	}
	g.mu.Lock()
	if len(g.verified) >= maxVerified {
		// Full (of mostly expired entries, or a client minting many
		// opens): start over rather than track ages.
		clear(g.verified)
	}
	g.verified[mac] = verifiedCap{b: bytes.Clone(c), cp: cp}
	g.mu.Unlock()
	return cp, nil
}

// maxVerified bounds the cache of verified capabilities (~200 bytes each).
const maxVerified = 16384

// serverOnly refuses clients: removing objects is for the metadata
// server's GC (and later rebuild), on server credentials.
func (g *guard) serverOnly(ctx context.Context, op uint16) error {
	p, ok, err := g.trusted(ctx, op)
	if ok || err != nil {
		return err
	}
	return g.refuse(p, op, "only servers may remove objects")
}

// refuse logs the refusal at warn (rate-limited, with a count of those not
// logged, so a flood of bad requests cannot fill the log) and returns
// EACCES.
func (g *guard) refuse(p transport.Peer, op uint16, why string) error {
	g.refusals.Warn(g.log, "storagerpc: request refused", "peer", p.Addr, "role", string(p.Role), "name", p.Name,
		"op", OpName(op), "why", why)
	return fmt.Errorf("storagerpc: %s refused: %s: %w", OpName(op), why, syscall.EACCES)
}
