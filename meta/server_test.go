package meta

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/weft-fs/weft/layout"
	"github.com/weft-fs/weft/meta/store"
	"github.com/weft-fs/weft/proto"
)

func TestRestartPebble(t *testing.T) {
	dir := t.TempDir()
	open := func() (*store.Pebble, *Server) {
		st, err := store.OpenPebble(dir, store.PebbleOptions{})
		if err != nil {
			t.Fatal(err)
		}
		srv, err := New(Options{Store: st, Seed: 1, OrphanGrace: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		return st, srv
	}
	st, srv := open()
	if _, err := srv.RegisterTarget(ctx, "u1", proto.TargetInfo{Addr: "a:1", Total: 1 << 30, Free: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	d, err := srv.Mkdir(ctx, proto.RootIno, "d", 0755, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	var inos []proto.Ino
	for i := range 20 {
		a, err := srv.Create(ctx, proto.CreateIn{Parent: d.Ino, Name: fmt.Sprint("f", i), Mode: 0644})
		if err != nil {
			t.Fatal(err)
		}
		inos = append(inos, a.Ino)
	}
	// The highest inode is removed: a reused allocator would hand it out again.
	last := inos[len(inos)-1]
	if err := srv.Unlink(ctx, d.Ino, "f19"); err != nil {
		t.Fatal(err)
	}
	if err := srv.SetXattr(ctx, d.Ino, "user.k", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	before, _ := srv.ReadDir(ctx, d.Ino, "", 0)
	srv.Close()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	st, srv = open()
	defer st.Close()
	defer srv.Close()
	after, err := srv.ReadDir(ctx, d.Ino, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(before, after) || len(after) != 19 {
		t.Fatalf("listing changed across restart: %d vs %d entries", len(before), len(after))
	}
	if v, err := srv.GetXattr(ctx, d.Ino, "user.k"); err != nil || string(v) != "v" {
		t.Fatalf("xattr after restart: %q %v", v, err)
	}
	ts, _ := srv.Targets(ctx) // up: within the grace period after a restart
	if len(ts) != 1 || ts[0].ID != 1 || ts[0].Addr != "a:1" || !ts[0].Up {
		t.Fatalf("targets after restart: %+v", ts)
	}
	// Re-registering keeps the id; the new file gets a fresh number.
	if id, err := srv.RegisterTarget(ctx, "u1", proto.TargetInfo{ID: 1, Addr: "a:1", Total: 1 << 30, Free: 1 << 30}); err != nil || id != 1 {
		t.Fatalf("re-register: %d %v", id, err)
	}
	a, err := srv.Create(ctx, proto.CreateIn{Parent: d.Ino, Name: "new", Mode: 0644})
	if err != nil {
		t.Fatal(err)
	}
	if a.Ino <= last {
		t.Fatalf("inode %d reused (highest ever %d)", a.Ino, last)
	}
	sfs, _ := srv.StatFS(ctx)
	if sfs.Files != 1+1+19+1 {
		t.Fatalf("files = %d", sfs.Files)
	}
}

func TestOrphanGraceAfterRestart(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.OrphanGrace = time.Hour })
	e.addTarget("t1", 1<<30)
	a, err := e.srv.Create(ctx, proto.CreateIn{Parent: proto.RootIno, Name: "f", Mode: 0644})
	e.must(err)
	_, _, err = e.srv.Open(ctx, a.Ino, proto.AccessRead)
	e.must(err)
	e.must(e.srv.Unlink(ctx, proto.RootIno, "f"))
	e.opts.OrphanGrace = 50 * time.Millisecond
	e.restart()
	// Another orphan that a client reopens within the grace period is kept.
	if o, _ := e.srv.Orphans(); !slices.Equal(o, []proto.Ino{a.Ino}) {
		t.Fatalf("orphans after restart: %v", o)
	}
	waitFor(t, "orphan reclaim", func() bool { o, _ := e.srv.Orphans(); return len(o) == 0 })
	waitFor(t, "object removal", func() bool { return len(e.storage.Removed()) == 1 })
	if _, err := e.srv.GetAttr(ctx, a.Ino); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("reclaimed inode: %v", err)
	}
}

func TestReclaimDeletesXattrs(t *testing.T) {
	e := newEnv(t)
	a, err := e.srv.Create(ctx, proto.CreateIn{Parent: proto.RootIno, Name: "p", Mode: syscall.S_IFIFO | 0644})
	e.must(err)
	for i := range 3 {
		e.must(e.srv.SetXattr(ctx, a.Ino, fmt.Sprint("user.", i), []byte("x"), 0))
	}
	e.must(e.srv.Unlink(ctx, proto.RootIno, "p"))
	waitFor(t, "reclaim", func() bool { _, err := e.srv.GetAttr(ctx, a.Ino); return err != nil })
	n := 0
	p := store.XattrPrefix(uint64(a.Ino))
	e.must(e.st.Scan(p, store.PrefixEnd(p), func(k, v []byte) bool { n++; return true }))
	if n != 0 {
		t.Fatalf("%d xattrs left after reclaim", n)
	}
}

// TestReclaimOldRecordXattrs: an inode record written before version 6
// does not say whether the inode has xattrs (inode.Keyed): its reclaim
// still looks for them, and removes them. A new inode says so from its
// first xattr.
func TestReclaimOldRecordXattrs(t *testing.T) {
	e := newEnv(t)
	a, err := e.srv.Create(ctx, proto.CreateIn{Parent: proto.RootIno, Name: "p", Mode: syscall.S_IFIFO | 0644})
	e.must(err)
	b, err := e.srv.Create(ctx, proto.CreateIn{Parent: proto.RootIno, Name: "q", Mode: syscall.S_IFIFO | 0644})
	e.must(err)
	for _, ino := range []proto.Ino{a.Ino, b.Ino} {
		n, err := loadInode(e.st, ino)
		e.must(err)
		if n.Keyed != 0 {
			t.Fatalf("new inode %d: Keyed %#x", ino, n.Keyed)
		}
	}
	e.must(e.srv.SetXattr(ctx, a.Ino, "user.k", []byte("x"), 0))
	n, err := loadInode(e.st, a.Ino)
	e.must(err)
	if n.Keyed != inodeHasXattrs {
		t.Fatalf("after setxattr: Keyed %#x", n.Keyed)
	}
	// a's record as version 5 wrote it: no Keyed byte (nor version 7's
	// Flags).
	rec := n.encode()
	rec[0] = 5
	rec = rec[:len(rec)-2]
	if old, err := decodeInode(rec); err != nil || old.Keyed != inodeKeyedUnknown || old.Flags != inodeTruncated {
		t.Fatalf("version 5 record: %+v %v", old, err)
	}
	e.srv.Close()
	bt := e.st.NewBatch()
	bt.Set(store.InodeKey(uint64(a.Ino)), rec)
	e.must(bt.Commit(true))
	e.start()
	e.must(e.srv.Unlink(ctx, proto.RootIno, "p"))
	// Reclaimed now rather than after the restart's orphan grace.
	_, err = e.srv.propose(ctx, &Command{Op: OpReclaim, Now: e.srv.now(), Inos: []proto.Ino{a.Ino}})
	e.must(err)
	if _, err := e.srv.GetAttr(ctx, a.Ino); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("reclaimed inode: %v", err)
	}
	p := store.XattrPrefix(uint64(a.Ino))
	left := 0
	e.must(e.st.Scan(p, store.PrefixEnd(p), func(k, v []byte) bool { left++; return true }))
	if left != 0 {
		t.Fatalf("%d xattrs left after reclaim of a version 5 record", left)
	}
}

// TestInvariants checks, after a mixed workload, what doc.go promises:
// every entry names an inode, orphans are exactly the nlink-0 inodes,
// directory nlink is 2 + subdirectories, counters match.
func TestInvariants(t *testing.T) {
	e := newEnv(t)
	e.addTarget("t1", 1<<30)
	s := e.srv
	d1, _ := s.Mkdir(ctx, proto.RootIno, "d1", 0755, 0, 0)
	d2, _ := s.Mkdir(ctx, proto.RootIno, "d2", 0755, 0, 0)
	for i := range 30 {
		name := fmt.Sprint("f", i)
		a, err := s.Create(ctx, proto.CreateIn{Parent: d1.Ino, Name: name, Mode: 0644})
		e.must(err)
		switch i % 5 {
		case 0:
			e.must(s.Rename(ctx, d1.Ino, name, d2.Ino, name, 0))
		case 1:
			_, _, err := s.Open(ctx, a.Ino, proto.AccessRead)
			e.must(err)
			e.must(s.Unlink(ctx, d1.Ino, name))
		case 2:
			_, err := s.Link(ctx, a.Ino, d2.Ino, "l"+name)
			e.must(err)
		case 3:
			_, err := s.Mkdir(ctx, d2.Ino, "sub"+name, 0755, 0, 0)
			e.must(err)
		case 4:
			e.must(s.Unlink(ctx, d1.Ino, name))
		}
	}
	e.waitReclaim(t)
	checkInvariants(t, e.st)
}

func checkInvariants(t *testing.T, st store.Store) {
	t.Helper()
	inodes := map[proto.Ino]*inode{}
	e := st.Scan([]byte{store.PrefixInode}, []byte{store.PrefixInode + 1}, func(k, v []byte) bool {
		n, err := decodeInode(v)
		if err != nil {
			t.Fatal(err)
		}
		inodes[n.Ino] = n
		return true
	})
	if e != nil {
		t.Fatal(e)
	}
	links := map[proto.Ino]uint32{proto.RootIno: 1}
	subdirs := map[proto.Ino]uint32{}
	st.Scan([]byte{store.PrefixDirent}, []byte{store.PrefixDirent + 1}, func(k, v []byte) bool {
		parent, _ := store.ParseU64Suffix(k)
		de, err := decodeDirent(v)
		if err != nil {
			t.Fatal(err)
		}
		n, ok := inodes[de.Ino]
		if !ok {
			t.Errorf("entry %q names missing inode %d", k[9:], de.Ino)
			return true
		}
		if n.Mode&syscall.S_IFMT != de.Type {
			t.Errorf("entry %q type %o, inode %o", k[9:], de.Type, n.Mode)
		}
		links[de.Ino]++
		if n.IsDir() {
			subdirs[proto.Ino(parent)]++
			if n.Parent != proto.Ino(parent) {
				t.Errorf("dir %d parent %d, entry in %d", n.Ino, n.Parent, parent)
			}
		}
		return true
	})
	orphans := map[proto.Ino]bool{}
	st.Scan([]byte{store.PrefixOrphan}, []byte{store.PrefixOrphan + 1}, func(k, v []byte) bool {
		ino, _ := store.ParseU64Suffix(k)
		orphans[proto.Ino(ino)] = true
		return true
	})
	var maxIno proto.Ino
	for ino, n := range inodes {
		maxIno = max(maxIno, ino)
		want := links[ino]
		if n.IsDir() {
			if want > 0 {
				want = 2 + subdirs[ino]
			}
		}
		if n.Nlink != want {
			t.Errorf("inode %d nlink %d, want %d", ino, n.Nlink, want)
		}
		if (n.Nlink == 0) != orphans[ino] {
			t.Errorf("inode %d nlink %d orphan %v", ino, n.Nlink, orphans[ino])
		}
	}
	for ino := range orphans {
		if _, ok := inodes[ino]; !ok {
			t.Errorf("orphan %d has no inode", ino)
		}
	}
	next, _ := getCounter(st, store.CounterNextIno)
	if uint64(maxIno) >= next {
		t.Errorf("inode %d not below next_ino %d", maxIno, next)
	}
	checkQuotaExact(t, st)
	count, _ := getCounter(st, store.CounterInodes)
	if count != uint64(len(inodes)) {
		t.Errorf("inodes counter %d, have %d", count, len(inodes))
	}
}

func TestConcurrentCreates(t *testing.T) {
	e := newEnv(t)
	e.addTarget("t1", 1<<30)
	d, err := e.srv.Mkdir(ctx, proto.RootIno, "d", 0755, 0, 0)
	e.must(err)
	const workers, each = 16, 50
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				// Every worker also races on one shared name.
				_, err := e.srv.Create(ctx, proto.CreateIn{Parent: d.Ino, Name: fmt.Sprintf("w%d-%d", w, i), Mode: 0644})
				if err != nil {
					errs <- err
				}
				_, err = e.srv.Create(ctx, proto.CreateIn{Parent: d.Ino, Name: "shared", Mode: 0644, Exclusive: true})
				if err != nil && !errors.Is(err, syscall.EEXIST) {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var n int
	seen := map[proto.Ino]bool{}
	after := ""
	for {
		ents, err := e.srv.ReadDir(ctx, d.Ino, after, 100)
		e.must(err)
		if len(ents) == 0 {
			break
		}
		for _, de := range ents {
			if seen[de.Attr.Ino] {
				t.Fatalf("inode %d listed twice", de.Attr.Ino)
			}
			seen[de.Attr.Ino] = true
		}
		n += len(ents)
		after = ents[len(ents)-1].Name
	}
	if n != workers*each+1 {
		t.Fatalf("listed %d entries, want %d", n, workers*each+1)
	}
	groups, cmds := e.srv.GroupStats()
	t.Logf("%d commands in %d groups", cmds, groups)
	checkInvariants(t, e.st)
}

// TestGroupCommit checks that concurrent commands share syncs: with a
// store whose sync is slow, many callers finish in far fewer syncs.
func TestGroupCommit(t *testing.T) {
	mem := store.NewMem()
	slow := &slowSync{Mem: mem, d: 2 * time.Millisecond}
	e := newEnv(t, func(o *Options) { o.Store = slow })
	before := mem.Syncs()
	var wg sync.WaitGroup
	for w := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10 {
				_, err := e.srv.Mkdir(ctx, proto.RootIno, fmt.Sprint(w, "-", i), 0755, 0, 0)
				if err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	syncs := mem.Syncs() - before
	if syncs >= 320/2 {
		t.Fatalf("%d syncs for 320 commands: not grouped", syncs)
	}
	t.Logf("320 commands, %d syncs", syncs)
}

type slowSync struct {
	*store.Mem
	d time.Duration
}

func (s *slowSync) Sync() error {
	time.Sleep(s.d)
	return s.Mem.Sync()
}

// NewBatch makes synced commits slow too: the applier commits the last
// command of a group synced instead of calling Sync.
func (s *slowSync) NewBatch() store.Batch { return slowBatch{s.Mem.NewBatch(), s.d} }

type slowBatch struct {
	store.Batch
	d time.Duration
}

func (b slowBatch) Commit(sync bool) error {
	if sync {
		time.Sleep(b.d)
	}
	return b.Batch.Commit(sync)
}

// TestReadDirLarge lists a directory of 100,000 entries page by page and
// checks that it is fast and that a page late in the directory costs no
// more than one at the start.
func TestReadDirLarge(t *testing.T) {
	st, err := store.OpenPebble(t.TempDir(), store.PebbleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(o *Options) { o.Store = st })
	const n = 100_000
	// Fill through the state machine directly, in large batches of
	// commands, to keep the test quick; the listing is what is measured.
	d, err := e.srv.Mkdir(ctx, proto.RootIno, "big", 0755, 0, 0)
	e.must(err)
	b := st.NewBatch()
	now := e.clock.Now().UnixNano()
	base := uint64(e.srv.allocIno())
	for i := range n {
		ino := proto.Ino(base + uint64(i))
		node := &inode{Attr: proto.Attr{Ino: ino, Mode: syscall.S_IFIFO | 0644, Nlink: 1, Mtime: now}}
		b.Set(store.InodeKey(uint64(ino)), node.encode())
		b.Set(store.DirentKey(uint64(d.Ino), fmt.Sprintf("entry-%06d", i)), dirent{Ino: ino, Type: syscall.S_IFIFO}.encode())
	}
	e.must(b.Commit(false))

	start := time.Now()
	var pages, total int
	after := ""
	var firstPage, lastPage time.Duration
	for {
		t0 := time.Now()
		ents, err := e.srv.ReadDir(ctx, d.Ino, after, 1000)
		el := time.Since(t0)
		e.must(err)
		if len(ents) == 0 {
			break
		}
		if pages == 0 {
			firstPage = el
		}
		lastPage = el
		if ents[0].Name <= after {
			t.Fatalf("page starts at %q after %q", ents[0].Name, after)
		}
		pages++
		total += len(ents)
		after = ents[len(ents)-1].Name
	}
	took := time.Since(start)
	t.Logf("listed %d entries in %d pages in %v (first page %v, last %v)", total, pages, took, firstPage, lastPage)
	if total != n {
		t.Fatalf("listed %d, want %d", total, n)
	}
	// Continuation from a name deep in the directory (a seek; its time is
	// logged, never asserted: the machine may be busy).
	t0 := time.Now()
	ents, err := e.srv.ReadDir(ctx, d.Ino, "entry-099990", 100)
	e.must(err)
	t.Logf("tail page in %v", time.Since(t0))
	if len(ents) != 9 || ents[0].Name != "entry-099991" {
		t.Fatalf("tail page: %d entries, first %q", len(ents), ents[0].Name)
	}
}

func TestCommandRoundTrip(t *testing.T) {
	l := layout.Layout{StripeSize: 1 << 20, StripeCount: 2, Targets: []proto.TargetID{3, 4}}
	cmds := []*Command{
		{Op: OpInit, Now: 1, Mode: 0755},
		{Op: OpCreate, Now: -5, Ino: 10, Parent: 1, Name: "f", Mode: 0100644, Uid: 1, Gid: 2, Flags: 1,
			Layout: &l, Candidates: []proto.TargetID{1, 2, 3}, PlaceErr: uint32(syscall.ENOSPC)},
		{Op: OpRename, Parent: 1, Name: "a", NewParent: 2, NewName: "b", Flags: 2},
		{Op: OpSetAttr, Ino: 3, SetAttr: proto.SetAttrIn{Valid: 0x1ff, Mode: 1, Uid: 2, Gid: 3, Size: 4, Atime: 5, Mtime: 6, Ctime: 7}},
		{Op: OpSetXattr, Ino: 3, Name: "user.x", Value: []byte("value"), Flags: 1},
		{Op: OpRegisterTarget, Text: "uuid", Addr: "h:1", TargetID: 9},
		{Op: OpReclaim, Inos: []proto.Ino{5, 6}},
		{Op: OpGCDone, Objects: []GCObject{{Target: 1, Obj: proto.ObjectID{Ino: 5, Stripe: 2}}, {Target: 2, Obj: proto.ObjectID{Ino: 6, Gen: 1 << 63}}}},
		{Op: OpCreate, Ino: 7, Gen: 0x9e3779b97f4a7c15, Parent: 1, Name: "f", Mode: 0o644},
		{Op: OpUnlink, Parent: 1, Name: "x", Cred: &proto.Cred{Uid: 1000, Gid: 100, Groups: []uint32{100, 7}}},
		{Op: OpMkdir, Ino: 9, Parent: 1, Name: "d", Cred: &proto.Cred{}},
		{Op: OpCreate, Ino: 11, Parent: 1, Name: "g", Session: proto.SessionID{1, 2, 15: 3}, SessionName: "mount-1", Seq: 7},
		{Op: OpSessionDrop, Session: proto.SessionID{4}, SessionName: "m"},
		{Op: OpSetLayout, Ino: 12, Layout: &layout.Layout{Kind: layout.Mirror, Mirror: 2, StripeSize: 1 << 20, StripeCount: 1, Targets: []proto.TargetID{1, 2}, Stale: []uint32{1}},
			Candidates: []proto.TargetID{1, 2, 3}, Domains: []uint32{0, 1, 0}},
		{Op: OpStale, Ino: 12, Gen: 5, Flags: 1, Slots: []uint32{1, 3}},
		{Op: OpSetQuota, Quota: &QuotaSpec{Kind: 2, ID: 100, Inodes: 5, Bytes: 1 << 40}, Cred: &proto.Cred{}},
		{Op: OpSetProject, Inos: []proto.Ino{4, 5}, Quota: &QuotaSpec{Kind: 3, ID: 7}},
		{Op: OpMigrateBegin, Ino: 12, Gen: 5, NewGen: 9, Until: 1 << 62, Layout: &layout.Layout{Kind: layout.EC, ECData: 2, ECParity: 1, StripeSize: 1 << 20, StripeCount: 1},
			Candidates: []proto.TargetID{1, 2, 3}, Domains: []uint32{0, 1, 2}, Cred: &proto.Cred{Uid: 7}},
		{Op: OpMigrateCommit, Ino: 12, Gen: 5, NewGen: 9, Until: -1, SetAttr: proto.SetAttrIn{Mtime: 3, Ctime: 4, Size: 5},
			Layout: &layout.Layout{Kind: layout.Mirror, Mirror: 2, StripeSize: 1 << 20, StripeCount: 1, Targets: []proto.TargetID{1, 2}}},
		{Op: OpMigrateAbort, Ino: 12, Gen: 5, NewGen: 9},
	}
	for _, c := range cmds {
		got, err := DecodeCommand(c.Encode())
		if err != nil {
			t.Fatalf("%v: %v", c.Op, err)
		}
		if !reflect.DeepEqual(got, c) {
			t.Fatalf("%v: round trip\n got %+v\nwant %+v", c.Op, got, c)
		}
	}
	// Version 5 appended Domains, Slots (4 bytes each when empty) and
	// Blocks (a bool for a command without), version 4 the request id
	// (session id, name, seq), version 3 Gen (8 bytes for a command
	// without Objects).
	// Version 6 appended Quota (a bool for a command without).
	// Version 7 appended NewGen and Until.
	const v7Tail, v6Tail, v5Tail, v4Tail, v3Tail = 8 + 8, 1, 4 + 4 + 1, 16 + 4 + 8, 8
	v6 := (&Command{Op: OpSetQuota, Quota: &QuotaSpec{ID: 4}}).Encode()
	v6 = v6[:len(v6)-v7Tail]
	v6[0] = 6
	if got, err := DecodeCommand(v6); err != nil || got.Quota == nil || got.Quota.ID != 4 || got.NewGen != 0 {
		t.Fatalf("version 6 command: %+v %v", got, err)
	}
	blocks := uint64(12)
	if got, err := DecodeCommand((&Command{Op: OpWriteDone, Ino: 3, Blocks: &blocks}).Encode()); err != nil || got.Blocks == nil || *got.Blocks != 12 {
		t.Fatalf("write-done with blocks: %+v %v", got, err)
	}
	// A version-4 command holds its layout in format 1 and reports no blocks.
	v4 := (&Command{Op: OpCreate, Name: "f", Seq: 9}).Encode()
	v4 = v4[:len(v4)-v5Tail-v6Tail-v7Tail]
	v4[0] = 4
	if got, err := DecodeCommand(v4); err != nil || got.Layout != nil || got.Name != "f" || got.Blocks != nil || got.Seq != 9 {
		t.Fatalf("version 4 command: %+v %v", got, err)
	}
	// A version-3 command (no request id) decodes without dedupe.
	v3 := (&Command{Op: OpUnlink, Name: "x", Cred: &proto.Cred{Uid: 3}}).Encode()
	v3 = v3[:len(v3)-v4Tail-v5Tail-v6Tail-v7Tail]
	v3[0] = 3
	if got, err := DecodeCommand(v3); err != nil || got.Cred == nil || got.Cred.Uid != 3 || got.Seq != 0 {
		t.Fatalf("version 3 command: %+v %v", got, err)
	}
	// A version-2 command (no Gen) too.
	v2 := v3[:len(v3)-v3Tail]
	v2[0] = 2
	if got, err := DecodeCommand(v2); err != nil || got.Cred == nil || got.Cred.Uid != 3 || got.Seq != 0 {
		t.Fatalf("version 2 command: %+v %v", got, err)
	}
	// A version-1 command (no Cred, no Gen) still decodes, as a trusted one.
	v1 := (&Command{Op: OpUnlink, Name: "x"}).Encode()
	v1 = v1[:len(v1)-v7Tail-v6Tail-v5Tail-v4Tail-v3Tail-1] // blocks, the request id, Gen, the Cred-present flag
	v1[0] = 1
	if got, err := DecodeCommand(v1); err != nil || got.Cred != nil || got.Name != "x" {
		t.Fatalf("version 1 command: %+v %v", got, err)
	}
	// A version-2 command (no Gen) decodes with generation 0.
	v2 = (&Command{Op: OpGCDone, Objects: []GCObject{{Target: 1, Obj: proto.ObjectID{Ino: 5}}}}).Encode()
	v2 = v2[:len(v2)-v7Tail-v6Tail-v5Tail-v4Tail-8-8] // blocks, the request id, Gen, the object's gen
	v2[0] = 2
	if got, err := DecodeCommand(v2); err != nil || got.Objects[0].Obj != (proto.ObjectID{Ino: 5}) {
		t.Fatalf("version 2 command: %+v %v", got, err)
	}
	bad := [][]byte{nil, {9}, {cmdVersion}, append((&Command{Op: OpUnlink}).Encode(), 0)}
	for _, b := range bad {
		if _, err := DecodeCommand(b); err == nil {
			t.Errorf("DecodeCommand(%x) succeeded", b)
		}
	}
	if _, err := DecodeCommand((&Command{Op: 99}).Encode()); err == nil {
		t.Error("unknown op decoded")
	}
}

func FuzzDecodeCommand(f *testing.F) {
	f.Add((&Command{Op: OpCreate, Name: "x", Candidates: []proto.TargetID{1}}).Encode())
	f.Add((&Command{Op: OpGCDone, Objects: []GCObject{{Target: 1}}}).Encode())
	f.Add((&Command{Op: OpUnlink, Name: "x", Cred: &proto.Cred{Uid: 1, Groups: []uint32{2, 3}}}).Encode())
	f.Add((&Command{Op: OpSetLayout, Layout: &layout.Layout{StripeSize: 1, Targets: []proto.TargetID{1}}}).Encode())
	f.Add((&Command{Op: OpMkdir, Name: "d", Session: proto.SessionID{1}, SessionName: "m", Seq: 2}).Encode())
	f.Add((&Command{Op: OpMigrateCommit, Ino: 3, Gen: 1, NewGen: 2, Until: 5, Layout: &layout.Layout{StripeSize: 1, Targets: []proto.TargetID{1}}}).Encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeCommand(b)
		if err != nil {
			return
		}
		// What decodes re-encodes to an equivalent command.
		c2, err := DecodeCommand(c.Encode())
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(c.Encode(), c2.Encode()) {
			t.Fatal("re-encoding differs")
		}
	})
}

func FuzzDecodeInode(f *testing.F) {
	f.Add((&inode{Attr: proto.Attr{Ino: 2, Layout: layout.Default()}, Symlink: "x"}).encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := decodeInode(b)
		if err != nil {
			return
		}
		n2, err := decodeInode(n.encode())
		if err != nil || !reflect.DeepEqual(n, n2) {
			t.Fatalf("inode record does not round-trip: %v", err)
		}
	})
}

// TestApplyDeterministic applies one command log to two fresh stores and
// checks they end byte-identical: what raft replication will rely on.
func TestApplyDeterministic(t *testing.T) {
	var log [][]byte
	rec := &recorder{}
	mem := store.NewMem()
	e := newEnv(t, func(o *Options) {
		o.Store = mem
		o.applyHook = func(c *Command) { rec.add(c.Encode()) }
	})
	e.addTarget("t1", 1<<30)
	e.addTarget("t2", 1<<30)
	d, _ := e.srv.Mkdir(ctx, proto.RootIno, "d", 0755, 0, 0)
	for i := range 20 {
		a, _ := e.srv.Create(ctx, proto.CreateIn{Parent: d.Ino, Name: fmt.Sprint(i), Mode: 0644})
		if i%3 == 0 {
			e.srv.Unlink(ctx, d.Ino, fmt.Sprint(i))
		}
		if i%4 == 0 {
			e.srv.WriteDone(ctx, a.Ino, uint64(i), 0, proto.NoBlocks)
		}
	}
	e.srv.Rename(ctx, d.Ino, "1", proto.RootIno, "moved", 0)
	// Deduplicated requests: replies stored, a retry answered from them, a
	// failure remembered, acknowledged replies and an ended session's
	// replies deleted.
	for seq := uint64(1); seq <= 4; seq++ {
		e.srv.Mkdir(req(9, seq), d.Ino, fmt.Sprint("r", seq%3), 0755, 0, 0)
	}
	e.srv.Mkdir(req(9, 2), d.Ino, "r2", 0755, 0, 0)
	e.srv.Mkdir(req(9, 5), d.Ino, "r5", 0755, 0, 0)
	e.srv.Mkdir(req(8, 1), d.Ino, "r8", 0755, 0, 0)
	e.srv.forgetReplies(session{id: proto.SessionID{8}})
	e.waitReclaim(t)
	e.srv.Close()
	log = rec.log()

	replay := func() *store.Mem {
		m := store.NewMem()
		sm, err := openStateMachine(m)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range log {
			c, err := DecodeCommand(b)
			if err != nil {
				t.Fatal(err)
			}
			sm.apply(c)
		}
		return m
	}
	a, b := dump(replay()), dump(mem)
	if a != dump(replay()) || a != b {
		t.Fatal("replaying the command log does not reproduce the state")
	}
}

// recorder keeps the encoded command log.
type recorder struct {
	mu   sync.Mutex
	cmds [][]byte
}

func (r *recorder) add(b []byte) {
	r.mu.Lock()
	r.cmds = append(r.cmds, b)
	r.mu.Unlock()
}

func (r *recorder) log() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.cmds)
}

func dump(m *store.Mem) string {
	var b bytes.Buffer
	m.Scan(nil, nil, func(k, v []byte) bool {
		fmt.Fprintf(&b, "%x=%x\n", k, v)
		return true
	})
	return b.String()
}

// TestGCDownTargetDoesNotBlockOthers queues more objects on a down target
// than one GC batch holds, and checks the other target is still drained.
func TestGCDownTargetDoesNotBlockOthers(t *testing.T) {
	e := newEnv(t)
	t1 := e.addTarget("t1", 1<<30)
	t2 := e.addTarget("t2", 1<<30)
	e.storage.setDown(t1, true)
	mk := func(name string, tg proto.TargetID) {
		l := layout.Layout{StripeSize: layout.DefaultStripeSize, StripeCount: 1, Targets: []proto.TargetID{tg}}
		_, err := e.srv.Create(ctx, proto.CreateIn{Parent: proto.RootIno, Name: name, Mode: 0644, Layout: &l})
		e.must(err)
	}
	for i := range gcBatch + 50 {
		mk(fmt.Sprint("a", i), t1)
	}
	mk("b", t2)
	for i := range gcBatch + 50 {
		e.must(e.srv.Unlink(ctx, proto.RootIno, fmt.Sprint("a", i)))
	}
	e.must(e.srv.Unlink(ctx, proto.RootIno, "b"))
	waitFor(t, "target 2 drained", func() bool {
		for _, o := range e.storage.Removed() {
			if o.Target == t2 {
				return true
			}
		}
		return false
	})
	// The removal is dropped from the queue by a command applied after the
	// storage answered: wait for it too.
	waitFor(t, "target 2's object off the queue", func() bool {
		q, _ := e.srv.GCQueue()
		for _, o := range q {
			if o.Target == t2 {
				return false
			}
		}
		return true
	})
	q, _ := e.srv.GCQueue()
	if len(q) != gcBatch+50 {
		t.Fatalf("queue has %d objects, want %d on the down target", len(q), gcBatch+50)
	}
	e.storage.setDown(t1, false)
	waitFor(t, "queue drained", func() bool { q, _ := e.srv.GCQueue(); return len(q) == 0 })
	if n := len(e.storage.Removed()); n != gcBatch+51 {
		t.Fatalf("removed %d objects", n)
	}
	// The objects of a target go in one RemoveMany per GC batch, not one
	// RPC per object.
	if n := e.storage.Batches(t1); n != 2 {
		t.Fatalf("%d objects of target 1 removed in %d RemoveMany calls, want 2", gcBatch+50, n)
	}
}

// prefixCountingStore counts the range deletions (DeletePrefix) its
// batches are given.
type prefixCountingStore struct {
	store.Store
	prefixDeletes *int
}

func (s prefixCountingStore) NewBatch() store.Batch {
	return prefixCountingBatch{s.Store.NewBatch(), s.prefixDeletes}
}

type prefixCountingBatch struct {
	store.Batch
	n *int
}

func (b prefixCountingBatch) DeletePrefix(p []byte) { *b.n++; b.Batch.DeletePrefix(p) }

// TestUnlinkWithoutRangeDeletes: reclaiming an unlinked file (inline, as
// nobody has it open) removes its keys, xattrs included, with point
// deletes only. A range deletion per reclaim made pebble fragment every
// tombstone in its memtable again on each later read: a burst of unlinks
// ran in quadratic time (docs/performance.md).
func TestUnlinkWithoutRangeDeletes(t *testing.T) {
	var n int
	mem := store.NewMem()
	srv, err := New(Options{Store: prefixCountingStore{mem, &n}, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if _, err := srv.RegisterTarget(ctx, "u1", proto.TargetInfo{Addr: "a:1", Total: 1 << 30, Free: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	var inos []proto.Ino
	for i := range 10 {
		a, err := srv.Create(ctx, proto.CreateIn{Parent: proto.RootIno, Name: fmt.Sprint("f", i), Mode: 0644})
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.SetXattr(ctx, a.Ino, "user.k", []byte("v"), 0); err != nil {
			t.Fatal(err)
		}
		inos = append(inos, a.Ino)
	}
	for i := range 10 {
		if err := srv.Unlink(ctx, proto.RootIno, fmt.Sprint("f", i)); err != nil {
			t.Fatal(err)
		}
	}
	if n != 0 {
		t.Fatalf("%d range deletions for 10 unlinks", n)
	}
	for _, ino := range inos {
		if _, err := srv.GetAttr(ctx, ino); !errors.Is(err, syscall.ENOENT) {
			t.Fatalf("inode %d after unlink: %v", ino, err)
		}
		p := store.XattrPrefix(uint64(ino))
		if err := mem.Scan(p, store.PrefixEnd(p), func(k, _ []byte) bool {
			t.Errorf("inode %d: xattr key %q left", ino, k)
			return true
		}); err != nil {
			t.Fatal(err)
		}
	}
	if orphans, err := srv.Orphans(); err != nil || len(orphans) != 0 {
		t.Fatalf("orphans %v, %v", orphans, err)
	}
}
