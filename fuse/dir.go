package fuse

import (
	"context"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	gofuse "github.com/hanwen/go-fuse/v2/fuse"

	"github.com/weft-fs/weft/proto"
)

// dirHandle streams a directory listing from the metadata server in batches,
// continuing by name, so a directory of any size lists with bounded memory.
// The attributes that come with each entry answer READDIRPLUS without more
// round trips.
type dirHandle struct {
	n *node

	mu    sync.Mutex
	batch []proto.DirEntry
	pos   int
	after string // name of the last entry fetched
	done  bool
	off   uint64         // entries returned so far, "." and ".." included
	last  proto.DirEntry // the entry Readdirent returned last
}

// OpendirHandle implements fs.NodeOpendirHandler.
func (n *node) OpendirHandle(context.Context, uint32) (fs.FileHandle, uint32, syscall.Errno) {
	return &dirHandle{n: n}, 0, 0
}

// Readdirent implements fs.FileReaddirenter.
func (d *dirHandle) Readdirent(ctx context.Context) (*gofuse.DirEntry, syscall.Errno) {
	ctx = d.n.fsys.creds.with(ctx)
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.next(ctx)
}

func (d *dirHandle) next(ctx context.Context) (*gofuse.DirEntry, syscall.Errno) {
	switch d.off {
	case 0:
		d.off++
		return &gofuse.DirEntry{Name: ".", Ino: uint64(d.n.ino()), Mode: syscall.S_IFDIR, Off: d.off}, 0
	case 1:
		d.off++
		ino := uint64(proto.RootIno)
		if _, p := d.n.Parent(); p != nil {
			ino = p.StableAttr().Ino
		}
		return &gofuse.DirEntry{Name: "..", Ino: ino, Mode: syscall.S_IFDIR, Off: d.off}, 0
	}
	if d.pos >= len(d.batch) {
		if d.done {
			return nil, 0
		}
		ents, err := d.n.fsys.c.ReadDir(ctx, d.n.ino(), d.after, 0)
		if err != nil {
			return nil, d.n.fsys.errno("readdir", err)
		}
		if len(ents) == 0 {
			d.done = true
			d.batch = nil
			return nil, 0
		}
		d.batch, d.pos = ents, 0
		d.after = ents[len(ents)-1].Name
	}
	e := d.batch[d.pos]
	d.pos++
	d.off++
	d.last = e
	return &gofuse.DirEntry{Name: e.Name, Ino: uint64(e.Attr.Ino), Mode: e.Attr.Mode, Off: d.off}, 0
}

// Lookup implements fs.FileLookuper: READDIRPLUS asks for the entry just
// returned, whose attributes came with the listing.
func (d *dirHandle) Lookup(ctx context.Context, name string, out *gofuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx = d.n.fsys.creds.with(ctx)
	d.mu.Lock()
	e := d.last
	d.mu.Unlock()
	if e.Name != name {
		return d.n.Lookup(ctx, name, out)
	}
	return d.n.child(ctx, e.Attr, out), 0
}

// Seekdir implements fs.FileSeekdirer: offsets count entries, so seeking
// restarts the listing and skips that many.
func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	ctx = d.n.fsys.creds.with(ctx)
	d.mu.Lock()
	defer d.mu.Unlock()
	if off == d.off {
		return 0
	}
	d.batch, d.pos, d.after, d.done, d.off = nil, 0, "", false, 0
	for d.off < off {
		e, errno := d.next(ctx)
		if errno != 0 {
			return errno
		}
		if e == nil {
			break
		}
	}
	return 0
}

// Fsyncdir implements fs.FileFsyncdirer: namespace changes are durable when
// the metadata server answers them.
func (d *dirHandle) Fsyncdir(context.Context, uint32) syscall.Errno { return 0 }
