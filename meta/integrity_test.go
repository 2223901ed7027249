package meta

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/weft-fs/weft/internal/testutil"
	"github.com/weft-fs/weft/layout"
	"github.com/weft-fs/weft/meta/store"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/wire"
)

// integrityFill creates n directories through a Server on a pebble store in
// dir (each an acknowledged, synced change), then stops cleanly.
func integrityFill(t *testing.T, dir string, n int, flush bool) {
	t.Helper()
	st, err := store.OpenPebble(dir, store.PebbleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Options{Store: st, Seed: 1, OrphanGrace: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", 200) // entries of a realistic size
	for i := range n {
		if _, err := srv.Mkdir(context.Background(), proto.RootIno, fmt.Sprintf("d%04d-%s", i, long), 0o755, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	srv.Close()
	if flush {
		// Reopening flushes the WAL's contents into a table (OpenPebble
		// rotates the WAL after replay).
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		if st, err = store.OpenPebble(dir, store.PebbleOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}

// integrityOpen starts a Server on the store in dir the way Run does, and
// returns the error that refused it, or nil after checking it serves all
// want entries.
func integrityOpen(t *testing.T, dir string, want int) error {
	t.Helper()
	log, logs := testutil.NewLogger()
	st, err := store.OpenPebble(dir, store.PebbleOptions{Logger: log})
	if err != nil {
		return err
	}
	defer st.Close()
	srv, err := New(Options{Store: st, Seed: 1, OrphanGrace: time.Hour, Logger: log})
	if err != nil {
		return err
	}
	defer srv.Close()
	ents, err := srv.ReadDir(context.Background(), proto.RootIno, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != want {
		t.Fatalf("served %d of %d acknowledged entries with no error; log:\n%s", len(ents), want, logs.String())
	}
	return nil
}

func flip(t *testing.T, path string, off int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[off] ^= 0x40
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// The measured failures of issue 8, each now a refusal to start with an
// error wrapping store.ErrCorrupt: 200 acknowledged mkdirs, then the
// pebble files are damaged while the server is down. (200: their batches,
// quota accounts included, fit pebble's first memtable, so the store has
// one WAL, which the cases damage.)
func TestIntegrityDamagedStoreRefused(t *testing.T) {
	const n = 200
	cases := []struct {
		name   string
		flush  bool
		damage func(t *testing.T, dir string)
		want   error // besides store.ErrCorrupt
	}{
		{"wal-byte-in-middle", false, func(t *testing.T, dir string) {
			p, size := testutil.Largest(t, vfs.Default, dir, ".log")
			flip(t, p, size/2)
		}, nil},
		{"wal-byte-in-last-block", false, func(t *testing.T, dir string) {
			// pebble cannot tell this from a torn tail: the mark can.
			p, size := testutil.Largest(t, vfs.Default, dir, ".log")
			flip(t, p, size-2000)
		}, ErrRollback},
		{"wal-truncated", false, func(t *testing.T, dir string) {
			p, size := testutil.Largest(t, vfs.Default, dir, ".log")
			if err := os.Truncate(p, size/2); err != nil {
				t.Fatal(err)
			}
		}, ErrRollback},
		{"wal-removed", false, func(t *testing.T, dir string) {
			p, _ := testutil.Largest(t, vfs.Default, dir, ".log")
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
		}, ErrRollback},
		{"sst-byte", true, func(t *testing.T, dir string) {
			p, size := testutil.Largest(t, vfs.Default, dir, ".sst")
			flip(t, p, size/3)
		}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			integrityFill(t, dir, n, c.flush)
			// An undamaged copy serves everything (a copy: opening moves
			// the WAL's contents into a table).
			undamaged := filepath.Join(t.TempDir(), "copy")
			if err := os.CopyFS(undamaged, os.DirFS(dir)); err != nil {
				t.Fatal(err)
			}
			if err := integrityOpen(t, undamaged, n); err != nil {
				t.Fatalf("undamaged store refused: %v", err)
			}
			c.damage(t, dir)
			err := integrityOpen(t, dir, n)
			if err == nil {
				t.Fatal("damaged store served (all entries present: the damage missed?)")
			}
			if !errors.Is(err, store.ErrCorrupt) || (c.want != nil && !errors.Is(err, c.want)) {
				t.Fatalf("refused with %v; want store.ErrCorrupt %v", err, c.want)
			}
			t.Logf("refused: %v", err)
		})
	}
}

// While the server runs, the mark never claims more than the store has
// applied (it records only what a synced batch made durable, so a store
// that kept all its acknowledged changes is never refused; a crash at any
// moment is TestAckedIsDurable's), and after Close it is exact.
func TestIntegrityMarkNeverLeads(t *testing.T) {
	dir := t.TempDir()
	st, err := store.OpenPebble(dir, store.PebbleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Options{Store: st, Seed: 1, OrphanGrace: time.Hour, MarkInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if _, err := srv.Mkdir(context.Background(), proto.RootIno, fmt.Sprint("d", i), 0o755, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	mk, ok, err := st.ReadMark()
	if err != nil || !ok {
		t.Fatalf("mark: %v %v", ok, err)
	}
	applied, err := getCounter(st, store.CounterApplied)
	if err != nil {
		t.Fatal(err)
	}
	if mk.Applied > applied {
		t.Fatalf("mark claims %d applied, the store has %d", mk.Applied, applied)
	}
	srv.Close()
	mk, _, _ = st.ReadMark()
	if mk.Applied != applied || applied < 51 {
		t.Fatalf("after Close the mark is %d, the store applied %d (want equal, ≥ 51)", mk.Applied, applied)
	}
	st.Close()
}

// AcceptRollback serves an older store on purpose and rewrites the mark,
// so the next start needs no flag.
func TestIntegrityAcceptRollback(t *testing.T) {
	dir := t.TempDir()
	integrityFill(t, dir, 200, false)
	p, size := testutil.Largest(t, vfs.Default, dir, ".log")
	if err := os.Truncate(p, size/2); err != nil {
		t.Fatal(err)
	}
	if err := integrityOpen(t, dir, 200); !errors.Is(err, ErrRollback) {
		t.Fatalf("truncated: %v", err)
	}
	st, err := store.OpenPebble(dir, store.PebbleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Options{Store: st, Seed: 1, OrphanGrace: time.Hour, AcceptRollback: true})
	if err != nil {
		t.Fatalf("AcceptRollback: %v", err)
	}
	ents, _ := srv.ReadDir(context.Background(), proto.RootIno, "", 0)
	srv.Close()
	st.Close()
	if len(ents) == 0 || len(ents) >= 200 {
		t.Fatalf("%d entries after the rollback", len(ents))
	}
	st, err = store.OpenPebble(dir, store.PebbleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	srv, err = New(Options{Store: st, Seed: 1, OrphanGrace: time.Hour})
	if err != nil {
		t.Fatalf("restart after an accepted rollback: %v", err)
	}
	srv.Close()
}

// A new store gets a file system id at format; it survives restarts, and
// the durable mark records it.
func TestFSID(t *testing.T) {
	dir := t.TempDir()
	fsid := func() string {
		st, err := store.OpenPebble(dir, store.PebbleOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		srv, err := New(Options{Store: st, Seed: 1, OrphanGrace: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		srv.Close()
		mk, ok, err := st.ReadMark()
		if err != nil || !ok || mk.FSID != srv.FSID() {
			t.Fatalf("mark %+v %v %v; fsid %q", mk, ok, err, srv.FSID())
		}
		return srv.FSID()
	}
	a := fsid()
	if len(a) != 36 {
		t.Fatalf("fsid %q", a)
	}
	if b := fsid(); b != a {
		t.Fatalf("fsid changed across a restart: %s then %s", a, b)
	}
}

// Another file system's store put into a directory is refused; so is a
// pebble database that is not a weft store.
func TestFSIDForeignStoreRefused(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	integrityFill(t, a, 3, false)
	integrityFill(t, b, 3, false)
	// b's database, a's mark.
	mark, err := os.ReadFile(filepath.Join(a, store.MarkFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b, store.MarkFile), mark, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := integrityOpen(t, b, 3); !errors.Is(err, ErrForeignStore) {
		t.Fatalf("another file system's store: %v, want ErrForeignStore", err)
	}

	c := t.TempDir()
	st, err := store.OpenPebble(c, store.PebbleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bt := st.NewBatch()
	bt.Set([]byte("someone else's key"), []byte("v"))
	if err := bt.Commit(true); err != nil {
		t.Fatal(err)
	}
	st.Close()
	if err := integrityOpen(t, c, 0); !errors.Is(err, store.ErrNotStore) {
		t.Fatalf("a pebble database of another program: %v, want store.ErrNotStore", err)
	}
}

// A store formatted before file system ids adopts one at its next start,
// keeping its contents.
func TestFSIDAdoptedByOldStore(t *testing.T) {
	st := store.NewMem()
	srv, err := New(Options{Store: st, Seed: 1, OrphanGrace: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Mkdir(context.Background(), proto.RootIno, "d", 0o755, 0, 0); err != nil {
		t.Fatal(err)
	}
	srv.Close()
	b := st.NewBatch() // make it a version 1 store
	b.Delete(store.CounterKey(store.CounterFSID))
	b.Set(store.CounterKey(store.CounterFormat), u64(1))
	if err := b.Commit(true); err != nil {
		t.Fatal(err)
	}
	if err := st.WriteMark(store.Mark{}); err != nil {
		t.Fatal(err)
	}
	srv, err = New(Options{Store: st, Seed: 1, OrphanGrace: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if srv.FSID() == "" {
		t.Fatal("no fsid adopted")
	}
	if _, err := srv.Lookup(context.Background(), proto.RootIno, "d"); err != nil {
		t.Fatalf("contents lost on upgrade: %v", err)
	}
	if v, _ := getCounter(st, store.CounterFormat); v != formatVersion {
		t.Fatalf("format %d after upgrade", v)
	}
}

// Every regular file gets its own non-zero generation, kept across a
// restart; reclaiming it queues its objects with that generation.
func TestGenerations(t *testing.T) {
	ctx := context.Background()
	st := store.NewMem()
	srv, err := New(Options{Store: st, Seed: 1, OrphanGrace: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.RegisterTarget(ctx, "u1", proto.TargetInfo{Addr: "h:1", Total: 1 << 30, Free: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	a, err := srv.Create(ctx, proto.CreateIn{Parent: proto.RootIno, Name: "a", Mode: 0o644})
	if err != nil {
		t.Fatal(err)
	}
	b, err := srv.Create(ctx, proto.CreateIn{Parent: proto.RootIno, Name: "b", Mode: 0o644})
	if err != nil {
		t.Fatal(err)
	}
	d, err := srv.Mkdir(ctx, proto.RootIno, "d", 0o755, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if a.Gen == 0 || b.Gen == 0 || a.Gen == b.Gen || d.Gen != 0 {
		t.Fatalf("generations: files %#x %#x, directory %#x", a.Gen, b.Gen, d.Gen)
	}
	srv.Close()
	// A short grace period: an unlink in the grace period after a restart
	// leaves an orphan, reclaimed when it ends.
	srv, err = New(Options{Store: st, Seed: 1, OrphanGrace: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if got, err := srv.GetAttr(ctx, a.Ino); err != nil || got.Gen != a.Gen {
		t.Fatalf("after restart: %#x %v, want %#x", got.Gen, err, a.Gen)
	}
	if err := srv.Unlink(ctx, proto.RootIno, "a"); err != nil {
		t.Fatal(err)
	}
	var q []GCObject
	waitFor(t, "the reclaim of the unlinked file", func() bool {
		q, err = srv.GCQueue()
		return err != nil || len(q) > 0
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(q) != 1 || q[0].Obj != (proto.ObjectID{Ino: a.Ino, Stripe: 0, Gen: a.Gen}) {
		t.Fatalf("GC queue %+v, want inode %d's object of generation %#x", q, a.Ino, a.Gen)
	}
}

// Inode records of versions 1 (before generations) and 2 (layout format
// 1, before kinds and blocks) still decode: version 1 with generation 0, so
// files made then keep their objects' old names, both as RAID-0 layouts
// and with their size in blocks.
func TestInodeOldVersions(t *testing.T) {
	l := layout.Layout{StripeSize: 1 << 20, StripeCount: 2, Targets: []proto.TargetID{3, 4}}
	n := &inode{Attr: proto.Attr{Ino: 5, Mode: 0o100644, Nlink: 1, Size: 9, Layout: l, Gen: 0xabc, Blocks: 77}, Written: true}
	old := func(version uint8) []byte {
		e := wire.NewEncoder(64)
		e.U8(version)
		n.Attr.EncodeFields(e, func(e *wire.Encoder, l layout.Layout) { l.EncodeV1(e) })
		e.B = e.B[:len(e.B)-8] // no blocks
		if version == 1 {
			e.B = e.B[:len(e.B)-8] // no generation
		}
		e.U64(uint64(n.Parent))
		e.Bool(n.Written)
		e.String(n.Symlink)
		return e.B
	}
	got, err := decodeInode(old(1))
	if err != nil || got.Gen != 0 || got.Size != 9 || got.Blocks != 1 || !got.Written || got.Ino != 5 || !reflect.DeepEqual(got.Layout, l) {
		t.Fatalf("version 1: %+v %v", got, err)
	}
	if got, err := decodeInode(old(2)); err != nil || got.Gen != 0xabc || got.Blocks != 1 || !reflect.DeepEqual(got.Layout, l) {
		t.Fatalf("version 2: %+v %v", got, err)
	}
	// Version 3 keeps a mirror layout with its stale slots.
	n.Layout = layout.Layout{Kind: layout.Mirror, Mirror: 2, StripeSize: 1 << 20, StripeCount: 1, Targets: []proto.TargetID{3, 4}, Stale: []uint32{1}}
	if got, err := decodeInode(n.encode()); err != nil || got.Gen != 0xabc || got.Blocks != 77 || !reflect.DeepEqual(got.Layout, n.Layout) {
		t.Fatalf("version 3: %+v %v", got, err)
	}
}
