package metarpc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/transport"
)

// seqs hands out the sequence numbers of a session's mutations. The
// server remembers the replies of a session's last proto.MaxPendingRequests
// requests, so a new number is handed out only while every request still
// waiting for its reply is within that many of it.
type seqs struct {
	mu      sync.Mutex
	next    uint64              // the next sequence number (from 1)
	out     map[uint64]struct{} // requests without their reply yet
	low     uint64              // the lowest of out, or next if out is empty
	changed chan struct{}       // closed when low moves
}

func newSeqs() *seqs {
	return &seqs{next: 1, low: 1, out: map[uint64]struct{}{}, changed: make(chan struct{})}
}

// begin numbers a new request, waiting (until ctx ends) while the oldest
// request without its reply is too far behind.
func (s *seqs) begin(ctx context.Context) (uint64, error) {
	for {
		s.mu.Lock()
		if s.next-s.low < proto.MaxPendingRequests {
			seq := s.next
			s.next++
			if len(s.out) == 0 {
				s.low = seq
			}
			s.out[seq] = struct{}{}
			s.mu.Unlock()
			return seq, nil
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, fmt.Errorf("metarpc: waiting for earlier requests' replies: %w (%w)", syscall.ETIMEDOUT, ctx.Err())
		}
	}
}

// end records that request seq has its reply (or was given up).
func (s *seqs) end(seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.out, seq)
	moved := false
	for s.low < s.next {
		if _, ok := s.out[s.low]; ok {
			break
		}
		s.low++
		moved = true
	}
	if moved {
		close(s.changed)
		s.changed = make(chan struct{})
	}
}

// Retry backoff of a mutation whose connection broke.
const (
	retryFirst = 10 * time.Millisecond
	retryMax   = 250 * time.Millisecond
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

// outcomeUnknown reports whether err is a server's answer that it cannot
// tell whether the request was applied (ETIMEDOUT: a replicated server
// lost leadership, or its deadline passed, after the request was
// proposed). In a session the request is sent again with its number:
// the dedupe answers it with the first attempt's reply if it was applied.
func outcomeUnknown(err error) bool {
	var re *transport.RemoteError
	return errors.As(err, &re) && re.Errno == syscall.ETIMEDOUT
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
		// Not deduplicated: never sent twice.
		return c.send(ctx, op, false, req, resp)
	}
	seq, err := sess.seqs.begin(ctx)
	if err != nil {
		return err
	}
	defer sess.seqs.end(seq)
	hdr, body := c.header(ctx, sess, seq), marshal(req)
	wait := retryFirst
	for {
		b, err := c.call(ctx, op, false, hdr, body)
		if err == nil {
			if err := unmarshal(b, resp); err != nil {
				return errIO(err)
			}
			return nil
		}
		if !(retryable(err) || outcomeUnknown(err)) || ctx.Err() != nil {
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
