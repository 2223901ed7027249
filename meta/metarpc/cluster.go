package metarpc

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/weft-fs/weft/transport"
	"github.com/weft-fs/weft/wire"
)

// Membership is what a metadata server says of its group (OpGroup). A
// single server answers with ID 0 and no members.
type Membership struct {
	FSID       string
	ID         uint64 // the member that answered
	Leader     uint64 // 0: none known (an election is under way)
	LeaderAddr string
	Term       uint64
	Members    []GroupMember
}

// GroupMember is one member of a replicated metadata group, as any
// member tells it (OpGroup).
type GroupMember struct {
	ID   uint64
	Addr string
}

// GroupService answers OpGroup; meta.Server implements it, and so does
// Client.
type GroupService interface {
	Group(ctx context.Context) (Membership, error)
}

// Members asks the server the client calls now what it knows of its group.
func (c *Client) Group(ctx context.Context) (Membership, error) {
	var r groupResp
	err := c.do(ctx, OpGroup, &emptyMsg{}, &r)
	return r.M, err
}

// Leader-following backoff: while no leader is known (an election), a
// request waits this long before it is tried again, doubling up to
// followMax.
const (
	followFirst = 20 * time.Millisecond
	followMax   = 250 * time.Millisecond
)

// attemptTimeout bounds one attempt at a member when the client knows
// several: a member cut off by a partition drops packets and nothing
// else tells (no refusal, no reset), so without it the first request to
// a cut-off leader would wait out the caller's whole deadline. An attempt
// that gets no answer in time counts as unreachable: the transport's pool
// then suspects the address (later calls to it fail at once until it
// answers a probe) and the request moves on to the next member if it may
// be sent again. A live but slow leader costs a retry, which the dedupe
// makes harmless.
const attemptTimeout = 5 * time.Second

// cluster sends requests to the leader of a replicated metadata group,
// given the addresses of some of its members (a single server: one
// address, and nothing changes). It starts with the first address; a
// member that is not the leader answers EAGAIN, and the cluster then asks
// that member where the leader is (OpGroup) and goes there, or, with no
// leader known yet, tries again after a backoff. A request refused with
// EAGAIN was not applied anywhere, so it is always sent again. When the
// current member cannot be reached (connection refused or broken, no
// answer in time) the next known member is tried; such a request is sent
// again only if the caller said it is safe (reads, session calls, and
// mutations deduplicated by their sequence number: see mutate).
type cluster struct {
	pool *transport.Pool

	mu    sync.Mutex
	addrs []string // every member address known: those given, then those learned
	cur   int      // index in addrs of the member requests go to
}

// splitAddrs splits a comma-separated list of addresses.
func splitAddrs(list string) []string {
	var out []string
	for _, a := range strings.Split(list, ",") {
		if a = strings.TrimSpace(a); a != "" && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

func newCluster(pool *transport.Pool, addrs []string) *cluster {
	return &cluster{pool: pool, addrs: addrs}
}

func (c *cluster) current() (string, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.addrs[c.cur], len(c.addrs)
}

// moveOn makes the next known member current, unless another request
// already moved on from from.
func (c *cluster) moveOn(from string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.addrs[c.cur] == from {
		c.cur = (c.cur + 1) % len(c.addrs)
	}
}

// goTo makes addr current (learning it if it is new).
func (c *cluster) goTo(addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := slices.Index(c.addrs, addr)
	if i < 0 {
		c.addrs = append(c.addrs, addr)
		i = len(c.addrs) - 1
	}
	c.cur = i
}

// learn adds members' addresses it did not know.
func (c *cluster) learn(ms []GroupMember) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range ms {
		if m.Addr != "" && !slices.Contains(c.addrs, m.Addr) {
			c.addrs = append(c.addrs, m.Addr)
		}
	}
}

// IsNotLeader reports whether err is a member's answer that it is not the
// leader (or not ready yet, or its proposal was dropped by a change of
// leader): EAGAIN from the server, nothing applied. EAGAIN alone is not
// enough: it is also a file system answer (a conflicting lock, the grace
// period after a restart) that goes back to the caller; the wire carries
// the errno and the server's text, and these are raft's and meta's texts
// for a request that belongs to another member.
func IsNotLeader(err error) bool {
	var re *transport.RemoteError
	if !errors.As(err, &re) || re.Errno != syscall.EAGAIN {
		return false
	}
	for _, m := range notLeaderTexts {
		if strings.Contains(re.Msg, m) {
			return true
		}
	}
	return false
}

// notLeaderTexts are in the errors of meta.NotLeaderError and raftlog's
// ErrNotLeader, ErrNotReady, ErrDropped, an unstarted node's refusal and
// a proposal built before a new leader took over (package meta's
// TestNotLeaderTexts checks them).
var notLeaderTexts = []string{"not the leader", "not ready yet", "dropped by a change of leader", "not started", "before this server became leader"}

// unreachable reports whether err says the member could not be reached or
// did not answer (the transport's EIO or ETIMEDOUT, not a server's
// answer): the request may or may not have arrived.
func unreachable(err error) bool { return retryable(err) }

// call sends a request to the leader and returns its answer; see cluster.
// resend says the request may be sent again after the member it went to
// became unreachable (it is idempotent, or deduplicated).
func (c *cluster) call(ctx context.Context, op uint16, resend bool, parts ...[]byte) ([]byte, error) {
	wait := followFirst
	for {
		addr, n := c.current()
		actx, cancel := ctx, context.CancelFunc(func() {})
		if n > 1 {
			actx, cancel = context.WithTimeout(ctx, attemptTimeout)
		}
		b, err := c.pool.Call(actx, addr, op, parts...)
		cancel()
		if err == nil {
			return b, nil
		}
		switch {
		case IsNotLeader(err):
			if c.follow(ctx, addr) {
				continue // to the leader at once
			}
		case unreachable(err) && n > 1 && ctx.Err() == nil:
			c.moveOn(addr)
			if !resend {
				return nil, err
			}
		default:
			return nil, err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
		wait = min(2*wait, followMax)
	}
}

// follow asks the member at addr where the leader is and makes it current;
// it reports whether that is another member than addr (else the caller
// waits: an election is under way, or the leader is not ready yet). A
// member that does not answer is passed over.
func (c *cluster) follow(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	b, err := c.pool.Call(ctx, addr, OpGroup, groupHeader)
	var r groupResp
	if err == nil {
		err = unmarshal(b, &r)
	}
	if err != nil {
		c.moveOn(addr)
		return false
	}
	c.learn(r.M.Members)
	if r.M.LeaderAddr == "" || r.M.LeaderAddr == addr {
		if r.M.Leader == 0 {
			c.moveOn(addr) // it knows no leader: perhaps it is the one cut off
		}
		return false
	}
	c.goTo(r.M.LeaderAddr)
	return true
}

// groupHeader is the request header of OpGroup (no credentials are
// needed to ask; the server authenticates the peer).
var groupHeader = func() []byte {
	e := wire.NewEncoder(64)
	(&header{}).encode(e)
	return e.B
}()
