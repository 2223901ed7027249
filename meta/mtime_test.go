package meta

import (
	"context"
	"testing"
	"time"

	"github.com/weft-fs/weft/proto"
)

// TestWriteDoneMtime: WriteDone records the writer's last-write time as the
// mtime, not the server's clock at the time of the call (a close long after
// the last write does not move mtime), unless something later already moved
// mtime; an explicit future mtime does not outlast a write.
func TestWriteDoneMtime(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.addTarget("t1", 1<<30)
	a, err := e.srv.Create(ctx, proto.CreateIn{Parent: proto.RootIno, Name: "f", Mode: 0644})
	if err != nil {
		t.Fatal(err)
	}
	at := func(d time.Duration) int64 { return testEpoch.Add(d).UnixNano() }
	e.clock.Advance(10 * time.Second)
	step := func(what string, mtime int64, want int64) {
		t.Helper()
		got, err := e.srv.WriteDone(ctx, a.Ino, 10, mtime, proto.NoBlocks)
		if err != nil {
			t.Fatal(err)
		}
		if got.Mtime != want || got.Ctime != e.clock.Now().UnixNano() {
			t.Fatalf("%s: mtime %d ctime %d, want mtime %d ctime %d", what, got.Mtime, got.Ctime, want, e.clock.Now().UnixNano())
		}
	}
	step("last write 2 s before the close", at(8*time.Second), at(8*time.Second))
	step("an old client (no mtime): the server's clock", 0, at(10*time.Second))
	step("an earlier write recorded after a later one", at(9*time.Second), at(10*time.Second))
	if _, err := e.srv.SetAttr(ctx, a.Ino, proto.SetAttrIn{Valid: proto.SetMtime, Mtime: at(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Second)
	step("a write after an explicit future mtime", at(11*time.Second), at(11*time.Second))
	if _, err := e.srv.SetAttr(ctx, a.Ino, proto.SetAttrIn{Valid: proto.SetMtime, Mtime: at(-time.Hour)}); err != nil {
		t.Fatal(err)
	}
	step("a write after an explicit past mtime", at(11*time.Second), at(11*time.Second))
}
