package store

import (
	"errors"
)

// ErrNotFound is returned by Get for a key that is not present.
var ErrNotFound = errors.New("store: not found")

// ErrClosed is returned by every call on a closed store.
var ErrClosed = errors.New("store: closed")

// ErrCorrupt is wrapped by every error about a store that failed a
// checksum or lost acknowledged writes: it must not be served from. With
// one server the way back is a restore from backup; with replicas, wiping
// the member and re-syncing it from the others.
var ErrCorrupt = errors.New("store: corrupt")

// RecoverHint is what an error about a corrupt store tells the admin.
const RecoverHint = "the store cannot be trusted: restore it from a backup, " +
	"or wipe this member and re-sync it from its peers"

// ErrNotStore is wrapped by the error about a directory that holds
// something other than a store.
var ErrNotStore = errors.New("store: not a weft metadata store")

// Reader is the read side of a store. Reads see every committed batch,
// synced or not.
type Reader interface {
	// Get returns a copy of the value stored under key, or ErrNotFound.
	Get(key []byte) ([]byte, error)
	// Scan calls fn for every key in [lower, upper) in ascending byte order
	// until fn returns false. A nil upper means no upper bound. key and value
	// are valid only during the call. Scan sees a consistent snapshot.
	Scan(lower, upper []byte, fn func(key, value []byte) bool) error
}

// View is a Reader of a store as it was when the view was taken: batches
// committed later are not seen, so every read through it is of one state.
// A read that takes more than one key (a directory entry and the inode it
// names) takes them through a view, or a change committed between them
// could mix two states (the entry of one, the inode of the next, which a
// rename over the name may have deleted). Close releases it.
type View interface {
	Reader
	Close()
}

// Store is where the metadata state machine keeps its state.
type Store interface {
	Reader
	// View takes a view of the store as it is now. It holds what it sees
	// from reclamation until closed: close it soon.
	View() (View, error)
	// NewBatch starts an empty write batch.
	NewBatch() Batch
	// Sync makes every batch committed so far durable: one synced write
	// covers all earlier unsynced commits (group commit).
	Sync() error
	Close() error
}

// Batch collects writes that Commit applies atomically: all or nothing,
// visible to readers at once when Commit returns. A batch is used by one
// goroutine and cannot be reused after Commit or Close. Set, Delete and
// DeletePrefix copy their arguments: the caller may reuse them at once.
type Batch interface {
	Set(key, value []byte)
	Delete(key []byte)
	// DeletePrefix deletes every key that starts with prefix.
	DeletePrefix(prefix []byte)
	// Len returns the number of operations in the batch.
	Len() int
	// Commit applies the batch; with sync it is durable on return.
	Commit(sync bool) error
	// Close releases the batch without committing it (a no-op after Commit).
	Close()
}

// PrefixEnd returns the smallest key greater than every key that starts
// with prefix, or nil if there is none (prefix is all 0xff).
func PrefixEnd(prefix []byte) []byte {
	end := append([]byte(nil), prefix...)
	for i := len(end) - 1; i >= 0; i-- {
		end[i]++
		if end[i] != 0 {
			return end[:i+1]
		}
	}
	return nil
}

// ErrInUse is wrapped by the error of opening a store that another process
// (or another open in this one) holds.
var ErrInUse = errors.New("store: in use")
