package fuse

import "github.com/weft-fs/weft/proto"

// invalidate drops what the kernel cached of what the metadata leader says
// changed elsewhere (client.OnLeaseInval): the entry's name in its
// directory and the inode's attributes. The leader hears that this is done
// only after it returns, so a change acknowledged to another mount is
// seen by the next system call here. An inode the kernel does not know
// needs nothing.
func (f *filesystem) invalidate(ivs []proto.LeaseInval) {
	for _, iv := range ivs {
		v, ok := f.nodes.Load(iv.Ino)
		if !ok {
			continue
		}
		n := v.(*node)
		n.stale()
		if iv.Name != "" {
			_ = n.NotifyEntry(iv.Name)
		}
		// Offset -1: attributes only; the page cache goes at the next
		// open (close-to-open, node.Open).
		_ = n.NotifyContent(-1, 0)
	}
}

// OnForget implements fs.NodeOnForgetter: the kernel forgot the inode, so
// nothing of it is cached there any more.
func (n *node) OnForget() {
	n.fsys.nodes.CompareAndDelete(n.ino(), n)
}
