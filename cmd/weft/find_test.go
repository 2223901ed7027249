package main

import (
	"slices"
	"testing"
	"time"

	"github.com/weft-fs/weft/proto"
)

func TestFindFilter(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	o := findOptions{Name: "*.h5", Type: "f", Size: "+1M", Mtime: "-2", Uid: 7, Gid: -1, StripeCount: "4", Target: 3, MaxDepth: -1}
	f, err := o.filter(now)
	if err != nil {
		t.Fatal(err)
	}
	if f.Name != "*.h5" || f.Type != 'f' || f.Size != (proto.Cmp{Op: '>', Value: 1 << 20}) ||
		f.Mtime != (proto.Cmp{Op: '>', Value: now.Add(-48 * time.Hour).UnixNano()}) || *f.Uid != 7 || f.Gid != nil ||
		f.StripeCount != (proto.Cmp{Op: '=', Value: 4}) || *f.Target != 3 || f.MaxDepth != -1 {
		t.Fatalf("filter %+v", f)
	}
	if f, _ := (&findOptions{Mtime: "+1", Uid: -1, Gid: -1, Target: -1}).filter(now); f.Mtime != (proto.Cmp{Op: '<', Value: now.Add(-24 * time.Hour).UnixNano()}) {
		t.Fatalf("--mtime +1: %+v", f.Mtime)
	}
	for _, bad := range []findOptions{{Type: "x"}, {Size: "+lots"}, {Mtime: "3"}, {StripeCount: "-x"}} {
		bad.Uid, bad.Gid, bad.Target = -1, -1, -1
		if _, err := bad.filter(now); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

func TestFindArgs(t *testing.T) {
	got := findArgs([]string{"find", "/mnt", "-name", "*.h5", "-type", "f", "--size", "+1M", "-x"})
	want := []string{"find", "/mnt", "--name", "*.h5", "--type", "f", "--size", "+1M", "-x"}
	if !slices.Equal(got, want) {
		t.Fatalf("findArgs = %v", got)
	}
	if other := []string{"df", "-name"}; !slices.Equal(findArgs(other), other) {
		t.Fatal("findArgs changed another command's arguments")
	}
}
