package meta

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/weft-fs/weft/meta/metarpc"
	"github.com/weft-fs/weft/meta/store"
	"github.com/weft-fs/weft/proto"
)

// usage returns an account's recorded usage.
func (e *env) usage(kind metarpc.QuotaKind, id uint32) metarpc.QuotaAmounts {
	e.t.Helper()
	q, err := e.srv.GetQuota(ctx, kind, id)
	e.must(err)
	return q.Usage
}

func (e *env) wantUsage(kind metarpc.QuotaKind, id uint32, inodes, bytes uint64) {
	e.t.Helper()
	if got := e.usage(kind, id); got != (metarpc.QuotaAmounts{Inodes: inodes, Bytes: bytes}) {
		e.t.Fatalf("%s %d uses %+v, want %d inodes, %d bytes", kind, id, got, inodes, bytes)
	}
}

// checkQuotaExact fails t unless every account's recorded usage equals a
// recount from the inodes.
func checkQuotaExact(t testing.TB, st store.Reader) {
	t.Helper()
	cs, err := checkQuota(st)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if c.Recorded != c.Counted {
			t.Errorf("%s %d: recorded %+v, counted %+v", c.Kind, c.ID, c.Recorded, c.Counted)
		}
	}
}

func TestQuotaUsageFollowsOps(t *testing.T) {
	e := permEnv(t)
	pub, err := e.resolve("/pub")
	e.must(err)
	u := func(i, b uint64) {
		t.Helper()
		e.wantUsage(metarpc.QuotaUser, credU.Uid, i, b)
		checkQuotaExact(t, e.st)
	}
	u(3, 0) // permEnv: /priv, /home/u, /home/u/f are u's
	f, err := e.srv.Create(asU, proto.CreateIn{Parent: pub.Ino, Name: "f", Mode: 0644})
	e.must(err)
	u(4, 0)
	_, err = e.srv.Mkdir(asU, pub.Ino, "d", 0755, 0, 0)
	e.must(err)
	_, err = e.srv.Symlink(asU, pub.Ino, "s", "target", 0, 0)
	e.must(err)
	u(6, 0) // a symlink's size does not count: only regular files' bytes
	_, err = e.srv.WriteDone(asU, f.Ino, 5000, 0, proto.NoBlocks)
	e.must(err)
	u(6, 5000)
	_, err = e.srv.SetAttr(asU, f.Ino, proto.SetAttrIn{Valid: proto.SetSize, Size: 100})
	e.must(err)
	u(6, 100)
	_, err = e.srv.Link(asU, f.Ino, pub.Ino, "hard")
	e.must(err)
	u(6, 100) // a second name is not a second inode
	e.wantUsage(metarpc.QuotaGroup, credU.Gid, 6, 100)
	// chown by root moves the file's usage to the new owner and group.
	_, err = e.srv.SetAttr(asRoot, f.Ino, proto.SetAttrIn{Valid: proto.SetUid | proto.SetGid, Uid: credV.Uid, Gid: credV.Gid})
	e.must(err)
	u(5, 0)
	e.wantUsage(metarpc.QuotaUser, credV.Uid, 1, 100)
	e.wantUsage(metarpc.QuotaGroup, credV.Gid, 1, 100)
	// Unlink of both names: the inode counts until it is reclaimed.
	e.must(e.srv.Unlink(asRoot, pub.Ino, "f"))
	e.must(e.srv.Unlink(asRoot, pub.Ino, "hard"))
	e.waitReclaim(t)
	e.wantUsage(metarpc.QuotaUser, credV.Uid, 0, 0)
	e.must(e.srv.Rmdir(asU, pub.Ino, "d"))
	e.waitReclaim(t)
	u(4, 0)
	checkInvariants(t, e.st)
}

func TestQuotaInodeLimit(t *testing.T) {
	e := permEnv(t)
	pub, err := e.resolve("/pub")
	e.must(err)
	e.must(e.srv.SetQuota(asRoot, metarpc.QuotaUser, credU.Uid, metarpc.QuotaAmounts{Inodes: 5}))
	// u holds 3 inodes (permEnv): two more fit.
	for i := range 2 {
		_, err := e.srv.Create(asU, proto.CreateIn{Parent: pub.Ino, Name: fmt.Sprint("f", i), Mode: 0644})
		e.must(err)
	}
	for _, op := range []func() error{
		func() error {
			_, err := e.srv.Create(asU, proto.CreateIn{Parent: pub.Ino, Name: "x", Mode: 0644})
			return err
		},
		func() error { _, err := e.srv.Mkdir(asU, pub.Ino, "x", 0755, 0, 0); return err },
		func() error { _, err := e.srv.Symlink(asU, pub.Ino, "x", "t", 0, 0); return err },
	} {
		if err := op(); !errors.Is(err, syscall.EDQUOT) {
			t.Fatalf("create over the inode limit: %v, want EDQUOT", err)
		}
	}
	if _, err := e.srv.Lookup(ctx, pub.Ino, "x"); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("a refused create left an entry: %v", err)
	}
	e.wantUsage(metarpc.QuotaUser, credU.Uid, 5, 0)
	// Root is exempt (as on ext4), and so is its chown of a file to u.
	a, err := e.srv.Create(asRoot, proto.CreateIn{Parent: pub.Ino, Name: "r", Mode: 0644})
	e.must(err)
	_, err = e.srv.SetAttr(asRoot, a.Ino, proto.SetAttrIn{Valid: proto.SetUid, Uid: credU.Uid})
	e.must(err)
	e.wantUsage(metarpc.QuotaUser, credU.Uid, 6, 0)
	// Over the limit now, u may still delete; and create once under it.
	e.must(e.srv.Unlink(asU, pub.Ino, "f0"))
	e.must(e.srv.Unlink(asU, pub.Ino, "f1"))
	e.waitReclaim(t)
	_, err = e.srv.Create(asU, proto.CreateIn{Parent: pub.Ino, Name: "y", Mode: 0644})
	e.must(err)
	e.wantUsage(metarpc.QuotaUser, credU.Uid, 5, 0)
	// 0 is no limit.
	e.must(e.srv.SetQuota(asRoot, metarpc.QuotaUser, credU.Uid, metarpc.QuotaAmounts{}))
	_, err = e.srv.Create(asU, proto.CreateIn{Parent: pub.Ino, Name: "z", Mode: 0644})
	e.must(err)
	checkQuotaExact(t, e.st)
}

func TestQuotaConcurrentCreatesStopAtLimit(t *testing.T) {
	e := permEnv(t)
	pub, err := e.resolve("/pub")
	e.must(err)
	const limit = 3 + 17
	e.must(e.srv.SetQuota(asRoot, metarpc.QuotaGroup, 50, metarpc.QuotaAmounts{Inodes: 17}))
	e.must(e.srv.SetQuota(asRoot, metarpc.QuotaUser, credU.Uid, metarpc.QuotaAmounts{Inodes: limit}))
	var ok, dq atomic.Int32
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10 {
				_, err := e.srv.Create(asU, proto.CreateIn{Parent: pub.Ino, Name: fmt.Sprint(w, "-", i), Mode: 0644})
				switch {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, syscall.EDQUOT):
					dq.Add(1)
				default:
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 17 || dq.Load() != 80-17 {
		t.Fatalf("%d creates succeeded and %d got EDQUOT, want 17 and 63", ok.Load(), dq.Load())
	}
	e.wantUsage(metarpc.QuotaUser, credU.Uid, limit, 0)
	checkQuotaExact(t, e.st)
}

func TestQuotaByteLimit(t *testing.T) {
	e := permEnv(t)
	pub, err := e.resolve("/pub")
	e.must(err)
	e.must(e.srv.SetQuota(asRoot, metarpc.QuotaUser, credU.Uid, metarpc.QuotaAmounts{Bytes: 10000}))
	a, err := e.srv.Create(asU, proto.CreateIn{Parent: pub.Ino, Name: "a", Mode: 0644})
	e.must(err)
	b, err := e.srv.Create(asU, proto.CreateIn{Parent: pub.Ino, Name: "b", Mode: 0644})
	e.must(err)
	_, err = e.srv.WriteDone(asU, a.Ino, 8000, 0, proto.NoBlocks)
	e.must(err)
	if _, err := e.srv.WriteDone(asU, b.Ino, 3000, 0, proto.NoBlocks); !errors.Is(err, syscall.EDQUOT) {
		t.Fatalf("write over the byte limit: %v, want EDQUOT", err)
	}
	if _, err := e.srv.SetAttr(asU, b.Ino, proto.SetAttrIn{Valid: proto.SetSize, Size: 2001}); !errors.Is(err, syscall.EDQUOT) {
		t.Fatalf("truncate up over the byte limit: %v, want EDQUOT", err)
	}
	if got, _ := e.srv.GetAttr(ctx, b.Ino); got.Size != 0 {
		t.Fatalf("a refused write changed the size to %d", got.Size)
	}
	_, err = e.srv.WriteDone(asU, b.Ino, 2000, 0, proto.NoBlocks)
	e.must(err)
	e.wantUsage(metarpc.QuotaUser, credU.Uid, 5, 10000)
	// Shrinking is always allowed, also after the limit was lowered.
	e.must(e.srv.SetQuota(asRoot, metarpc.QuotaUser, credU.Uid, metarpc.QuotaAmounts{Bytes: 100}))
	_, err = e.srv.SetAttr(asU, a.Ino, proto.SetAttrIn{Valid: proto.SetSize, Size: 10})
	e.must(err)
	e.wantUsage(metarpc.QuotaUser, credU.Uid, 5, 2010)
	// Root's writes to u's files count against u's limit too (a mount
	// records sizes at release with root's credentials).
	if _, err := e.srv.WriteDone(asRoot, b.Ino, 5000, 0, proto.NoBlocks); !errors.Is(err, syscall.EDQUOT) {
		t.Fatalf("root's write over u's byte limit: %v, want EDQUOT", err)
	}
	// A write that does not grow the file is not refused.
	_, err = e.srv.WriteDone(asU, b.Ino, 1000, 0, proto.NoBlocks)
	e.must(err)
	checkQuotaExact(t, e.st)
}

func TestQuotaProject(t *testing.T) {
	e := permEnv(t)
	pub, err := e.resolve("/pub")
	e.must(err)
	p, err := e.srv.Mkdir(asU, pub.Ino, "proj", 0777, 0, 0)
	e.must(err)
	sub, err := e.srv.Mkdir(asU, p.Ino, "sub", 0777, 0, 0)
	e.must(err)
	old, err := e.srv.Create(asU, proto.CreateIn{Parent: sub.Ino, Name: "old", Mode: 0644})
	e.must(err)
	_, err = e.srv.WriteDone(asU, old.Ino, 700, 0, proto.NoBlocks)
	e.must(err)
	if _, err := e.srv.SetProject(asU, p.Ino, 7, true); !errors.Is(err, syscall.EPERM) {
		t.Fatalf("set-project by a user: %v, want EPERM", err)
	}
	n, err := e.srv.SetProject(asRoot, p.Ino, 7, true)
	e.must(err)
	if n != 3 {
		t.Fatalf("tagged %d inodes, want 3", n)
	}
	e.wantUsage(metarpc.QuotaProject, 7, 3, 700)
	// New inodes below inherit the project.
	nf, err := e.srv.Create(asV, proto.CreateIn{Parent: sub.Ino, Name: "new", Mode: 0644})
	e.must(err)
	_, err = e.srv.WriteDone(asV, nf.Ino, 300, 0, proto.NoBlocks)
	e.must(err)
	e.wantUsage(metarpc.QuotaProject, 7, 4, 1000)
	// The project's limit binds every user.
	e.must(e.srv.SetQuota(asRoot, metarpc.QuotaProject, 7, metarpc.QuotaAmounts{Inodes: 5, Bytes: 1500}))
	_, err = e.srv.Mkdir(asV, sub.Ino, "d", 0777, 0, 0)
	e.must(err)
	if _, err := e.srv.Create(asU, proto.CreateIn{Parent: sub.Ino, Name: "over", Mode: 0644}); !errors.Is(err, syscall.EDQUOT) {
		t.Fatalf("create over the project's inode limit: %v, want EDQUOT", err)
	}
	if _, err := e.srv.WriteDone(asV, nf.Ino, 900, 0, proto.NoBlocks); !errors.Is(err, syscall.EDQUOT) {
		t.Fatalf("write over the project's byte limit: %v, want EDQUOT", err)
	}
	// Outside the tree the project does not count.
	_, err = e.srv.Create(asU, proto.CreateIn{Parent: pub.Ino, Name: "outside", Mode: 0644})
	e.must(err)
	e.wantUsage(metarpc.QuotaProject, 7, 5, 1000)
	checkQuotaExact(t, e.st)
}

func TestQuotaPermissions(t *testing.T) {
	e := permEnv(t)
	if err := e.srv.SetQuota(asU, metarpc.QuotaUser, credU.Uid, metarpc.QuotaAmounts{Inodes: 1 << 30}); !errors.Is(err, syscall.EPERM) {
		t.Fatalf("set-quota by a user: %v, want EPERM", err)
	}
	if _, err := e.srv.GetQuota(asU, metarpc.QuotaUser, credV.Uid); !errors.Is(err, syscall.EPERM) {
		t.Fatalf("a user reads another's quota: %v, want EPERM", err)
	}
	for _, k := range []struct {
		kind metarpc.QuotaKind
		id   uint32
	}{{metarpc.QuotaUser, credU.Uid}, {metarpc.QuotaGroup, 50}, {metarpc.QuotaProject, 3}} {
		if _, err := e.srv.GetQuota(asU, k.kind, k.id); err != nil {
			t.Fatalf("a user reads %s %d: %v", k.kind, k.id, err)
		}
	}
	if _, err := e.srv.CheckQuota(asU, false); !errors.Is(err, syscall.EPERM) {
		t.Fatalf("quota check by a user: %v, want EPERM", err)
	}
	if err := e.srv.SetQuota(asRoot, metarpc.QuotaKind(9), 1, metarpc.QuotaAmounts{}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("a bad kind: %v, want EINVAL", err)
	}
}

// TestQuotaExactAfterRestart: usage is in the store, written with the
// inodes, so a server restarted on a pebble store finds it exact.
func TestQuotaExactAfterRestart(t *testing.T) {
	dir := t.TempDir()
	pst, err := store.OpenPebble(dir, store.PebbleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(o *Options) { o.Store = pst })
	e.addTarget("t1", 1<<30)
	d, err := e.srv.Mkdir(ctx, proto.RootIno, "d", 0777, 0, 0)
	e.must(err)
	e.must(e.srv.SetQuota(ctx, metarpc.QuotaUser, credU.Uid, metarpc.QuotaAmounts{Inodes: 100, Bytes: 1 << 20}))
	for i := range 40 {
		a, err := e.srv.Create(asU, proto.CreateIn{Parent: d.Ino, Name: fmt.Sprint(i), Mode: 0644})
		e.must(err)
		_, err = e.srv.WriteDone(asU, a.Ino, uint64(i*100), 0, proto.NoBlocks)
		e.must(err)
		if i%3 == 0 {
			e.must(e.srv.Unlink(asU, d.Ino, fmt.Sprint(i)))
		}
	}
	e.waitReclaim(t)
	before := e.usage(metarpc.QuotaUser, credU.Uid)
	e.restart()
	if got := e.usage(metarpc.QuotaUser, credU.Uid); got != before || got.Inodes != 26 {
		t.Fatalf("after restart u uses %+v, before %+v (want 26 inodes)", got, before)
	}
	q, err := e.srv.GetQuota(ctx, metarpc.QuotaUser, credU.Uid)
	e.must(err)
	if q.Limits != (metarpc.QuotaAmounts{Inodes: 100, Bytes: 1 << 20}) {
		t.Fatalf("limits after restart: %+v", q.Limits)
	}
	checkQuotaExact(t, e.st)
}

// TestQuotaReplay: replaying the command log on an empty store gives the
// same accounts (the usage is a function of the commands, limits too).
func TestQuotaReplay(t *testing.T) {
	rec := &recorder{}
	mem := store.NewMem()
	e := newEnv(t, func(o *Options) {
		o.Store = mem
		o.applyHook = func(c *Command) { rec.add(c.Encode()) }
	})
	e.addTarget("t1", 1<<30)
	d, err := e.srv.Mkdir(ctx, proto.RootIno, "d", 0777, 0, 0)
	e.must(err)
	e.must(e.srv.SetQuota(ctx, metarpc.QuotaUser, credU.Uid, metarpc.QuotaAmounts{Inodes: 12}))
	_, err = e.srv.SetProject(ctx, d.Ino, 4, true)
	e.must(err)
	for i := range 15 {
		a, err := e.srv.Create(asU, proto.CreateIn{Parent: d.Ino, Name: fmt.Sprint(i), Mode: 0644})
		if err != nil {
			continue // EDQUOT past 12
		}
		e.srv.WriteDone(asU, a.Ino, uint64(i), 0, proto.NoBlocks)
		if i%4 == 0 {
			e.srv.Unlink(asU, d.Ino, fmt.Sprint(i))
		}
	}
	e.waitReclaim(t)
	e.srv.Close()
	m := store.NewMem()
	sm, err := openStateMachine(m)
	e.must(err)
	for _, b := range rec.log() {
		c, err := DecodeCommand(b)
		e.must(err)
		sm.apply(c)
	}
	if dump(m) != dump(mem) {
		t.Fatal("replaying the command log does not reproduce the state")
	}
	checkQuotaExact(t, m)
}

// TestQuotaRecountOldStore: a store formatted before quotas (no counter
// quotas, no accounts) gets its usage counted at its next start; a
// damaged account is repaired by CheckQuota with repair.
func TestQuotaRecountOldStore(t *testing.T) {
	e := permEnv(t)
	pub, err := e.resolve("/pub")
	e.must(err)
	a, err := e.srv.Create(asU, proto.CreateIn{Parent: pub.Ino, Name: "f", Mode: 0644})
	e.must(err)
	_, err = e.srv.WriteDone(asU, a.Ino, 999, 0, proto.NoBlocks)
	e.must(err)
	e.must(e.srv.SetQuota(asRoot, metarpc.QuotaUser, credU.Uid, metarpc.QuotaAmounts{Inodes: 50}))
	want := e.usage(metarpc.QuotaUser, credU.Uid)
	e.srv.Close()
	// Make it look like a store of before quotas: usage never counted.
	b := e.st.NewBatch()
	b.DeletePrefix([]byte{store.PrefixQuota})
	b.Delete(store.CounterKey(store.CounterQuotas))
	e.must(b.Commit(true))
	e.start()
	if got := e.usage(metarpc.QuotaUser, credU.Uid); got != want {
		t.Fatalf("after the recount at start u uses %+v, want %+v", got, want)
	}
	checkQuotaExact(t, e.st)
	// Damage one account; check finds it, repair mends it, limits stay.
	b = e.st.NewBatch()
	b.Set(store.QuotaKey(uint8(metarpc.QuotaUser), credU.Uid), quotaRecord{usage: metarpc.QuotaAmounts{Inodes: 1}, limits: metarpc.QuotaAmounts{Inodes: 50}}.encode())
	e.must(b.Commit(true))
	cs, err := e.srv.CheckQuota(asRoot, false)
	e.must(err)
	differ := 0
	for _, c := range cs {
		if c.Recorded != c.Counted {
			differ++
		}
	}
	if differ != 1 {
		t.Fatalf("check found %d accounts that differ, want 1: %+v", differ, cs)
	}
	if _, err := e.srv.CheckQuota(asU, true); !errors.Is(err, syscall.EPERM) {
		t.Fatalf("repair by a user: %v, want EPERM", err)
	}
	_, err = e.srv.CheckQuota(asRoot, true)
	e.must(err)
	checkQuotaExact(t, e.st)
	q, err := e.srv.GetQuota(ctx, metarpc.QuotaUser, credU.Uid)
	e.must(err)
	if q.Usage != want || q.Limits.Inodes != 50 {
		t.Fatalf("after repair: %+v, want usage %+v and the limit kept", q, want)
	}
}
