package client

import (
	"context"

	"github.com/weft-fs/weft/proto"
)

// Counting a file's blocks without asking.
//
// At every flush the client reports the file's blocks (st_blocks) with
// WriteDone: the sum of what each object that may hold bytes of the file
// takes on its target (allocatedBlocks). A storage server answers every
// write with what the object takes after it (proto.CountingWriter), so
// for an object this client wrote since it last changed the file's
// objects otherwise, the count is known and the flush does not ask
// (StorageService.Allocated, one call to each copy: 100 µs of a small
// file's close here). Invariants:
//   - A count is kept per object (target and object id: a new generation
//     of the file names other objects) and is the one the write with the
//     highest object version answered: the last of this client's writes
//     the server applied, whatever order the replies of concurrent writes
//     arrived in.
//   - Anything else that changes what an object holds (truncate,
//     fallocate, a copy into the file, a resync of a copy) forgets every
//     count, before it starts and again after it ends
//     (changingAllocation); a write that began before it ended is not
//     counted (the epoch it began in is gone). A failed write forgets its
//     object's count.
//   - Changes by other clients after this client's last write to an
//     object (their writes, a truncate) are not in its count until it
//     writes the object again (an Allocated answer given before them
//     would not have them either): blocks are an accounting figure, and
//     each writer's flush reports what it saw.

// allocKey names one object on one target.
type allocKey struct {
	t   proto.TargetID
	obj proto.ObjectID
}

// allocCounts is an inodeState's known counts (guarded by its mu).
type allocCounts struct {
	epoch uint64
	known map[allocKey]allocCount
}

// allocCount is what a write answered: the object's version after it, and
// the bytes its blocks take.
type allocCount struct{ version, bytes uint64 }

// writeObject writes data at off of obj on target t and notes the
// object's count from the reply.
func (c *Client) writeObject(ctx context.Context, st *inodeState, t proto.TargetID, obj proto.ObjectID, off uint64, data []byte) error {
	st.mu.Lock()
	epoch := st.alloc.epoch
	st.mu.Unlock()
	v, n, err := proto.WriteCounting(ctx, c.storage, t, obj, off, data)
	st.noteAllocated(epoch, allocKey{t, obj}, allocCount{v, n}, err)
	return err
}

// noteAllocated records what a write begun in epoch answered (see the
// invariants above).
func (st *inodeState) noteAllocated(epoch uint64, k allocKey, n allocCount, err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	a := &st.alloc
	switch {
	case err != nil || n.bytes == proto.AllocatedUnknown:
		delete(a.known, k)
	case epoch == a.epoch:
		if a.known == nil {
			a.known = map[allocKey]allocCount{}
		}
		if old, ok := a.known[k]; !ok || n.version > old.version {
			a.known[k] = n
		}
	}
}

// changingAllocation forgets every count of st's file, in st and in the
// state of the file's open handles on this client if that is another (a
// truncate by path has one of its own), and returns the function that
// forgets them again once the change is done (defer it).
func (st *inodeState) changingAllocation() func() {
	states := []*inodeState{st}
	if c := st.c; c != nil {
		c.mu.Lock()
		if o := c.open[st.ino]; o != nil && o != st {
			states = append(states, o)
		}
		c.mu.Unlock()
	}
	forget := func() {
		for _, s := range states {
			s.mu.Lock()
			s.alloc.epoch++
			clear(s.alloc.known)
			s.mu.Unlock()
		}
	}
	forget()
	return forget
}

// knownAllocated returns the count of obj on t, if known.
func (st *inodeState) knownAllocated(t proto.TargetID, obj proto.ObjectID) (uint64, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	n, ok := st.alloc.known[allocKey{t, obj}]
	return n.bytes, ok
}
