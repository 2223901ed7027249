package transport

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Frame states, guarded by frameWriter.mu.
const (
	frameQueued  = iota // waiting in the queue; may still be withdrawn
	frameWriting        // handed to writev; the writer reads its parts
	frameWritten        // writev returned success for it
	frameFailed         // writev failed while writing it (maybe partly sent)
	frameUnsent         // dropped without any byte sent: withdrawn or writer stopped
)

// outFrame is one frame waiting to be written: a header and the body parts,
// which are sent as they are (no copy) with writev.
type outFrame struct {
	hdr   [HeaderSize]byte
	parts [][]byte
	file  *fileSegment // sent after parts with sendfile(2) (SendFile); nil: none
	state int
	// done is closed when the writer no longer references parts (the frame
	// is written, failed, or unsent). Nil if nobody waits for it.
	done chan struct{}
}

// fileSegment is n bytes of a file from off, the end of a response body
// (SendFile).
type fileSegment struct {
	src syscall.RawConn
	off int64
	n   int
}

// bodyLen is the frame's body length given its parts' bytes.
func (f *outFrame) bodyLen(parts int) int {
	if f.file != nil {
		parts += f.file.n
	}
	return parts
}

// Bounds of one writev batch. Frames in a batch are released together, so a
// bound keeps a frame from waiting on many megabytes queued behind it.
const (
	maxBatchBufs  = 1024
	maxBatchBytes = 8 << 20
	// combineBytes bounds what a sender writes for others after its own
	// frame; larger bodies are left to the writer goroutine.
	combineBytes = 256 << 10
)

// frameWriter serialises the writes of a connection. A sender that finds
// nobody writing and nothing queued writes its frame itself, at once, with
// one writev (send): no goroutine hand-off on an idle connection. Otherwise
// it queues the frame, and the connection's writer goroutine drains the
// queue, sending everything queued with one writev, so concurrent small
// calls share system calls. Body parts are never copied either way. At most
// one goroutine writes at a time (busy).
type frameWriter struct {
	nc     net.Conn
	onFail func(error) // called once, by whoever saw a write fail
	// stall, if positive, bounds each write: a peer that takes no bytes
	// for that long fails the connection (server connections only). The
	// deadline is moved on only when it is more than stall/8 old, so a
	// write may fail after 7/8 of stall; deadlineSet is when it last was
	// (used by the holder of busy only).
	stall       time.Duration
	deadlineSet time.Time

	mu    sync.Mutex
	queue []*outFrame
	spare []*outFrame
	busy  bool // a sender or the writer goroutine is writing
	// Scratch of whoever holds busy.
	one    [1]*outFrame
	bufs   net.Buffers
	err    error         // set when stopped; no frame is taken after that
	wake   chan struct{} // capacity 1: "the queue, busy or err changed"
	exited chan struct{} // closed when the goroutine returns
}

func newFrameWriter(nc net.Conn, onFail func(error)) *frameWriter {
	w := &frameWriter{
		nc:     nc,
		onFail: onFail,
		wake:   make(chan struct{}, 1),
		exited: make(chan struct{}),
	}
	go w.loop()
	return w
}

func (w *frameWriter) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// send writes f. If nobody is writing and nothing is queued, the calling
// goroutine writes f itself, at once, with one writev; then, while frames
// were queued meanwhile (up to combineBytes a batch), it writes those too,
// so that under contention the writes are still shared without waking the
// writer goroutine. Otherwise send queues f for whoever is writing and
// returns at once. It returns false, without sending or queueing f, if the
// writer has stopped.
//
// A direct write blocks while the connection does not take the bytes
// (backpressure, a frozen peer). f stays frameWriting until send returns,
// so a withdraw from another goroutine waits for the whole send, as it
// waits for the writer goroutine's batch.
func (w *frameWriter) send(f *outFrame) bool {
	w.mu.Lock()
	if w.err != nil {
		w.mu.Unlock()
		return false
	}
	if w.busy || len(w.queue) > 0 {
		f.state = frameQueued
		w.queue = append(w.queue, f)
		w.mu.Unlock()
		w.signal()
		return true
	}
	w.busy = true
	f.state = frameWriting
	w.mu.Unlock()

	w.one[0] = f
	err := w.write(w.one[:])
	w.one[0] = nil
	handOff := false
	for err == nil {
		w.mu.Lock()
		if w.err != nil || len(w.queue) == 0 {
			w.mu.Unlock()
			break
		}
		if w.queueBytes(combineBytes) >= combineBytes {
			// Large frames are the writer goroutine's: this sender
			// only waits for its response.
			handOff = true
			w.mu.Unlock()
			break
		}
		batch := w.take(combineBytes)
		w.mu.Unlock()
		err = w.write(batch)
		w.finish(batch, err)
	}

	w.mu.Lock()
	w.busy = false
	f.state = frameWritten
	if err != nil {
		f.state = frameFailed
	}
	if f.done != nil {
		close(f.done)
	}
	handOff = handOff || len(w.queue) > 0
	w.mu.Unlock()
	if err != nil {
		w.stop(err)
		w.onFail(err)
	} else if handOff {
		w.signal()
	}
	return true
}

// queueBytes returns the body bytes of the queue's head frames, counting
// up to at least limit. Called with mu held.
func (w *frameWriter) queueBytes(limit int) int {
	n := 0
	for _, f := range w.queue {
		for _, p := range f.parts {
			n += len(p)
		}
		n = f.bodyLen(n)
		if n >= limit {
			break
		}
	}
	return n
}

// take removes a batch from the head of the queue, at least one frame and
// at most maxBatchBufs buffers and about maxBytes, marks its frames
// frameWriting and returns it (in w.spare). Called with mu held by the
// holder of busy.
func (w *frameWriter) take(maxBytes int) []*outFrame {
	n, nbufs, nbytes := 0, 0, 0
	for n < len(w.queue) && (n == 0 || (nbufs < maxBatchBufs && nbytes < maxBytes)) {
		f := w.queue[n]
		f.state = frameWriting
		nbufs += 1 + len(f.parts)
		for _, p := range f.parts {
			nbytes += len(p)
		}
		nbytes = f.bodyLen(nbytes)
		n++
	}
	batch := append(w.spare[:0], w.queue[:n]...)
	rest := copy(w.queue, w.queue[n:])
	clear(w.queue[rest:])
	w.queue = w.queue[:rest]
	w.spare = batch
	return batch
}

// write sends the frames of batch with one writev, without copying their
// parts; a frame's file segment (SendFile) with sendfile(2) after the
// writev of everything before it. Only the holder of busy calls it.
func (w *frameWriter) write(batch []*outFrame) error {
	if w.stall > 0 {
		if now := time.Now(); now.Sub(w.deadlineSet) > w.stall/8 {
			_ = w.nc.SetWriteDeadline(now.Add(w.stall))
			w.deadlineSet = now
		}
	}
	bufs := w.bufs[:0]
	var err error
	for _, f := range batch {
		bufs = append(bufs, f.hdr[:])
		for _, p := range f.parts {
			if len(p) > 0 {
				bufs = append(bufs, p)
			}
		}
		if f.file != nil {
			if bufs, err = w.writev(bufs); err != nil {
				break
			}
			if err = w.sendFile(f.file); err != nil {
				break
			}
		}
	}
	if err == nil {
		bufs, err = w.writev(bufs)
	}
	clear(bufs[:cap(bufs)])
	w.bufs = bufs[:0]
	return err
}

// writev writes bufs and returns them emptied, for reuse.
func (w *frameWriter) writev(bufs net.Buffers) (net.Buffers, error) {
	if len(bufs) == 0 {
		return bufs, nil
	}
	b := bufs // WriteTo consumes its receiver
	_, err := b.WriteTo(w.nc)
	clear(bufs)
	return bufs[:0], err
}

// sendFile writes s to the connection with sendfile(2), waiting (through
// the poller, so within the write deadline) while the socket is full. The
// connection is a *net.TCPConn: SendFile takes segments only then.
func (w *frameWriter) sendFile(s *fileSegment) error {
	sc, ok := w.nc.(syscall.Conn)
	if !ok {
		return errors.New("transport: sendfile on a connection without a descriptor")
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return fmt.Errorf("transport: sendfile: %w", err)
	}
	off, left := s.off, s.n
	var serr error
	cerr := s.src.Control(func(src uintptr) {
		err = raw.Write(func(dst uintptr) bool {
			for left > 0 {
				n, e := unix.Sendfile(int(dst), int(src), &off, left)
				if n > 0 {
					left -= n
				}
				switch {
				case e == unix.EAGAIN:
					return false // wait until the socket takes more
				case e == unix.EINTR:
				case e != nil:
					serr = e
					return true
				case n == 0:
					// The file was cut meanwhile: the rest is zeros.
					return true
				}
			}
			return true
		})
	})
	if err = errors.Join(cerr, err, serr); err != nil {
		return fmt.Errorf("transport: sendfile of %d bytes at %d (%d sent): %w", s.n, s.off, s.n-left, err)
	}
	for left > 0 { // the frame keeps the length it announced
		n, err := w.nc.Write(zeros[:min(left, len(zeros))])
		if err != nil {
			return fmt.Errorf("transport: padding a cut file: %w", err)
		}
		left -= n
	}
	return nil
}

// zeros pads a file segment whose file was cut while it was sent.
var zeros = make([]byte, 64<<10)

// finish marks the frames of a written batch and lets their waiters go.
func (w *frameWriter) finish(batch []*outFrame, err error) {
	state := frameWritten
	if err != nil {
		state = frameFailed
	}
	w.mu.Lock()
	for _, f := range batch {
		f.state = state
		if f.done != nil {
			close(f.done)
		}
	}
	w.mu.Unlock()
	clear(batch)
}

// withdraw makes sure the writer no longer references f's parts once the
// caller has waited for the returned channel: if f is still queued it is
// removed (and never sent) and withdraw returns nil; if the writer is in the
// middle of writing it, withdraw returns a channel closed when that write
// returns; if f is finished (or was never queued) it returns nil.
func (w *frameWriter) withdraw(f *outFrame) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch f.state {
	case frameQueued:
		if i := slices.Index(w.queue, f); i >= 0 {
			w.queue = slices.Delete(w.queue, i, i+1)
		}
		f.state = frameUnsent
		if f.done != nil {
			close(f.done)
		}
	case frameWriting:
		if f.done == nil {
			f.done = make(chan struct{})
		}
		return f.done
	}
	return nil
}

// wasSent reports whether any byte of f may have reached the connection.
// It is meaningful once the writer is stopped: a frame still marked queued
// then was never taken (or never enqueued) and never will be.
func (w *frameWriter) wasSent(f *outFrame) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return f.state != frameQueued && f.state != frameUnsent
}

// stop makes the writer drop everything still queued (as unsent) and exit
// once the batch it is writing, if any, returns. The caller closes the
// connection so that a blocked write returns. stop does not wait.
func (w *frameWriter) stop(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
		for _, f := range w.queue {
			f.state = frameUnsent
			if f.done != nil {
				close(f.done)
			}
		}
		clear(w.queue)
		w.queue = w.queue[:0]
	}
	w.mu.Unlock()
	w.signal()
}

func (w *frameWriter) loop() {
	defer close(w.exited)
	for {
		w.mu.Lock()
		if w.err != nil {
			w.mu.Unlock()
			return
		}
		if len(w.queue) == 0 || w.busy {
			w.mu.Unlock()
			<-w.wake
			continue
		}
		w.busy = true
		batch := w.take(maxBatchBytes)
		w.mu.Unlock()

		err := w.write(batch)
		w.finish(batch, err)
		w.mu.Lock()
		w.busy = false
		w.mu.Unlock()
		if err != nil {
			w.stop(err)
			w.onFail(err)
			return
		}
	}
}
