package meta

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
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
	st, sm, user := newCacheTestStateMachine(t, 40)
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
		checkCachedInodes(t, st, sm.dirs, fmt.Sprintf("step %d (%s %q): cached directory", step, c.Op, name))
		cached = max(cached, len(sm.dirs))
	}
	if cached < 3 {
		t.Fatalf("at most %d directories were cached: the test tested little", cached)
	}
	t.Log(fmt.Sprintf("up to %d directories cached", cached))
}

// TestFileAndNameCachesMatchStore: the state machine's caches of other
// inodes (files) and of directory entries (names, including names known
// absent) hold what the store holds, after every command of a random
// sequence of creates, hard links, unlinks, renames over existing files
// and chmods of files in two directories, many of which fail (a name
// taken or missing, over a quota after changing the parent in their own
// transaction). A stale entry would show as a lookup or an unlink that
// sees a removed name, or a link count the store does not have.
func TestFileAndNameCachesMatchStore(t *testing.T) {
	st, sm, user := newCacheTestStateMachine(t, 20)
	res, err := sm.apply(&Command{Op: OpMkdir, Now: 1, Parent: proto.RootIno, Name: "d", Ino: proto.Ino(sm.nextIno), Mode: 0777})
	if err != nil {
		t.Fatal(err)
	}
	dirs := []proto.Ino{proto.RootIno, res.attr.Ino}
	rng := rand.New(rand.NewPCG(3, 4))
	names := []string{"a", "b", "c", "d2", "e"}
	var files []proto.Ino
	maxFiles, maxNames, absent := 0, 0, 0
	for step := range 4000 {
		c := &Command{Now: int64(step + 2), Parent: dirs[rng.IntN(2)], Name: names[rng.IntN(len(names))]}
		if rng.IntN(2) == 0 {
			c.Cred, c.Uid, c.Gid = user, user.Uid, user.Gid
		}
		switch rng.IntN(6) {
		case 0, 1:
			c.Op, c.Ino, c.Mode = OpCreate, proto.Ino(sm.nextIno), syscall.S_IFIFO|0666
		case 2:
			c.Op = OpUnlink
		case 3:
			c.Op, c.NewParent, c.NewName = OpRename, dirs[rng.IntN(2)], names[rng.IntN(len(names))]
		case 4:
			if len(files) == 0 {
				continue
			}
			c.Op, c.Ino, c.NewParent, c.NewName = OpLink, files[rng.IntN(len(files))], dirs[rng.IntN(2)], names[rng.IntN(len(names))]
		case 5:
			if len(files) == 0 {
				continue
			}
			c.Op, c.Ino = OpSetAttr, files[rng.IntN(len(files))]
			c.SetAttr = proto.SetAttrIn{Valid: proto.SetMode, Mode: 0o600 | uint32(rng.IntN(0o100))}
		}
		res, err := sm.apply(c)
		if err == nil && c.Op == OpCreate {
			files = append(files, res.attr.Ino)
		}
		checkCachedInodes(t, st, sm.files, fmt.Sprintf("step %d (%s %q): cached file", step, c.Op, c.Name))
		gone := 0
		for k, de := range sm.names {
			stored, ok, err := loadDirent(st, k.parent, k.name)
			if err != nil {
				t.Fatal(err)
			}
			if ok != (de.Ino != 0) || ok && stored != de {
				t.Fatalf("step %d (%s %q): cached entry %d/%q is %+v, the store has %+v (present %v)", step, c.Op, c.Name, k.parent, k.name, de, stored, ok)
			}
			if !ok {
				gone++
			}
		}
		maxFiles, maxNames, absent = max(maxFiles, len(sm.files)), max(maxNames, len(sm.names)), max(absent, gone)
	}
	if maxFiles < 3 || maxNames < 5 || absent < 2 {
		t.Fatalf("at most %d files, %d names, %d absent names were cached: the test tested little", maxFiles, maxNames, absent)
	}
	t.Logf("up to %d files, %d names (%d absent) cached", maxFiles, maxNames, absent)
}

// newCacheTestStateMachine returns an initialized state machine on a
// memory store, and user 1000, who may make inodes inodes: its creates
// and mkdirs beyond fail with EDQUOT after they changed their parent in
// their transaction.
func newCacheTestStateMachine(t *testing.T, inodes uint64) (store.Store, *stateMachine, *proto.Cred) {
	t.Helper()
	st := store.NewMem()
	sm := newInitedStateMachine(t, st)
	if _, err := sm.apply(&Command{Op: OpSetQuota, Now: 1, Quota: &QuotaSpec{Kind: uint8(metarpc.QuotaUser), ID: 1000, Inodes: inodes}}); err != nil {
		t.Fatal(err)
	}
	return st, sm, &proto.Cred{Uid: 1000, Gid: 1000}
}

// newInitedStateMachine opens a state machine on st and initializes its
// file system.
func newInitedStateMachine(t *testing.T, st store.Store) *stateMachine {
	t.Helper()
	sm, err := openStateMachine(st)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sm.apply(&Command{Op: OpInit, Now: 1, Mode: 0755, Text: "fsid"}); err != nil {
		t.Fatal(err)
	}
	return sm
}

// checkCachedInodes fails the test (what tells where) if an inode of
// cache is missing from st or differs from what st holds.
func checkCachedInodes(t *testing.T, st store.Store, cache map[proto.Ino]*inode, what string) {
	t.Helper()
	for ino, n := range cache {
		stored, err := loadInode(st, ino)
		if err != nil {
			t.Fatalf("%s %d: %v", what, ino, err)
		}
		if !bytes.Equal(n.encode(), stored.encode()) {
			t.Fatalf("%s %d differs from the store:\n%+v\n%+v", what, ino, n, stored)
		}
	}
}

// keyRecorder is a store whose batches note the keys they write.
type keyRecorder struct {
	store.Store
	keys [][]byte
}

func (r *keyRecorder) NewBatch() store.Batch { return &recordingBatch{r.Store.NewBatch(), r} }

type recordingBatch struct {
	store.Batch
	r *keyRecorder
}

func (b *recordingBatch) Set(k, v []byte) {
	b.r.keys = append(b.r.keys, bytes.Clone(k))
	b.Batch.Set(k, v)
}

func (b *recordingBatch) Delete(k []byte) {
	b.r.keys = append(b.r.keys, bytes.Clone(k))
	b.Batch.Delete(k)
}

// TestUnlinkReclaimedAtOnceWritesNoOrphanRecord: an unlink of a file's
// last link that its proposer found unopened (Command.Inos) deletes the
// inode in its own batch without marking it an orphan first (a set and a
// delete of the orphan record per unlink, on every member); an unlink of a
// file that is open (no Inos) still marks it, and its reclaim removes the
// mark.
func TestUnlinkReclaimedAtOnceWritesNoOrphanRecord(t *testing.T) {
	rec := &keyRecorder{Store: store.NewMem()}
	sm := newInitedStateMachine(t, rec)
	orphanWrites := func() int {
		n := 0
		for _, k := range rec.keys {
			if len(k) > 0 && k[0] == store.PrefixOrphan {
				n++
			}
		}
		return n
	}
	create := func(name string) proto.Ino {
		t.Helper()
		res, err := sm.apply(&Command{Op: OpCreate, Now: 2, Parent: proto.RootIno, Name: name, Ino: proto.Ino(sm.nextIno), Mode: syscall.S_IFIFO | 0644}) // no storage targets: not a regular file
		if err != nil {
			t.Fatal(err)
		}
		return res.attr.Ino
	}

	a := create("a")
	rec.keys = nil
	res, err := sm.apply(&Command{Op: OpUnlink, Now: 3, Parent: proto.RootIno, Name: "a", Inos: []proto.Ino{a}})
	if err != nil || !res.reclaimed {
		t.Fatalf("unlink reclaimed %v, err %v; want reclaimed", res.reclaimed, err)
	}
	if n := orphanWrites(); n != 0 {
		t.Fatalf("an unlink reclaimed at once wrote %d orphan records, want none", n)
	}
	if _, err := loadInode(rec, a); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("inode of the reclaimed file: err %v, want ENOENT", err)
	}

	b := create("b")
	if _, err := sm.apply(&Command{Op: OpUnlink, Now: 4, Parent: proto.RootIno, Name: "b"}); err != nil {
		t.Fatal(err)
	}
	if v, err := rec.Get(store.OrphanKey(uint64(b))); err != nil || v == nil {
		t.Fatalf("an open file's unlink left no orphan record: %v", err)
	}
	if _, err := sm.apply(&Command{Op: OpReclaim, Now: 5, Inos: []proto.Ino{b}}); err != nil {
		t.Fatal(err)
	}
	if _, err := rec.Get(store.OrphanKey(uint64(b))); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the orphan record after its reclaim: err %v, want not found", err)
	}
}

// TestCachedInodeIsACommittedCopy: what the server's read path takes from
// the state machine's caches (cachedInode, Server.readInode; cachedLookup,
// Server.Lookup) is what the store holds, and a copy: a reader that changes
// what it got, on another goroutine while commands apply (run under -race),
// changes no cache. Fails if cachedInode handed out the cached inode itself
// (the reader's changes would reach the cache, which then differs from the
// store), or read the caches unguarded (-race).
func TestCachedInodeIsACommittedCopy(t *testing.T) {
	st, sm, _ := newCacheTestStateMachine(t, 0)
	var top atomic.Uint64 // the highest inode number handed out so far
	top.Store(uint64(proto.RootIno))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			for ino := proto.RootIno; ino <= proto.Ino(top.Load()); ino++ {
				if n := sm.cachedInode(ino); n != nil {
					n.Mode, n.Size, n.Nlink = 0, 1<<40, 99
				}
			}
			if p, n, _ := sm.cachedLookup(proto.RootIno, "f1"); n != nil {
				p.Mode, n.Mode = 0, 0
			}
		}
	})
	defer func() { close(stop); wg.Wait() }()
	rng := rand.New(rand.NewPCG(5, 6))
	var files []proto.Ino
	hits, lookups := 0, 0
	for step := range 2000 {
		c := &Command{Now: int64(step + 2), Parent: proto.RootIno, Name: fmt.Sprintf("f%d", rng.IntN(40))}
		switch {
		case rng.IntN(3) == 0:
			c.Op = OpUnlink
		case rng.IntN(2) == 0 && len(files) > 0:
			c.Op, c.Ino = OpSetAttr, files[rng.IntN(len(files))]
			c.SetAttr = proto.SetAttrIn{Valid: proto.SetMode, Mode: 0o600 | uint32(rng.IntN(0o100))}
		default:
			c.Op, c.Ino, c.Mode = OpCreate, proto.Ino(sm.nextIno), syscall.S_IFIFO|0666
			top.Store(sm.nextIno)
		}
		res, err := sm.apply(c)
		if err == nil && c.Op == OpCreate {
			files = append(files, res.attr.Ino)
		}
		for _, ino := range append([]proto.Ino{proto.RootIno}, files...) {
			n := sm.cachedInode(ino)
			if n == nil {
				continue
			}
			hits++
			stored, err := loadInode(st, ino)
			if err != nil {
				t.Fatalf("step %d: inode %d cached but not stored: %v", step, ino, err)
			}
			if !bytes.Equal(n.encode(), stored.encode()) {
				t.Fatalf("step %d: cached inode %d differs from the store:\n%+v\n%+v", step, ino, n, stored)
			}
		}
		for i := range 40 {
			name := fmt.Sprintf("f%d", i)
			p, n, ok := sm.cachedLookup(proto.RootIno, name)
			if !ok {
				continue
			}
			found := n != nil
			lookups++
			de, stored, err := loadDirent(st, proto.RootIno, name)
			if err != nil {
				t.Fatal(err)
			}
			if found != stored || found && n.Ino != de.Ino {
				t.Fatalf("step %d: cached lookup of %q: found %v (%+v), the store: %v (%+v)", step, name, found, n, stored, de)
			}
			root, err := loadInode(st, proto.RootIno)
			if err != nil || !bytes.Equal(p.encode(), root.encode()) {
				t.Fatalf("step %d: cached lookup's parent differs from the store (%v)", step, err)
			}
			if found {
				child, err := loadInode(st, n.Ino)
				if err != nil || !bytes.Equal(n.encode(), child.encode()) {
					t.Fatalf("step %d: cached lookup of %q: inode differs from the store (%v)", step, name, err)
				}
			}
		}
	}
	if hits == 0 || lookups == 0 {
		t.Fatalf("%d inodes and %d lookups answered from the caches: the test checked nothing", hits, lookups)
	}
}
