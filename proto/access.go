package proto

import "context"

// Access is what a caller wants to do with a file's data: a mask of
// AccessRead and AccessWrite. Open, CreateOpen and Capability take it (the
// open(2) access mode, with O_TRUNC counting as write), the metadata server
// checks it against the inode's mode bits and grants it in a capability,
// and storage servers check the capability against each request.
type Access uint8

const (
	AccessRead  Access = 1 << iota // read the file's objects
	AccessWrite                    // write, truncate and sync them
	// AccessExec asks to read a file in order to execute it (execve(2)
	// opens the binary so): it needs execute permission instead of read
	// permission, and grants read (Grants).
	AccessExec
)

// AccessReadWrite is both data rights; a capability grants no others.
const AccessReadWrite = AccessRead | AccessWrite

// Has reports whether a grants every right of want.
func (a Access) Has(want Access) bool { return a&want == want }

// Grants is the data rights that asking for a grants: exec becomes read.
func (a Access) Grants() Access {
	g := a & AccessReadWrite
	if a&AccessExec != 0 {
		g |= AccessRead
	}
	return g
}

// String is like "r", "w", "rw", "x", "rwx"; "-" for none.
func (a Access) String() string {
	var s string
	for _, b := range []struct {
		bit Access
		c   string
	}{{AccessRead, "r"}, {AccessWrite, "w"}, {AccessExec, "x"}} {
		if a&b.bit != 0 {
			s += b.c
		}
	}
	if s == "" {
		return "-"
	}
	return s
}

type capKey struct{}

// WithCapability returns ctx carrying cap, the signed capability (package
// capability) a storage client attaches to the Read, Write, Truncate and
// Sync requests it sends with ctx. The client sets it once per file
// operation, so it reaches every stripe request the operation fans out to.
func WithCapability(ctx context.Context, cap []byte) context.Context {
	return context.WithValue(ctx, capKey{}, cap)
}

// CapabilityFrom returns the capability ctx carries, or nil.
func CapabilityFrom(ctx context.Context) []byte {
	c, _ := ctx.Value(capKey{}).([]byte)
	return c
}

type uncachedKey struct{}

// WithUncached returns ctx marking the reads made with it as reads of a
// handle its application opened with O_DIRECT: it asked for no page
// cache between it and the disk, so a storage client that reads an
// object's file itself (short-circuit local reads) bypasses this host's
// page cache for them too, as the kernel would for a local file.
func WithUncached(ctx context.Context) context.Context {
	return context.WithValue(ctx, uncachedKey{}, true)
}

// UncachedFrom reports whether ctx was marked by WithUncached.
func UncachedFrom(ctx context.Context) bool {
	u, _ := ctx.Value(uncachedKey{}).(bool)
	return u
}
