package store

import (
	"errors"
	"fmt"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func impls(t *testing.T) map[string]Store {
	p, err := OpenPebble(t.TempDir(), PebbleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pm, err := OpenPebble("mem", PebbleOptions{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	return map[string]Store{"mem": NewMem(), "pebble": p, "pebble-inmem": pm}
}

func TestStores(t *testing.T) {
	for name, s := range impls(t) {
		t.Run(name, func(t *testing.T) {
			defer s.Close()
			if _, err := s.Get([]byte("a")); !errors.Is(err, ErrNotFound) {
				t.Fatalf("get missing: %v", err)
			}
			b := s.NewBatch()
			for i := range 10 {
				b.Set([]byte(fmt.Sprintf("k%d", i)), []byte{byte(i)})
			}
			b.Set([]byte("p/1"), nil)
			b.Set([]byte("p/2"), []byte("x"))
			b.Set([]byte("q"), []byte("y"))
			if b.Len() != 13 {
				t.Fatalf("len %d", b.Len())
			}
			// Nothing is visible before commit.
			if _, err := s.Get([]byte("q")); !errors.Is(err, ErrNotFound) {
				t.Fatal("uncommitted write visible")
			}
			if err := b.Commit(false); err != nil {
				t.Fatal(err)
			}
			if err := b.Commit(false); err == nil {
				t.Fatal("batch committed twice")
			}
			if v, err := s.Get([]byte("k3")); err != nil || len(v) != 1 || v[0] != 3 {
				t.Fatalf("get: %v %v", v, err)
			}
			var keys []string
			s.Scan([]byte("k2"), []byte("k5"), func(k, v []byte) bool { keys = append(keys, string(k)); return true })
			if fmt.Sprint(keys) != "[k2 k3 k4]" {
				t.Fatalf("scan: %v", keys)
			}
			keys = nil
			s.Scan([]byte("k"), nil, func(k, v []byte) bool { keys = append(keys, string(k)); return len(keys) < 2 })
			if fmt.Sprint(keys) != "[k0 k1]" {
				t.Fatalf("scan with stop: %v", keys)
			}
			b = s.NewBatch()
			b.DeletePrefix([]byte("p/"))
			b.Delete([]byte("k0"))
			b.Set([]byte("k1"), []byte("new"))
			if err := b.Commit(true); err != nil {
				t.Fatal(err)
			}
			if err := s.Sync(); err != nil {
				t.Fatal(err)
			}
			n := 0
			s.Scan([]byte("p"), PrefixEnd([]byte("p")), func(k, v []byte) bool { n++; return true })
			if n != 0 {
				t.Fatalf("%d keys left under prefix", n)
			}
			if _, err := s.Get([]byte("k0")); !errors.Is(err, ErrNotFound) {
				t.Fatal("deleted key present")
			}
			if v, _ := s.Get([]byte("k1")); string(v) != "new" {
				t.Fatalf("overwrite: %q", v)
			}
			if v, _ := s.Get([]byte("q")); string(v) != "y" {
				t.Fatalf("neighbour of prefix: %q", v)
			}
			// A closed batch commits nothing.
			b = s.NewBatch()
			b.Set([]byte("z"), nil)
			b.Close()
			if _, err := s.Get([]byte("z")); !errors.Is(err, ErrNotFound) {
				t.Fatal("closed batch applied")
			}
		})
	}
}

// TestViews: a view reads the store as it was when taken, whatever is
// committed after (a key deleted, one changed, one added), through Get
// and Scan, while the store itself reads the new state.
func TestViews(t *testing.T) {
	for name, s := range impls(t) {
		t.Run(name, func(t *testing.T) {
			defer s.Close()
			b := s.NewBatch()
			b.Set([]byte("d/b"), []byte("3"))
			b.Set([]byte("d/c"), []byte("7"))
			b.Set([]byte("i/7"), []byte("seven"))
			if err := b.Commit(false); err != nil {
				t.Fatal(err)
			}
			v, err := s.View()
			if err != nil {
				t.Fatal(err)
			}
			// A rename of b over c: c names 3, inode 7 is gone.
			b = s.NewBatch()
			b.Delete([]byte("d/b"))
			b.Set([]byte("d/c"), []byte("3"))
			b.Delete([]byte("i/7"))
			b.Set([]byte("d/e"), []byte("9"))
			if err := b.Commit(false); err != nil {
				t.Fatal(err)
			}
			list := func(r Reader) string {
				var kv []string
				if err := r.Scan([]byte("d/"), PrefixEnd([]byte("d/")), func(k, v []byte) bool {
					kv = append(kv, string(k)+"="+string(v))
					return true
				}); err != nil {
					t.Fatal(err)
				}
				return fmt.Sprint(kv)
			}
			if got := list(v); got != "[d/b=3 d/c=7]" {
				t.Fatalf("view scans %s; want the entries as they were", got)
			}
			if got, err := v.Get([]byte("i/7")); err != nil || string(got) != "seven" {
				t.Fatalf("view gets %q, %v; want the deleted key's value", got, err)
			}
			if got := list(s); got != "[d/c=3 d/e=9]" {
				t.Fatalf("store scans %s after the view was taken; want the new state", got)
			}
			v.Close()
			if _, err := s.Get([]byte("i/7")); !errors.Is(err, ErrNotFound) {
				t.Fatalf("store gets %v for the deleted key", err)
			}
		})
	}
}

func TestPrefixEnd(t *testing.T) {
	cases := []struct{ in, want []byte }{
		{[]byte("a"), []byte("b")},
		{[]byte{1, 0xff}, []byte{2}},
		{[]byte{0xff, 0xff}, nil},
		{[]byte{}, nil},
	}
	for _, c := range cases {
		if got := PrefixEnd(c.in); string(got) != string(c.want) || (got == nil) != (c.want == nil) {
			t.Errorf("PrefixEnd(%x) = %x, want %x", c.in, got, c.want)
		}
	}
}

func TestGCKey(t *testing.T) {
	tg, ino, stripe, gen, ok := ParseGCKey(GCKey(7, 1<<40, 3, 0))
	if !ok || tg != 7 || ino != 1<<40 || stripe != 3 || gen != 0 {
		t.Fatalf("%d %d %d %d %v", tg, ino, stripe, gen, ok)
	}
	if k := GCKey(7, 1<<40, 3, 0); len(k) != 17 {
		t.Fatalf("generation 0 key of %d bytes, want the old 17", len(k))
	}
	tg, ino, stripe, gen, ok = ParseGCKey(GCKey(7, 1<<40, 3, 1<<63+5))
	if !ok || tg != 7 || ino != 1<<40 || stripe != 3 || gen != 1<<63+5 {
		t.Fatalf("%d %d %d %d %v", tg, ino, stripe, gen, ok)
	}
	if _, _, _, _, ok := ParseGCKey([]byte("g123")); ok {
		t.Fatal("short key parsed")
	}
}

// TestAppendKeys: each Append form appends the same bytes as its plain
// form, after what dst held.
func TestAppendKeys(t *testing.T) {
	sess := [16]byte{1, 2, 3}
	for _, tc := range []struct{ got, want []byte }{
		{AppendInodeKey([]byte("x"), 42), append([]byte("x"), InodeKey(42)...)},
		{AppendDirentKey([]byte("x"), 7, "name"), append([]byte("x"), DirentKey(7, "name")...)},
		{AppendReplyKey([]byte("x"), sess, "client", 9), append([]byte("x"), ReplyKey(ReplyPrefix(sess, "client"), 9)...)},
		{AppendQuotaKey([]byte("x"), 2, 1000), append([]byte("x"), QuotaKey(2, 1000)...)},
	} {
		if string(tc.got) != string(tc.want) {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

// TestBatchCopies: a batch keeps what Set was given, though the caller
// changes its buffers after the call.
func TestBatchCopies(t *testing.T) {
	for name, s := range impls(t) {
		t.Run(name, func(t *testing.T) {
			defer s.Close()
			b := s.NewBatch()
			k, v := []byte("key"), []byte("value")
			b.Set(k, v)
			copy(k, "xxx")
			copy(v, "xxxxx")
			if err := b.Commit(false); err != nil {
				t.Fatal(err)
			}
			if got, err := s.Get([]byte("key")); err != nil || string(got) != "value" {
				t.Fatalf("got %q, %v", got, err)
			}
		})
	}
}
