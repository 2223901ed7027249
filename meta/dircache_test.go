package meta

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"

	"github.com/weft-fs/weft/meta/metarpc"
	"github.com/weft-fs/weft/meta/store"
	"github.com/weft-fs/weft/proto"
)

// TestDirCacheMatchesStore: the state machine's cache of directory inodes
// holds what the store holds, after every command of a random sequence of
// mkdirs, rmdirs, renames, creates, unlinks and chmods among a few
// directories, many of which fail (a name taken, a directory not empty, a
// rename into its own subtree) after changing inodes in their own
// transaction (over a quota): a failed command leaves the cache as it
// was.
func TestDirCacheMatchesStore(t *testing.T) {
	st := store.NewMem()
	sm, err := openStateMachine(st)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sm.apply(&Command{Op: OpInit, Now: 1, Mode: 0755, Text: "fsid"}); err != nil {
		t.Fatal(err)
	}
	// User 1000 may make 40 inodes: its creates and mkdirs beyond fail
	// with EDQUOT after they changed their parent in their transaction.
	if _, err := sm.apply(&Command{Op: OpSetQuota, Now: 1, Quota: &QuotaSpec{Kind: uint8(metarpc.QuotaUser), ID: 1000, Inodes: 40}}); err != nil {
		t.Fatal(err)
	}
	user := &proto.Cred{Uid: 1000, Gid: 1000}
	rng := rand.New(rand.NewPCG(1, 2))
	dirs := []proto.Ino{proto.RootIno}
	names := []string{"a", "b", "c", "d"}
	cached := 0
	for step := range 3000 {
		parent := dirs[rng.IntN(len(dirs))]
		name := names[rng.IntN(len(names))]
		c := &Command{Now: int64(step + 2), Parent: parent, Name: name}
		if rng.IntN(2) == 0 {
			c.Cred, c.Uid, c.Gid = user, user.Uid, user.Gid
		}
		switch rng.IntN(6) {
		case 0, 1:
			c.Op, c.Ino, c.Mode = OpMkdir, proto.Ino(sm.nextIno), 0777
		case 2:
			c.Op = OpRmdir
		case 3:
			c.Op, c.NewParent, c.NewName = OpRename, dirs[rng.IntN(len(dirs))], names[rng.IntN(len(names))]
		case 4:
			c.Op, c.Ino, c.Mode = OpCreate, proto.Ino(sm.nextIno), syscall.S_IFIFO|0644
			if rng.IntN(2) == 0 {
				c.Op = OpUnlink
			}
		case 5:
			c.Op, c.Ino = OpSetAttr, dirs[rng.IntN(len(dirs))]
			c.SetAttr = proto.SetAttrIn{Valid: proto.SetMode, Mode: 0o700 | uint32(rng.IntN(0o100))*0o11}
		}
		res, err := sm.apply(c)
		if err == nil && c.Op == OpMkdir {
			dirs = append(dirs, res.attr.Ino)
		}
		for ino, n := range sm.dirs {
			stored, err := loadInode(st, ino)
			if err != nil {
				t.Fatalf("step %d (%s %q): cached directory %d: %v", step, c.Op, name, ino, err)
			}
			if !bytes.Equal(n.encode(), stored.encode()) {
				t.Fatalf("step %d (%s %q): cached directory %d differs from the store:\n%+v\n%+v", step, c.Op, name, ino, n, stored)
			}
		}
		cached = max(cached, len(sm.dirs))
	}
	if cached < 3 {
		t.Fatalf("at most %d directories were cached: the test tested little", cached)
	}
	t.Log(fmt.Sprintf("up to %d directories cached", cached))
}
