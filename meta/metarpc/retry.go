package metarpc

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"time"

	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/transport"
)

// seqs hands out the sequence numbers of a session's mutations and tracks
// which are still waiting for their reply, so that each request can tell
// the server the lowest of them (acked: the server may forget the replies
// of every request below it).
type seqs struct {
	mu   sync.Mutex
	next uint64              // the next sequence number (from 1)
	out  map[uint64]struct{} // requests without their reply yet
	low  uint64              // the lowest of out, or next if out is empty
}

func newSeqs() *seqs { return &seqs{next: 1, low: 1, out: map[uint64]struct{}{}} }

// begin numbers a new request.
func (s *seqs) begin() proto.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	seq := s.next
	s.next++
	if len(s.out) == 0 {
		s.low = seq
	}
	s.out[seq] = struct{}{}
	return proto.Request{Seq: seq, Acked: s.low}
}

// end records that request seq has its reply (or was given up).
func (s *seqs) end(seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.out, seq)
	for s.low < s.next {
		if _, ok := s.out[s.low]; ok {
			break
		}
		s.low++
	}
}

// Retry backoff of a mutation whose connection broke.
const (
	retryFirst = 10 * time.Millisecond
	retryMax   = time.Second
)

// retryable reports whether err says the request may not have reached the
// server or its reply was lost (the transport's EIO or ETIMEDOUT, not a
// server's answer).
func retryable(err error) bool {
	var re *transport.RemoteError
	if errors.As(err, &re) {
		return false
	}
	return errors.Is(err, syscall.EIO) || errors.Is(err, syscall.ETIMEDOUT)
}

// mutate sends a mutation. In a session it carries a sequence number, and
// when the connection breaks (the request may or may not have been
// applied) it is sent again with the same number until ctx ends: the
// server answers a request it already applied with the reply it
// remembered (request dedupe, see package meta). Without a session it is
// sent once.
func (c *Client) mutate(ctx context.Context, op uint16, req, resp message) error {
	sess := c.sess.Load()
	if sess.id == (proto.SessionID{}) {
		return c.do(ctx, op, req, resp)
	}
	r := sess.seqs.begin()
	defer sess.seqs.end(r.Seq)
	hdr, body := c.header(ctx, sess, r), marshal(req)
	wait := retryFirst
	for {
		b, err := c.call(ctx, op, hdr, body)
		if err == nil {
			if err := unmarshal(b, resp); err != nil {
				return errIO(err)
			}
			return nil
		}
		if !retryable(err) || ctx.Err() != nil {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait = min(2*wait, retryMax)
	}
}
