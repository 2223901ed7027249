package meta

import (
	"bytes"
	"errors"
	"fmt"
	"syscall"

	"github.com/weft-fs/weft/meta/store"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/wire"
)

// The request dedupe (Raft thesis §6.3). A client names each mutation with
// its session and a sequence number (Command.Session, SessionName, Seq).
// The state machine stores the reply of every such command (its errno, and
// the attributes it returned) in the same batch as its changes, keyed by
// session and sequence number; a command whose request already has a reply
// is not applied again but answered with that reply. A client retrying a
// request after a broken connection, a timeout or a failover therefore gets
// the outcome of the first attempt: a retried create neither fails with
// EEXIST nor creates twice, a retried unlink does not fail with ENOENT.
//
// Replies are forgotten when the client says it has them (Command.Acked:
// every request numbered below it), when they are more than dedupeWindow
// requests older than the session's newest, and when the session ends
// (OpSessionDrop, proposed when a session expires or closes, and after the
// grace period of a restart for sessions that did not come back). A
// retry of a forgotten request is applied as a new one.

// dedupeWindow bounds the replies kept per session even if the client never
// acknowledges them: a client has far fewer requests in flight.
const dedupeWindow = 4096

// replyVersion is the format of a stored reply:
//
//	u8   version
//	u32  errno (0: success)
//	attr the attributes returned (proto.Attr encoding)
//	attr the parent directory's attributes returned
const replyVersion = 1

func encodeReply(errno syscall.Errno, res *applyResult) []byte {
	e := wire.NewEncoder(160)
	e.U8(replyVersion)
	e.U32(uint32(errno))
	res.attr.Encode(e)
	res.parent.Encode(e)
	return e.B
}

func decodeReply(b []byte) (errno syscall.Errno, res applyResult, err error) {
	d := wire.NewDecoder(b)
	if v := d.U8(); d.Err() == nil && v != replyVersion {
		return 0, res, fmt.Errorf("meta: stored reply version %d not supported", v)
	}
	errno = syscall.Errno(d.U32())
	res.attr.Decode(d)
	res.parent.Decode(d)
	if err := d.Done(); err != nil {
		return 0, res, fmt.Errorf("meta: decode stored reply: %w", err)
	}
	return errno, res, nil
}

// remembered returns the stored reply of c's request, if there is one
// (found); err is the reply's error.
func (sm *stateMachine) remembered(c *Command) (res applyResult, found bool, err error) {
	v, err := sm.st.Get(store.ReplyKey(store.ReplyPrefix(c.Session, c.SessionName), c.Seq))
	if errors.Is(err, store.ErrNotFound) {
		return applyResult{}, false, nil
	}
	if err != nil {
		return applyResult{}, true, errnof(syscall.EIO, "read stored reply: %v", err)
	}
	errno, res, err := decodeReply(v)
	if err != nil {
		return applyResult{}, true, fmt.Errorf("%w: %w", err, syscall.EIO)
	}
	res.dup = true
	if errno != 0 {
		return res, true, fmt.Errorf("meta: %s of request %d, retried: the first attempt's reply: %w", c.Op, c.Seq, errno)
	}
	return res, true, nil
}

// remember puts the reply of c's request (errno, and the attributes in
// t.res) into t's batch, and deletes the session's replies that the client
// acknowledged or that fell out of the window.
func (t *txn) remember(c *Command, errno syscall.Errno) error {
	prefix := store.ReplyPrefix(c.Session, c.SessionName)
	floor := c.Acked
	if c.Seq > dedupeWindow {
		floor = max(floor, c.Seq-dedupeWindow)
	}
	if floor > 0 {
		var old [][]byte
		if err := t.sm.st.Scan(prefix, store.ReplyKey(prefix, floor), func(k, _ []byte) bool {
			old = append(old, bytes.Clone(k))
			return true
		}); err != nil {
			return errnof(syscall.EIO, "scan stored replies: %v", err)
		}
		for _, k := range old {
			t.b.Delete(k)
		}
	}
	t.b.Set(store.ReplyKey(prefix, c.Seq), encodeReply(errno, &t.res))
	return nil
}

// rememberFailure stores the reply of a command that failed with err (a
// batch of its own: the failed command's changes are dropped) and returns
// err. An error without an errno is not a reply to remember.
func (sm *stateMachine) rememberFailure(c *Command, err error, sync bool) (applyResult, error) {
	var errno syscall.Errno
	if !errors.As(err, &errno) || errno == 0 {
		return applyResult{}, err
	}
	t := sm.newTxn(sync)
	defer t.b.Close()
	if rerr := t.remember(c, errno); rerr != nil {
		return applyResult{}, errors.Join(err, rerr)
	}
	if cerr := t.commit(); cerr != nil {
		return applyResult{}, cerr
	}
	return applyResult{wrote: t.res.wrote, synced: t.res.synced}, err
}

// stamp sets the request id of cmd from the caller's request: its session
// and sequence number, if it has one (else cmd is not deduplicated).
func (c caller) stamp(cmd *Command) {
	if c.req.Seq == 0 || c.sess.id == (proto.SessionID{}) {
		return
	}
	cmd.Session, cmd.SessionName = c.sess.id, c.sess.name
	cmd.Seq, cmd.Acked = c.req.Seq, c.req.Acked
}
