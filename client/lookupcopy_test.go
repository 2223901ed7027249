package client

import (
	"syscall"
	"testing"

	"github.com/weft-fs/weft/proto"
)

// TestCopyDemand: lookups ask for copies once most recent lookups of small
// readable files were followed by an open for reading, and stop when a
// walk only looks (a stat of each file) takes over.
func TestCopyDemand(t *testing.T) {
	var d copyDemand
	small := func(ino proto.Ino) *proto.Attr {
		return &proto.Attr{Ino: ino, Mode: syscall.S_IFREG | 0o644, Size: 3901}
	}
	if d.want() {
		t.Fatal("copies wanted before any lookup")
	}
	// Lookups that find no candidate count for nothing.
	for i := range 10 {
		d.looked(&proto.Attr{Ino: proto.Ino(100 + i), Mode: syscall.S_IFREG | 0o600, Size: 10})
		d.looked(&proto.Attr{Ino: proto.Ino(200 + i), Mode: syscall.S_IFREG | 0o644, Size: proto.MaxFileCopy + 1})
		d.looked(&proto.Attr{Ino: proto.Ino(300 + i), Mode: syscall.S_IFDIR | 0o755})
		d.opened(proto.Ino(100 + i))
	}
	if d.want() {
		t.Fatal("copies wanted after lookups of files no copy could serve")
	}
	// A read of each file looked up (mdtest-hard's read, a training set).
	for i := range demandMin {
		d.looked(small(proto.Ino(1000 + i)))
		d.opened(proto.Ino(1000 + i))
	}
	if !d.want() {
		t.Fatalf("copies not wanted after %d lookups each followed by an open", demandMin)
	}
	// A stat-only walk: lookups nobody opens after.
	n := 0
	for ; d.want(); n++ {
		if n > 2*demandWindow {
			t.Fatalf("copies still wanted after %d lookups without an open", n)
		}
		d.looked(small(proto.Ino(2000 + n)))
	}
	for i := range 10 {
		d.looked(small(proto.Ino(3000 + i)))
	}
	// An open of a file whose open was counted already, or twice, counts
	// once.
	d.opened(proto.Ino(1000))
	d.opened(proto.Ino(2000))
	d.opened(proto.Ino(2000))
	if d.want() {
		t.Fatal("repeated opens of one looked-up file turned copies back on")
	}
}
