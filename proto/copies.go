package proto

import "context"

// MaxFileCopy is the largest file whose bytes a metadata service keeps a
// copy of (FileCopies): one page, which holds mdtest-hard's 3,901-byte
// files and most configuration and marker files. The copy rides in the
// replicated log entry of the file's WriteDone, on every metadata member.
const MaxFileCopy = 4096

// FileCopies is offered by a metadata service that keeps, beside a small
// file's objects, a copy of its bytes, so that an open for reading can
// answer them and the reader needs no storage server (Lustre's
// Data-on-MDT, kept as a copy: the objects stay the file's data, and every
// tool that reads or repairs objects works as before).
//
// The copy is only ever the whole content of a file, never older than its
// recorded size says: the service takes one only from the WriteDone that
// first records a new file's bytes (nothing recorded or truncated before,
// no other session holding it open for writing), and drops it whenever
// anything else may change the bytes: any later WriteDone, a truncate, an
// open for writing.
type FileCopies interface {
	// OpenCopy is MetaService.Open that also returns the file's copy
	// (nil: none) when want does not include writing. The copy's length
	// is the returned attributes' size.
	OpenCopy(ctx context.Context, ino Ino, want Access) (a Attr, cap []byte, data []byte, err error)
	// WriteDoneCopy is MetaService.WriteDone with data, the file's whole
	// content (len(data) == end, at most MaxFileCopy), offered as its
	// copy. The service keeps it only where the rules above allow, and
	// otherwise records the write as WriteDone does.
	WriteDoneCopy(ctx context.Context, ino Ino, end uint64, mtime int64, blocks uint64, data []byte) (Attr, error)
}

// LookupCopier is a FileCopies service whose lookup can answer a small
// file's copy with its attributes, so that a client reading a file it has
// not seen before needs one round trip, not a lookup and then an open
// (the "mdtest-hard-read is one round trip"; docs/caching.md,
// "Small files from the lookup"). The client keeps the copy in its lease
// cache and opens the file from there (a read-only open, pinned as any
// open made from the cache).
//
// The copy is answered only to a session that polls for lease
// invalidations and was granted a lease on the file, and only for a
// regular file every class may read (PinMode): whoever on the client
// asks for it later, the service would let them read it. Openable says
// the lease was granted with no invalidation of the file already queued
// for the session (no change of it since the lookup read it, no unlink
// reclaiming it meanwhile): the client may open the file from the copy at
// once, without waiting for a poll to confirm the attributes.
type LookupCopier interface {
	LookupCopy(ctx context.Context, parent Ino, name string) (a Attr, data []byte, openable bool, err error)
}

// FileCopy is a file's attributes with its copy (CopyPrefetcher).
type FileCopy struct {
	Attr Attr
	Data []byte
}

// MaxCopiesWindow bounds how many inode numbers one CopiesAfter looks at,
// and MaxCopiesAfter how many copies it answers.
const (
	MaxCopiesWindow = 512
	MaxCopiesAfter  = 128
)

// CopyPrefetcher is a LookupCopier service that answers, in one round
// trip, the copies of the small files numbered just after one: files made
// one after another get consecutive numbers, and are often read back in
// that order (a dataset of small samples, mdtest-hard's files, a source
// tree), so a client reading one of them may bring its successors' bytes
// into its lease cache before it opens them, and open them from there
// (docs/caching.md, "Small files read ahead").
//
// It answers only what the caller's session could already open from its
// cache but for the bytes: files it holds a lease on with nothing of them
// to invalidate, regular files every class may read (PinMode), with a copy
// of their whole content: what an open of the file would answer any
// caller. A file the session holds no lease on is not answered, so a mount
// is brought only files it looked up, listed or made, not its neighbours'
// in directories it never went through.
type CopyPrefetcher interface {
	// CopiesAfter answers the copies of such files numbered ino+1 to
	// through, in ascending order, at most MaxCopiesAfter of them: through
	// is ino+window (window at most MaxCopiesWindow), or less if the
	// answer was cut short (by count or bytes), so that the caller asks
	// again after through.
	CopiesAfter(ctx context.Context, ino Ino, window uint32) (copies []FileCopy, through Ino, err error)
}
