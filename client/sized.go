package client

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/weft-fs/weft/layout"
	"github.com/weft-fs/weft/proto"
)

// Objects kept as long as their share of the file (layout.ObjectsSized).
//
// The metadata server records a file's size; for a file placed with
// ObjectsSized, every object not stale is at least layout.ObjectSize(size,
// stripe) long. Writes extend the objects they reach; before Flush or Fsync
// records a larger size (WriteDone), extendObjects makes the other objects
// (the ones the size now covers but no write reached, say behind a hole)
// that long with proto.ObjectExtender, which never shortens an object, so a
// concurrent writer on another mount loses nothing. A WriteDone records
// only the writes that reached storage (inodeState.doneEnd), never one
// still on its way. Truncate sets every object to its share. So a read that
// finds an object shorter than the recorded size says has found lost data
// (a deleted or shortened object file), not a hole: readExtent checks,
// after asking the metadata server for the current size (another client may
// be truncating the file: it cuts the objects before it records the size,
// so it asks a few times over 0.75 s; a read that a truncate of this client
// overlapped, read-ahead under way say, is never taken for loss, and a read
// is held to the size recorded when it began, not to a larger one recorded
// while it ran: readEpoch), and then reads another copy of a mirrored file,
// marking the short one stale, or fails with EIO and logs it for an
// unprotected one. Files placed before ObjectsSized existed are not
// checked: their holes may be short objects.

// extendsLocked returns the stripes whose objects a size of end covers
// further than this client knows them to reach.
func (st *inodeState) extendsLocked(end uint64) []int {
	l := st.layout
	if !l.ObjectsSized || end <= st.metaSize || l.StripeCount < 1 {
		return nil
	}
	var out []int
	for s := range l.Columns() {
		want := l.ObjectSize(end, s)
		if want > l.ObjectSize(st.metaSize, s) && want > st.written[s] {
			out = append(out, s)
		}
	}
	return out
}

// extendObjects extends the objects of stripes to their share of a file of
// size end, on every copy.
func (c *Client) extendObjects(ctx context.Context, st *inodeState, l layout.Layout, stripes []int, end uint64) error {
	if len(stripes) == 0 {
		return nil
	}
	x, ok := c.storage.(proto.ObjectExtender)
	if !ok {
		return nil // storage without it: the reads do not check either
	}
	rctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	err := parallel(len(stripes), func(i int) error {
		s := stripes[i]
		return c.onStripe(rctx, st, l, s, "extend", func(ctx context.Context, t proto.TargetID, obj proto.ObjectID) error {
			return st.withCap(ctx, proto.AccessWrite, func(ctx context.Context) error {
				return x.Extend(ctx, t, obj, l.ObjectSize(end, s))
			})
		})
	})
	if err != nil {
		return err
	}
	st.mu.Lock()
	for _, s := range stripes {
		st.written[s] = max(st.written[s], l.ObjectSize(end, s))
	}
	st.mu.Unlock()
	return nil
}

// readEpochKey carries, in a read's context, its readStart.
type readEpochKey struct{}

// readStart is what a read knew of its file when it began: how many
// truncates this client had begun on it (inodeState.truncates), and the
// size the metadata server recorded (metaSize), which every object
// already reached then. A size recorded later may cover bytes that were
// still on their way to the objects while the read read them (a write of
// another handle of this mount, flushed meanwhile by the kernel's late
// RELEASE; read-ahead is not ordered with later writes): it is no measure
// of what the read should have found.
type readStart struct {
	truncates uint64
	size      uint64
}

// readEpoch returns ctx marked with the read's readStart, for checkLength.
func (st *inodeState) readEpoch(ctx context.Context) context.Context {
	st.mu.Lock()
	rs := readStart{truncates: st.truncates.Load(), size: st.metaSize}
	st.mu.Unlock()
	return context.WithValue(ctx, readEpochKey{}, rs)
}

// errShortObject is wrapped when an object is shorter than the file size
// says: its data was lost.
var errShortObject = errors.New("client: object shorter than the file: data lost")

// checkLength returns errShortObject (wrapping EIO) if got bytes read at
// e from a sized file's object end before the object's share of the size
// the metadata server recorded when the read began (readEpoch; or now, if
// smaller). It asks the server for the size before concluding: the file
// may have been truncated by another client.
func (c *Client) checkLength(ctx context.Context, st *inodeState, l layout.Layout, e layout.Extent, got int) error {
	if !l.ObjectsSized || uint64(got) >= e.Len {
		return nil
	}
	if _, ok := c.storage.(proto.ObjectExtender); !ok {
		return nil
	}
	st.mu.Lock()
	size, truncating := st.metaSize, st.truncating > 0
	st.mu.Unlock()
	began, known := ctx.Value(readEpochKey{}).(readStart)
	bound := func(size uint64) uint64 {
		if known {
			return min(size, began.size)
		}
		return size
	}
	short := func(size uint64) bool {
		return e.ObjOff+uint64(got) < min(l.ObjectSize(bound(size), e.Stripe), e.ObjOff+e.Len)
	}
	if !short(size) || truncating || known && began.truncates != st.truncates.Load() {
		// While this client truncates, it cuts the objects before it
		// records the size; the reads that overlap it (read-ahead already
		// under way) are dropped. A read that a truncate of this client
		// overlapped, even one over by now, may have found an object as
		// the truncate left it for a moment (cut down, not yet grown to a
		// later size): what it read is no evidence of loss.
		return nil
	}
	var a proto.Attr
	for attempt := 0; ; attempt++ {
		rctx, cancel := c.rpcCtx(ctx)
		var err error
		a, err = c.meta.GetAttr(rctx, st.ino)
		cancel()
		if err != nil {
			return err
		}
		if a.Gen != st.gen {
			// The file was restriped (weft migrate) and this handle's
			// objects removed after the grace: its bytes are in the new
			// objects, which the handle follows to (follow.go). Never
			// read them as zeros.
			st.moved.Store(a.Gen)
			return fmt.Errorf("%w: ino %d generation %#x is %#x now: %w", errMoved, st.ino, st.gen, a.Gen, syscall.ESTALE)
		}
		if !short(a.Size) {
			return nil
		}
		if attempt == 4 {
			break
		}
		// Another client's truncate cuts the objects before it records
		// the smaller size: give it a moment (0.75 s in all) before
		// calling the bytes lost.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond << attempt):
		}
	}
	return fmt.Errorf("%w: ino %d stripe %d ends at %d, the file's size %d needs %d: %w",
		errShortObject, st.ino, e.Stripe, e.ObjOff+uint64(got), bound(a.Size), l.ObjectSize(bound(a.Size), e.Stripe), syscall.EIO)
}
