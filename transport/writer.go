package transport

import (
	"net"
	"slices"
	"sync"
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
	state int
	// done is closed when the writer no longer references parts (the frame
	// is written, failed, or unsent). Nil if nobody waits for it.
	done chan struct{}
}

// Bounds of one writev batch. Frames in a batch are released together, so a
// bound keeps a frame from waiting on many megabytes queued behind it.
const (
	maxBatchBufs  = 1024
	maxBatchBytes = 8 << 20
)

// frameWriter is the single writer of a connection. Callers queue frames;
// one goroutine drains the queue and sends everything queued with one
// writev, so concurrent small calls share system calls and large bodies are
// never copied.
type frameWriter struct {
	nc     net.Conn
	onFail func(error) // called once, from the writer goroutine, when a write fails

	mu     sync.Mutex
	queue  []*outFrame
	spare  []*outFrame
	err    error         // set when stopped; no frame is taken after that
	wake   chan struct{} // capacity 1: "the queue or err changed"
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

// enqueue queues f. It returns false, without queueing, if the writer has
// stopped.
func (w *frameWriter) enqueue(f *outFrame) bool {
	w.mu.Lock()
	if w.err != nil {
		w.mu.Unlock()
		return false
	}
	f.state = frameQueued
	w.queue = append(w.queue, f)
	w.mu.Unlock()
	w.signal()
	return true
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
	var bufs net.Buffers
	for {
		w.mu.Lock()
		if w.err != nil {
			w.mu.Unlock()
			return
		}
		if len(w.queue) == 0 {
			w.mu.Unlock()
			<-w.wake
			continue
		}
		// Take a bounded batch from the head of the queue.
		n, nbufs, nbytes := 0, 0, 0
		for n < len(w.queue) && (n == 0 || (nbufs < maxBatchBufs && nbytes < maxBatchBytes)) {
			f := w.queue[n]
			f.state = frameWriting
			nbufs += 1 + len(f.parts)
			for _, p := range f.parts {
				nbytes += len(p)
			}
			n++
		}
		batch := append(w.spare[:0], w.queue[:n]...)
		rest := copy(w.queue, w.queue[n:])
		clear(w.queue[rest:])
		w.queue = w.queue[:rest]
		w.mu.Unlock()

		bufs = bufs[:0]
		for _, f := range batch {
			bufs = append(bufs, f.hdr[:])
			for _, p := range f.parts {
				if len(p) > 0 {
					bufs = append(bufs, p)
				}
			}
		}
		b := bufs // WriteTo consumes its receiver
		_, err := b.WriteTo(w.nc)
		clear(bufs[:cap(bufs)])

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
		w.spare = batch[:0]

		if err != nil {
			w.stop(err)
			w.onFail(err)
			return
		}
	}
}
