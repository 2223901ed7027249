package transport

import (
	"context"
	"errors"
	"fmt"
	"syscall"
)

// RemoteError is a handler's error as the caller receives it. It unwraps to
// its Errno, so errors.Is(err, syscall.ENOENT) works on the result of Call.
type RemoteError struct {
	Addr  string        // server address
	Op    uint16        // operation that failed
	Errno syscall.Errno // never 0
	Msg   string        // the handler's error text
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("transport: %s op %d: %s", e.Addr, e.Op, e.Msg)
}

// Unwrap returns the errno.
func (e *RemoteError) Unwrap() error { return e.Errno }

// errNotSent marks a call that failed before any byte of its request reached
// the connection, so the server cannot have seen it and a retry on another
// connection is safe even for operations that are not idempotent.
var errNotSent = errors.New("transport: request not sent")

// errMsgSize is wrapped by the error of a call whose request is over MaxBody.
var errMsgSize = syscall.EMSGSIZE

// errnoOf maps a handler error to the errno sent to the caller.
func errnoOf(err error) syscall.Errno {
	var errno syscall.Errno
	if errors.As(err, &errno) && errno != 0 {
		return errno
	}
	return syscall.EIO
}

// ctxError is the error of a call abandoned because ctx ended: it matches
// syscall.ETIMEDOUT and context.DeadlineExceeded when the deadline passed,
// and syscall.EINTR and context.Canceled when ctx was cancelled.
func ctxError(ctx context.Context, addr string, op uint16) error {
	return fmt.Errorf("transport: %s op %d: %w (%w)", addr, op, ctxErrno(ctx), ctx.Err())
}

// ctxErrno is ETIMEDOUT for an expired ctx and EINTR for a cancelled one.
func ctxErrno(ctx context.Context) syscall.Errno {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return syscall.ETIMEDOUT
	}
	return syscall.EINTR
}

// brokenError is the error of a call whose connection failed: it matches
// syscall.EIO and, when unsent, errNotSent.
func brokenError(addr string, op uint16, cause error, unsent bool) error {
	if unsent {
		return fmt.Errorf("transport: %s op %d: connection broken: %w: %w (%w)", addr, op, syscall.EIO, cause, errNotSent)
	}
	return fmt.Errorf("transport: %s op %d: connection broken: %w: %w", addr, op, syscall.EIO, cause)
}
