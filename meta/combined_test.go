package meta

import (
	"errors"
	"slices"
	"sync"
	"syscall"
	"testing"

	"github.com/weft-fs/weft/layout"
	"github.com/weft-fs/weft/proto"
)

// TestCreateOpen checks the combined create-and-open: the handle is counted
// (so an unlink keeps the file), the parent's attributes come back changed,
// and failures and existing files leave no stray count.
func TestCreateOpen(t *testing.T) {
	e := newEnv(t)
	e.addTarget("t1", 1<<30)
	d, err := e.srv.Mkdir(ctx, proto.RootIno, "d", 0755, 0, 0)
	e.must(err)
	e.clock.Advance(1)

	const rw = proto.AccessReadWrite
	tests := []struct {
		name      string
		in        proto.CreateIn
		open      proto.Access
		wantErr   error
		wantOpens int // on the resulting inode
	}{
		{"new, open", proto.CreateIn{Parent: d.Ino, Name: "f", Mode: 0100644, Exclusive: true}, rw, nil, 1},
		{"existing, exclusive", proto.CreateIn{Parent: d.Ino, Name: "f", Mode: 0100644, Exclusive: true}, rw, syscall.EEXIST, 1},
		{"existing, not exclusive", proto.CreateIn{Parent: d.Ino, Name: "f", Mode: 0100644}, rw, nil, 2},
		{"new, no open", proto.CreateIn{Parent: d.Ino, Name: "g", Mode: 0100644}, 0, nil, 0},
		{"fifo is never opened", proto.CreateIn{Parent: d.Ino, Name: "p", Mode: syscall.S_IFIFO | 0644}, rw, nil, 0},
		{"bad parent", proto.CreateIn{Parent: 9999, Name: "x", Mode: 0100644}, rw, syscall.ENOENT, -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, p, _, err := e.srv.CreateOpen(ctx, tc.in, tc.open)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err %v, want %v", err, tc.wantErr)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				if got := e.srv.OpenCount(a.Ino); got != tc.wantOpens {
					t.Fatalf("open count %d, want %d", got, tc.wantOpens)
				}
				if p.Ino != d.Ino || !p.IsDir() {
					t.Fatalf("parent attrs %+v for child %+v", p, a)
				}
				got, err := e.srv.GetAttr(ctx, d.Ino)
				e.must(err)
				if got.Mtime != p.Mtime || got.Ctime != p.Ctime || got.Nlink != p.Nlink {
					t.Fatalf("parent attrs %+v, server has %+v", p, got)
				}
			}
			// No count is left on inode numbers that were not used.
			e.srv.mu.Lock()
			for ino, c := range e.srv.opens {
				if _, err := e.srv.readInode(ino); err != nil {
					t.Errorf("stray open count %d on inode %d: %v", c, ino, err)
				}
			}
			e.srv.mu.Unlock()
			e.clock.Advance(1)
		})
	}
	checkInvariants(t, e.st)
}

// TestUnlinkReclaimsInline: removing the last link of a file nobody has
// open deletes it in the same command (no Reclaim command); a file open
// somewhere stays an orphan until its last release.
func TestUnlinkReclaimsInline(t *testing.T) {
	var mu sync.Mutex
	var ops []Op
	e := newEnv(t, func(o *Options) {
		o.applyHook = func(c *Command) {
			mu.Lock()
			ops = append(ops, c.Op)
			mu.Unlock()
		}
	})
	e.addTarget("t1", 1<<30)
	e.addTarget("t2", 1<<30)
	d, err := e.srv.Mkdir(ctx, proto.RootIno, "d", 0755, 0, 0)
	e.must(err)
	_, err = e.srv.SetLayout(ctx, d.Ino, layout.Layout{StripeSize: 1 << 20, StripeCount: 2})
	e.must(err)

	f, err := e.srv.Create(ctx, proto.CreateIn{Parent: d.Ino, Name: "f", Mode: 0100644})
	e.must(err)
	e.clock.Advance(5)
	p, err := e.srv.UnlinkAt(ctx, d.Ino, "f")
	e.must(err)
	if p.Ino != d.Ino || p.Mtime != e.clock.Now().UnixNano() {
		t.Fatalf("parent after unlink: %+v", p)
	}
	if _, err := e.srv.GetAttr(ctx, f.Ino); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("unlinked file still there: %v", err)
	}
	if orph, _ := e.srv.Orphans(); len(orph) != 0 {
		t.Fatalf("orphans %v", orph)
	}
	mu.Lock()
	if slices.Contains(ops, OpReclaim) {
		t.Fatalf("a reclaim command was used: %v", ops)
	}
	mu.Unlock()
	waitFor(t, "objects removed", func() bool {
		e.storage.mu.Lock()
		defer e.storage.mu.Unlock()
		return len(e.storage.removed) == 2
	})

	// Open elsewhere: kept as an orphan, reclaimed at the last release.
	g, _, _, err := e.srv.CreateOpen(ctx, proto.CreateIn{Parent: d.Ino, Name: "g", Mode: 0100644}, proto.AccessReadWrite)
	e.must(err)
	e.must(e.srv.Unlink(ctx, d.Ino, "g"))
	if _, err := e.srv.GetAttr(ctx, g.Ino); err != nil {
		t.Fatalf("open file removed at unlink: %v", err)
	}
	if orph, _ := e.srv.Orphans(); !slices.Equal(orph, []proto.Ino{g.Ino}) {
		t.Fatalf("orphans %v, want [%d]", orph, g.Ino)
	}
	e.must(e.srv.ReleaseMany(ctx, []proto.Ino{g.Ino}))
	waitFor(t, "orphan reclaimed", func() bool { o, _ := e.srv.Orphans(); return len(o) == 0 })

	// A file with another link is only unlinked.
	h, err := e.srv.Create(ctx, proto.CreateIn{Parent: d.Ino, Name: "h", Mode: 0100644})
	e.must(err)
	_, err = e.srv.Link(ctx, h.Ino, d.Ino, "h2")
	e.must(err)
	e.must(e.srv.Unlink(ctx, d.Ino, "h"))
	if a, err := e.srv.GetAttr(ctx, h.Ino); err != nil || a.Nlink != 1 {
		t.Fatalf("linked file after unlink: %+v %v", a, err)
	}
	e.must(e.srv.Unlink(ctx, d.Ino, "h2"))
	if _, err := e.srv.GetAttr(ctx, h.Ino); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("file after last unlink: %v", err)
	}
	if len(e.srv.reclaiming) != 0 {
		t.Fatalf("reclaiming left %v", e.srv.reclaiming)
	}
	checkInvariants(t, e.st)
}
