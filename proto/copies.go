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
