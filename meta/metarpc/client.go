package metarpc

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/weft-fs/weft/internal/version"
	"github.com/weft-fs/weft/layout"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/transport"
	"github.com/weft-fs/weft/wire"
)

// Client implements proto.MetaService and proto.TargetRegistry over the
// transport. It is safe for concurrent use. Errors are the server's errno,
// or the transport's (ETIMEDOUT, EIO); a response that does not decode is
// EIO.
type Client struct {
	// call sends a request; resend: it may be sent again after its
	// server became unreachable (see cluster).
	call func(ctx context.Context, op uint16, resend bool, parts ...[]byte) ([]byte, error)
	cred proto.Cred // for calls whose ctx carries no proto.Cred
	sess atomic.Pointer[clientSession]
}

// clientSession is the session requests carry, with the encoded header of
// calls whose ctx names no credentials.
type clientSession struct {
	id        proto.SessionID
	defHeader []byte
	seqs      *seqs // numbers the session's mutations
}

var (
	_ proto.MetaService    = (*Client)(nil)
	_ proto.TargetRegistry = (*Client)(nil)
	_ Extended             = (*Client)(nil)
	_ SessionService       = (*Client)(nil)
	_ proto.LockService    = (*Client)(nil)
	_ GroupService         = (*Client)(nil)
)

// Extended is what a metadata service offers beyond proto.MetaService to
// save round trips; meta.Server implements it, and so does Client (the
// client package uses it when its service has it). A handler whose service
// lacks it answers these ops with ENOSYS.
type Extended interface {
	// CreateOpen is Create that, with want not 0 and a regular file as the
	// result, also opens it for want as Open does (returning its
	// capability); it returns the parent directory's attributes after the
	// change too. A file it creates is opened whatever its mode bits; an
	// existing one is checked as by Open.
	CreateOpen(ctx context.Context, in proto.CreateIn, want proto.Access) (attr, parent proto.Attr, cap []byte, err error)
	// UnlinkAt and RmdirAt are Unlink and Rmdir returning the parent
	// directory's attributes after the change.
	UnlinkAt(ctx context.Context, parent proto.Ino, name string) (proto.Attr, error)
	RmdirAt(ctx context.Context, parent proto.Ino, name string) (proto.Attr, error)
	// ReleaseMany is Release of several handles.
	ReleaseMany(ctx context.Context, inos []proto.Ino) error
}

// SessionService is how a client keeps a session with the metadata
// server: open handles belong to the session named in each request's
// header, and live as long as its lease is renewed (see meta.Server's
// OpenSession, RenewSession and CloseSession). meta.Server implements it,
// and so does Client.
type SessionService interface {
	// OpenSession registers the session (renews it if known) and returns
	// its lease; reclaim names the handles of a session the server forgot
	// in a restart (ESTALE if they cannot be taken back).
	OpenSession(ctx context.Context, reclaim []proto.OpenHandle) (time.Duration, error)
	// RenewSession extends the lease; ESTALE if the session is unknown.
	RenewSession(ctx context.Context) (time.Duration, error)
	// CloseSession ends the session, dropping its handles.
	CloseSession(ctx context.Context) error
}

// NewClient returns a client that calls the metadata service at addrs
// through pool: one server's address, or a comma-separated list of
// members of a replicated group (any of them; the client finds the leader
// and follows it across elections, see cluster). Every request carries
// the caller's credentials from its ctx (proto.WithCred), or, if ctx has
// none, this process's own (see WithCred), and the client's session id
// (see WithSession).
func NewClient(pool *transport.Pool, addrs string, opts ...Option) *Client {
	list := splitAddrs(addrs)
	if len(list) == 0 {
		list = []string{addrs} // the pool's dial reports the bad address
	}
	return newClient(newCluster(pool, list).call, opts)
}

// NewConnClient returns a client over one connection.
func NewConnClient(c transport.Conn, opts ...Option) *Client {
	return newClient(func(ctx context.Context, op uint16, _ bool, parts ...[]byte) ([]byte, error) {
		return c.Call(ctx, op, parts...)
	}, opts)
}

func newClient(call func(ctx context.Context, op uint16, resend bool, parts ...[]byte) ([]byte, error), opts []Option) *Client {
	c := &Client{call: call, cred: processCred()}
	c.SetSession(proto.SessionID{})
	for _, o := range opts {
		o(c)
	}
	return c
}

// Session returns the session id the client's requests carry.
func (c *Client) Session() proto.SessionID { return c.sess.Load().id }

// SetSession makes the client's requests from now on carry session id
// (a client whose session expired starts a new one).
func (c *Client) SetSession(id proto.SessionID) {
	e := wire.NewEncoder(64)
	(&header{Cred: c.cred, Session: id}).encode(e)
	c.sess.Store(&clientSession{id: id, defHeader: e.B, seqs: newSeqs()})
}

// do sends a request that may be sent again if its server became
// unreachable: a read, a session call, a registration (all idempotent).
func (c *Client) do(ctx context.Context, op uint16, req, resp message) error {
	return c.send(ctx, op, true, req, resp)
}

func (c *Client) send(ctx context.Context, op uint16, resend bool, req, resp message) error {
	b, err := c.call(ctx, op, resend, c.header(ctx, c.sess.Load(), 0), marshal(req))
	if err != nil {
		return err
	}
	if err := unmarshal(b, resp); err != nil {
		return errIO(err)
	}
	return nil
}

func (c *Client) attr(ctx context.Context, op uint16, req message) (proto.Attr, error) {
	var r attrResp
	err := c.do(ctx, op, req, &r)
	return r.Attr, err
}

// mutAttr is attr for a mutation (see mutate).
func (c *Client) mutAttr(ctx context.Context, op uint16, req message) (proto.Attr, error) {
	var r attrResp
	err := c.mutate(ctx, op, req, &r)
	return r.Attr, err
}

func (c *Client) Lookup(ctx context.Context, parent proto.Ino, name string) (proto.Attr, error) {
	return c.attr(ctx, OpLookup, &nameReq{parent, name})
}

func (c *Client) GetAttr(ctx context.Context, ino proto.Ino) (proto.Attr, error) {
	return c.attr(ctx, OpGetAttr, &inoReq{ino})
}

func (c *Client) SetAttr(ctx context.Context, ino proto.Ino, in proto.SetAttrIn) (proto.Attr, error) {
	return c.mutAttr(ctx, OpSetAttr, &setAttrReq{ino, in})
}

func (c *Client) Create(ctx context.Context, in proto.CreateIn) (proto.Attr, error) {
	return c.mutAttr(ctx, OpCreate, &createReq{in})
}

func (c *Client) Mkdir(ctx context.Context, parent proto.Ino, name string, mode, uid, gid uint32) (proto.Attr, error) {
	return c.mutAttr(ctx, OpMkdir, &mkdirReq{parent, name, mode, uid, gid})
}

func (c *Client) Symlink(ctx context.Context, parent proto.Ino, name, target string, uid, gid uint32) (proto.Attr, error) {
	return c.mutAttr(ctx, OpSymlink, &symlinkReq{parent, name, target, uid, gid})
}

func (c *Client) Readlink(ctx context.Context, ino proto.Ino) (string, error) {
	var r stringResp
	err := c.do(ctx, OpReadlink, &inoReq{ino}, &r)
	return r.S, err
}

func (c *Client) Link(ctx context.Context, ino, newParent proto.Ino, newName string) (proto.Attr, error) {
	return c.mutAttr(ctx, OpLink, &linkReq{ino, newParent, newName})
}

func (c *Client) Unlink(ctx context.Context, parent proto.Ino, name string) error {
	return c.mutate(ctx, OpUnlink, &nameReq{parent, name}, &emptyMsg{})
}

func (c *Client) Rmdir(ctx context.Context, parent proto.Ino, name string) error {
	return c.mutate(ctx, OpRmdir, &nameReq{parent, name}, &emptyMsg{})
}

func (c *Client) Rename(ctx context.Context, oldParent proto.Ino, oldName string, newParent proto.Ino, newName string, flags uint32) error {
	return c.mutate(ctx, OpRename, &renameReq{oldParent, oldName, newParent, newName, flags}, &emptyMsg{})
}

func (c *Client) ReadDir(ctx context.Context, dir proto.Ino, after string, max int) ([]proto.DirEntry, error) {
	var r dirResp
	err := c.do(ctx, OpReadDir, &readDirReq{dir, after, uint32(max)}, &r)
	return r.Entries, err
}

func (c *Client) GetXattr(ctx context.Context, ino proto.Ino, name string) ([]byte, error) {
	var r bytesResp
	err := c.do(ctx, OpGetXattr, &nameReq{ino, name}, &r)
	return r.B, err
}

func (c *Client) SetXattr(ctx context.Context, ino proto.Ino, name string, value []byte, flags uint32) error {
	return c.mutate(ctx, OpSetXattr, &setXattrReq{ino, name, value, flags}, &emptyMsg{})
}

func (c *Client) ListXattr(ctx context.Context, ino proto.Ino) ([]string, error) {
	var r stringsResp
	err := c.do(ctx, OpListXattr, &inoReq{ino}, &r)
	return r.S, err
}

func (c *Client) RemoveXattr(ctx context.Context, ino proto.Ino, name string) error {
	return c.mutate(ctx, OpRemoveXattr, &nameReq{ino, name}, &emptyMsg{})
}

func (c *Client) Open(ctx context.Context, ino proto.Ino, want proto.Access) (proto.Attr, []byte, error) {
	var r openResp
	err := c.mutate(ctx, OpOpen, &openReq{ino, want}, &r)
	return r.Attr, r.Cap, err
}

func (c *Client) Capability(ctx context.Context, ino proto.Ino, want proto.Access) ([]byte, error) {
	var r capResp
	err := c.do(ctx, OpCapability, &openReq{ino, want}, &r)
	return r.Cap, err
}

func (c *Client) WriteDone(ctx context.Context, ino proto.Ino, end uint64, mtime int64, blocks uint64) (proto.Attr, error) {
	return c.mutAttr(ctx, OpWriteDone, &writeDoneReq{ino, end, mtime, blocks})
}

func (c *Client) Release(ctx context.Context, ino proto.Ino) error {
	return c.mutate(ctx, OpRelease, &inoReq{ino}, &emptyMsg{})
}

func (c *Client) CreateOpen(ctx context.Context, in proto.CreateIn, want proto.Access) (attr, parent proto.Attr, cap []byte, err error) {
	var r createOpenResp
	err = c.mutate(ctx, OpCreateOpen, &createOpenReq{createReq{in}, want}, &r)
	return r.Attr, r.Parent, r.Cap, err
}

func (c *Client) UnlinkAt(ctx context.Context, parent proto.Ino, name string) (proto.Attr, error) {
	return c.mutAttr(ctx, OpUnlinkAt, &nameReq{parent, name})
}

func (c *Client) RmdirAt(ctx context.Context, parent proto.Ino, name string) (proto.Attr, error) {
	return c.mutAttr(ctx, OpRmdirAt, &nameReq{parent, name})
}

func (c *Client) ReleaseMany(ctx context.Context, inos []proto.Ino) error {
	return c.mutate(ctx, OpReleaseMany, &inosReq{inos}, &emptyMsg{})
}

func (c *Client) OpenSession(ctx context.Context, reclaim []proto.OpenHandle) (time.Duration, error) {
	var r leaseResp
	err := c.do(ctx, OpSessionOpen, &sessionOpenReq{reclaim, version.String()}, &r)
	return r.Lease, err
}

func (c *Client) RenewSession(ctx context.Context) (time.Duration, error) {
	var r leaseResp
	err := c.do(ctx, OpSessionRenew, &emptyMsg{}, &r)
	return r.Lease, err
}

func (c *Client) CloseSession(ctx context.Context) error {
	return c.do(ctx, OpSessionClose, &emptyMsg{}, &emptyMsg{})
}

// Lock is sent as a mutation (numbered, retried after a broken
// connection) unless it only tests: taking or releasing the same lock
// twice for the same owner leaves the same state, so a retry is harmless
// even though the server keeps no reply for it.
func (c *Client) Lock(ctx context.Context, ino proto.Ino, lk proto.Lock, mode proto.LockMode) (proto.Lock, error) {
	var r lockResp
	var err error
	if mode == proto.LockTest {
		err = c.do(ctx, OpLock, &lockReq{ino, lk, mode}, &r)
	} else {
		err = c.mutate(ctx, OpLock, &lockReq{ino, lk, mode}, &r)
	}
	return r.Lock, err
}

// LockWait is sent once: the caller asks again (with Lock) whatever it
// answers.
func (c *Client) LockWait(ctx context.Context, ino proto.Ino, lk proto.Lock) error {
	return c.do(ctx, OpLockWait, &lockReq{ino, lk, proto.LockSet}, &emptyMsg{})
}

func (c *Client) Append(ctx context.Context, ino proto.Ino, n uint64) (proto.Attr, error) {
	return c.mutAttr(ctx, OpAppend, &appendReq{ino, n})
}

// ReclaimAppend is sent like a mutation: naming the same end twice
// changes nothing more.
func (c *Client) ReclaimAppend(ctx context.Context, ino proto.Ino, end uint64) error {
	return c.mutate(ctx, OpAppendReclaim, &appendReclaimReq{ino, end}, &emptyMsg{})
}

func (c *Client) SetLayout(ctx context.Context, ino proto.Ino, l layout.Layout) (proto.Attr, error) {
	return c.mutAttr(ctx, OpSetLayout, &setLayoutReq{ino, l})
}

func (c *Client) StatFS(ctx context.Context) (proto.StatFS, error) {
	var r statfsResp
	err := c.do(ctx, OpStatFS, &emptyMsg{}, &r)
	return r.S, err
}

// MarkStale implements proto.StaleMarker. It is a mutation, retried after
// a broken connection like the others (marking twice changes nothing).
func (c *Client) MarkStale(ctx context.Context, ino proto.Ino, gen uint64, slots []uint32) (proto.Attr, error) {
	return c.mutAttr(ctx, OpMarkStale, &staleReq{Ino: ino, Gen: gen, Slots: slots})
}

// ClearStale implements proto.StaleMarker.
func (c *Client) ClearStale(ctx context.Context, ino proto.Ino, gen uint64, slots []uint32, mtime int64) (proto.Attr, error) {
	return c.mutAttr(ctx, OpClearStale, &staleReq{Ino: ino, Gen: gen, Slots: slots, Mtime: mtime})
}

// FSID returns the file system id of the metadata server (OpFSID).
func (c *Client) FSID(ctx context.Context) (string, error) {
	var r stringResp
	err := c.do(ctx, OpFSID, &emptyMsg{}, &r)
	return r.S, err
}

func (c *Client) Targets(ctx context.Context) ([]proto.TargetInfo, error) {
	var r targetsResp
	err := c.do(ctx, OpTargets, &emptyMsg{}, &r)
	return r.T, err
}

func (c *Client) RegisterTarget(ctx context.Context, uuid string, info proto.TargetInfo) (proto.TargetID, error) {
	var r targetIDResp
	err := c.do(ctx, OpRegisterTarget, &registerReq{uuid, info}, &r)
	return r.ID, err
}
