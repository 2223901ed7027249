package meta

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"syscall"
	"testing"

	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/transport"
)

// findAll runs Find to the end with pages of max entries and returns the
// paths found.
func findAll(t *testing.T, e *env, c context.Context, start proto.Ino, f proto.FindFilter, max int) []string {
	t.Helper()
	var paths []string
	var cursor []byte
	for calls := 0; ; calls++ {
		found, next, err := e.srv.Find(c, start, f, cursor, max)
		e.must(err)
		if len(found) > max {
			t.Fatalf("Find returned %d entries, max %d", len(found), max)
		}
		for _, x := range found {
			paths = append(paths, x.Path)
		}
		if next == nil {
			return paths
		}
		if calls > 10000 {
			t.Fatal("Find never ends")
		}
		cursor = next
	}
}

func TestFind(t *testing.T) {
	e := newEnv(t)
	e.addTarget("t1", 1<<30)
	e.addTarget("t2", 1<<30)
	mk := func(parent proto.Ino, name string) proto.Ino {
		d, err := e.srv.Mkdir(ctx, parent, name, 0755, 0, 0)
		e.must(err)
		return d.Ino
	}
	file := func(parent proto.Ino, name string, uid uint32) proto.Attr {
		a, err := e.srv.Create(ctx, proto.CreateIn{Parent: parent, Name: name, Mode: 0644, Uid: uid})
		e.must(err)
		return a
	}
	a := mk(proto.RootIno, "a")
	b := mk(a, "b")
	secret := mk(proto.RootIno, "secret")
	_, err := e.srv.SetAttr(ctx, secret, proto.SetAttrIn{Valid: proto.SetMode, Mode: 0700})
	e.must(err)
	for i := range 30 {
		file(b, fmt.Sprintf("f%02d.h5", i), 1000)
	}
	file(a, "g.txt", 0)
	file(secret, "s.h5", 0)
	_, err = e.srv.Symlink(ctx, a, "link", "g.txt", 0, 0)
	e.must(err)

	all := findAll(t, e, ctx, proto.RootIno, proto.FindFilter{MaxDepth: -1}, 7)
	if len(all) != 1+3+30+1+1+1 || all[0] != "." || !slices.Contains(all, "a/b/f29.h5") || !slices.Contains(all, "secret/s.h5") {
		t.Fatalf("find / (root, pages of 7): %d paths %v", len(all), all)
	}
	uid := uint32(1000)
	for _, tc := range []struct {
		name string
		f    proto.FindFilter
		want int
	}{
		{"name", proto.FindFilter{Name: "*.h5", MaxDepth: -1}, 31},
		{"type d", proto.FindFilter{Type: 'd', MaxDepth: -1}, 4},
		{"type l", proto.FindFilter{Type: 'l', MaxDepth: -1}, 1},
		{"uid", proto.FindFilter{Uid: &uid, MaxDepth: -1}, 30},
		{"depth 1", proto.FindFilter{MaxDepth: 1}, 3},
		{"stripe count 2", proto.FindFilter{StripeCount: proto.Cmp{Op: '=', Value: 2}, MaxDepth: -1}, 32},
		{"stripe count < 2", proto.FindFilter{StripeCount: proto.Cmp{Op: '<', Value: 2}, MaxDepth: -1}, 0},
		{"size = 0, files", proto.FindFilter{Type: 'f', Size: proto.Cmp{Op: '=', Value: 0}, MaxDepth: -1}, 32},
	} {
		got := findAll(t, e, ctx, proto.RootIno, tc.f, 1000)
		if len(got) != tc.want {
			t.Errorf("%s: %d found %v, want %d", tc.name, len(got), got, tc.want)
		}
	}
	// A target filter finds the files with a stripe there: every file is
	// striped over both targets, none over a third.
	for id, want := range map[proto.TargetID]int{1: 32, 2: 32, 3: 0} {
		if got := findAll(t, e, ctx, proto.RootIno, proto.FindFilter{Target: &id, MaxDepth: -1}, 1000); len(got) != want {
			t.Errorf("on target %d: %d files, want %d", id, len(got), want)
		}
	}

	// A user cannot see into a directory it may not search, and cannot
	// forge a cursor to get there.
	user := transport.WithPeer(proto.WithCred(ctx, proto.Cred{Uid: 1000, Gid: 1000}), transport.Peer{Role: transport.RoleClient, Name: "c"})
	got := findAll(t, e, user, proto.RootIno, proto.FindFilter{MaxDepth: -1}, 1000)
	if slices.Contains(got, "secret/s.h5") || !slices.Contains(got, "secret") || !slices.Contains(got, "a/b/f00.h5") {
		t.Fatalf("find as uid 1000: %v", got)
	}
	_, cur, err := e.srv.Find(ctx, proto.RootIno, proto.FindFilter{MaxDepth: -1}, nil, 1)
	e.must(err)
	cur[5] ^= 1
	if _, _, err := e.srv.Find(user, proto.RootIno, proto.FindFilter{MaxDepth: -1}, cur, 10); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("forged cursor: %v, want EINVAL", err)
	}
	if _, _, err := e.srv.Find(ctx, proto.RootIno, proto.FindFilter{Name: "[", MaxDepth: -1}, nil, 10); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("bad pattern: %v, want EINVAL", err)
	}
}
