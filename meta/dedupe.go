package meta

import (
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
// the attributes it returned) in the same batch as its changes; a command
// whose request already has a reply is not applied again but answered with
// that reply. A client retrying a request after a broken connection, a
// timeout or a failover therefore gets the outcome of the first attempt: a
// retried create neither fails with EEXIST nor creates twice, a retried
// unlink does not fail with ENOENT.
//
// A session's replies live in proto.MaxPendingRequests slots, the reply of
// request seq in slot seq mod MaxPendingRequests, each naming its request:
// storing a reply overwrites the one of the request MaxPendingRequests
// earlier, so nothing is ever deleted request by request (deletes would
// leave tombstones that every later lookup has to step over). A client
// never has a request waiting for its reply more than MaxPendingRequests
// behind its newest (metarpc holds new requests back), so the reply of
// every request it may still retry is there. OpSessionDrop deletes a
// session's slots when it expires or closes, and after the grace period
// of a restart for sessions that did not come back; a retry of a forgotten
// request is applied as a new one.

// replyVersion is the format of a stored reply:
//
//	u8   version
//	u64  the request's sequence number
//	u32  errno (0: success)
//	attr the attributes returned (as in an inode record, layoutdisk.go)
//	attr the parent directory's attributes returned
//
// Version 1 held the attributes as inode records of version 2 (layout
// format 1, no allocated blocks); version 2 as version 3 (layout format 2,
// Attr.Blocks).
const replyVersion = 2

func encodeReply(seq uint64, errno syscall.Errno, res *applyResult) []byte {
	return appendStoredReply(wire.NewEncoder(168), seq, errno, res)
}

// appendStoredReply appends a stored reply (encodeReply) to e's buffer
// and returns the buffer.
func appendStoredReply(e *wire.Encoder, seq uint64, errno syscall.Errno, res *applyResult) []byte {
	e.U8(replyVersion)
	e.U64(seq)
	e.U32(uint32(errno))
	encodeAttrDisk(e, &res.attr)
	encodeAttrDisk(e, &res.parent)
	return e.B
}

func decodeReply(b []byte) (seq uint64, errno syscall.Errno, res applyResult, err error) {
	d := wire.NewDecoder(b)
	v := d.U8()
	if d.Err() == nil && v != 1 && v != replyVersion {
		return 0, 0, res, fmt.Errorf("meta: stored reply version %d not supported", v)
	}
	lf := diskLayoutFormat
	if v == 1 {
		lf = 1
	}
	seq = d.U64()
	errno = syscall.Errno(d.U32())
	decodeAttrDisk(d, &res.attr, lf, true, v >= 2)
	decodeAttrDisk(d, &res.parent, lf, true, v >= 2)
	if err := d.Done(); err != nil {
		return 0, 0, res, fmt.Errorf("meta: decode stored reply: %w", err)
	}
	return seq, errno, res, nil
}

func replySlot(c *Command) []byte {
	return store.ReplyKey(store.ReplyPrefix(c.Session, c.SessionName), c.Seq%proto.MaxPendingRequests)
}

// replySession names a session's reply slots in stateMachine.newestSeq.
type replySession struct {
	id   proto.SessionID
	name string
}

// newestStored returns the highest sequence number of c's session that
// has a stored reply. The first call for a session in this state machine's
// life scans the session's slots (at most proto.MaxPendingRequests);
// after that the number is kept up to date by noteReply and forgetSession.
// A request with a higher number cannot have a reply yet: it is applied
// without reading its slot, which saves a store read on every mutation.
func (sm *stateMachine) newestStored(c *Command) (uint64, error) {
	key := replySession{c.Session, c.SessionName}
	if seq, ok := sm.newestSeq[key]; ok {
		return seq, nil
	}
	prefix := store.ReplyPrefix(c.Session, c.SessionName)
	var newest uint64
	var bad error
	err := sm.st.Scan(prefix, store.PrefixEnd(prefix), func(_, v []byte) bool {
		seq, _, _, err := decodeReply(v)
		if err != nil {
			bad = err
			return false
		}
		newest = max(newest, seq)
		return true
	})
	if err == nil {
		err = bad
	}
	if err != nil {
		return 0, err
	}
	sm.newestSeq[key] = newest
	return newest, nil
}

// noteReply records that c's reply is stored (its batch committed).
func (sm *stateMachine) noteReply(c *Command) {
	key := replySession{c.Session, c.SessionName}
	if seq, ok := sm.newestSeq[key]; ok && c.Seq > seq {
		sm.newestSeq[key] = c.Seq
	}
}

// forgetSession drops what newestStored knows of a session whose slots
// were deleted.
func (sm *stateMachine) forgetSession(c *Command) {
	delete(sm.newestSeq, replySession{c.Session, c.SessionName})
}

// remembered returns the stored reply of c's request, if there is one
// (found); err is the reply's error.
func (sm *stateMachine) remembered(c *Command) (res applyResult, found bool, err error) {
	newest, err := sm.newestStored(c)
	if err != nil {
		return applyResult{}, true, errnof(syscall.EIO, "read stored replies: %v", err)
	}
	if c.Seq > newest {
		return applyResult{}, false, nil // newer than every stored reply
	}
	v, err := sm.st.Get(replySlot(c))
	if errors.Is(err, store.ErrNotFound) {
		return applyResult{}, false, nil
	}
	if err != nil {
		return applyResult{}, true, errnof(syscall.EIO, "read stored reply: %v", err)
	}
	seq, errno, res, err := decodeReply(v)
	if err != nil {
		return applyResult{}, true, fmt.Errorf("%w: %w", err, syscall.EIO)
	}
	if seq != c.Seq {
		return applyResult{}, false, nil // the slot holds another request's
	}
	res.dup = true
	if errno != 0 {
		return res, true, fmt.Errorf("meta: %s of request %d, retried: the first attempt's reply: %w", c.Op, c.Seq, errno)
	}
	return res, true, nil
}

// remember puts the reply of c's request (errno, and the attributes in
// t.res) into t's batch.
func (t *txn) remember(c *Command, errno syscall.Errno) {
	t.setScratch(store.AppendReplyKey(t.sm.kb, c.Session, c.SessionName, c.Seq%proto.MaxPendingRequests),
		appendStoredReply(t.encoder(), c.Seq, errno, &t.res))
}

// rememberFailure stores the reply of a command that failed with err (a
// batch of its own: the failed command's changes are dropped) and returns
// err. An error without an errno is not a reply to remember.
func (sm *stateMachine) rememberFailure(c *Command, err error, index uint64, sync bool) (applyResult, error) {
	var errno syscall.Errno
	if !errors.As(err, &errno) || errno == 0 {
		return applyResult{}, err
	}
	t := sm.newTxn(sync, index)
	defer sm.release(t)
	t.remember(c, errno)
	if cerr := t.commit(); cerr != nil {
		return applyResult{}, cerr
	}
	sm.noteReply(c)
	return applyResult{wrote: t.res.wrote, synced: t.res.synced}, err
}

// stamp sets the request id of cmd from the caller's request: its session
// and sequence number, if it has one (else cmd is not deduplicated).
func (c caller) stamp(cmd *Command) {
	if c.seq == 0 || c.sess.id == (proto.SessionID{}) {
		return
	}
	cmd.Session, cmd.SessionName, cmd.Seq = c.sess.id, c.sess.name, c.seq
}
