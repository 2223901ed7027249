package fuse

import (
	"time"

	"github.com/weft-fs/weft/proto"
)

// kernelDropWait bounds how long an invalidation's acknowledgement waits
// for the kernel to drop its copies. Dropping a name takes the kernel's
// lock of the directory; a call of this mount that holds it may itself
// wait at the metadata leader for another mount, whose acknowledgement may
// wait the same way for this one: without a bound, two mounts changing
// one directory could hold each other up for a whole lease term.
const kernelDropWait = 100 * time.Millisecond

// invalidate drops what the kernel cached of what the metadata leader says
// changed elsewhere (client.OnLeaseInval): the entry's name in its
// directory and the inode's attributes. The leader hears that this is done
// only after it returns, so a change acknowledged to another mount is
// seen by the next system call here; if the kernel does not let go within
// kernelDropWait (a call in progress here holds the directory), it drops
// them when that call ends, and the acknowledgement goes out without
// waiting for it. An inode the kernel does not know needs nothing.
func (f *filesystem) invalidate(ivs []proto.LeaseInval) {
	for _, iv := range ivs {
		if v, ok := f.nodes.Load(iv.Ino); ok {
			v.(*node).stale()
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.dropKernel(ivs)
	}()
	t := time.NewTimer(kernelDropWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		f.log.Debug("fuse: the kernel is slow to drop invalidated entries (a call holds the directory); acknowledging without waiting", "n", len(ivs))
	}
}

func (f *filesystem) dropKernel(ivs []proto.LeaseInval) {
	for _, iv := range ivs {
		v, ok := f.nodes.Load(iv.Ino)
		if !ok {
			continue
		}
		n := v.(*node)
		if iv.Name != "" {
			_ = n.NotifyEntry(iv.Name)
		}
		// Offset -1: attributes only; the page cache goes at the next
		// open (close-to-open, node.Open).
		_ = n.NotifyContent(-1, 0)
	}
}

// track records cn as the node of inode ino, which the kernel's
// notifications must name. go-fuse keeps the node it registered first for
// an inode: a later lookup's new node is dropped for it (fs.rawBridge
// addNewNode), so the one recorded stays unless the kernel forgot it (its
// OnForget removes it) or it never got registered (it lost a race of two
// first lookups: it holds no kernel reference).
//
// It returns the node recorded: cn, or the one the kernel already uses.
func (f *filesystem) track(ino proto.Ino, cn *node) *node {
	v, loaded := f.nodes.LoadOrStore(ino, cn)
	if loaded && v.(*node).Forgotten() {
		f.nodes.Store(ino, cn)
		return cn
	}
	return v.(*node)
}

// OnForget implements fs.NodeOnForgetter: the kernel forgot the inode, so
// nothing of it is cached there any more.
func (n *node) OnForget() {
	n.fsys.nodes.CompareAndDelete(n.ino(), n)
}
