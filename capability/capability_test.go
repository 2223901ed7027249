package capability

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/weft-fs/weft/proto"
)

var (
	secret = bytes.Repeat([]byte{7}, KeySize)
	t0     = time.Unix(1_800_000_000, 0)
	sample = Capability{Ino: 1 << 40, Gen: 0x9e3779b97f4a7c15, Rights: proto.AccessRead, Issued: t0, Expiry: t0.Add(10 * time.Minute), Holder: "client-3"}
)

func mustKey(t testing.TB, id uint8, s []byte) *Key {
	k, err := NewKey(id, s)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestSignVerify(t *testing.T) {
	k := mustKey(t, 0, secret)
	for _, c := range []Capability{sample, {Ino: 5, Rights: proto.AccessReadWrite, Issued: t0, Expiry: t0.Add(time.Second)}} {
		b, err := k.Sign(c)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != 68+len(c.Holder) {
			t.Fatalf("%d bytes", len(b))
		}
		got, err := k.Verify(b, t0.Add(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if got.Ino != c.Ino || got.Gen != c.Gen || got.Rights != c.Rights || !got.Issued.Equal(c.Issued) || !got.Expiry.Equal(c.Expiry) || got.Holder != c.Holder {
			t.Fatalf("verified %+v, signed %+v", got, c)
		}
		p, err := Parse(b)
		if err != nil || p != got {
			t.Fatalf("Parse = %+v, %v; Verify %+v", p, err, got)
		}
	}
}

// Flipping any bit of any byte (every field, and the MAC) is refused.
func TestTamper(t *testing.T) {
	k := mustKey(t, 0, secret)
	b, _ := k.Sign(sample)
	for i := range b {
		for bit := range 8 {
			x := bytes.Clone(b)
			x[i] ^= 1 << bit
			if c, err := k.Verify(x, t0); err == nil {
				t.Fatalf("byte %d bit %d flipped: accepted as %+v", i, bit, c)
			}
		}
	}
	for n := range len(b) {
		if _, err := k.Verify(b[:n], t0); err == nil {
			t.Fatalf("truncated to %d: accepted", n)
		}
	}
	if _, err := k.Verify(append(bytes.Clone(b), 0), t0); err == nil {
		t.Fatal("trailing byte accepted")
	}
	if _, err := k.Verify(nil, t0); !errors.Is(err, ErrMissing) {
		t.Fatalf("no capability: %v", err)
	}
}

func TestWrongKey(t *testing.T) {
	b, _ := mustKey(t, 0, secret).Sign(sample)
	other := bytes.Clone(secret)
	other[31] ^= 1
	if _, err := mustKey(t, 0, other).Verify(b, t0); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("other key: %v", err)
	}
	if _, err := mustKey(t, 1, secret).Verify(b, t0); !errors.Is(err, ErrKey) {
		t.Fatalf("other key id: %v", err)
	}
	if _, err := NewKey(0, secret[:16]); err == nil {
		t.Fatal("short key accepted")
	}
}

func TestExpiry(t *testing.T) {
	k := mustKey(t, 0, secret)
	b, _ := k.Sign(sample)
	for _, tc := range []struct {
		at time.Time
		ok bool
	}{
		{t0.Add(-time.Hour), true}, // a verifier whose clock is behind
		{sample.Expiry, true},
		{sample.Expiry.Add(Skew), true},
		{sample.Expiry.Add(Skew + time.Nanosecond), false},
		{sample.Expiry.Add(time.Hour), false},
	} {
		_, err := k.Verify(b, tc.at)
		if tc.ok != (err == nil) || (!tc.ok && !errors.Is(err, ErrExpired)) {
			t.Errorf("at expiry%+v: %v", tc.at.Sub(sample.Expiry), err)
		}
	}
}

func TestAllows(t *testing.T) {
	ro, rw := sample, sample
	rw.Rights = proto.AccessReadWrite
	anyone := rw
	anyone.Holder = ""
	for _, tc := range []struct {
		c    Capability
		ino  proto.Ino
		gen  uint64
		want proto.Access
		peer string
		err  error
	}{
		{ro, sample.Ino, sample.Gen, proto.AccessRead, "client-3", nil},
		{ro, sample.Ino, sample.Gen, proto.AccessWrite, "client-3", ErrRights},
		{ro, sample.Ino, sample.Gen, proto.AccessReadWrite, "client-3", ErrRights},
		{ro, sample.Ino + 1, sample.Gen, proto.AccessRead, "client-3", ErrWrongInode},
		// The same inode number, another generation: a reused number.
		{ro, sample.Ino, sample.Gen + 1, proto.AccessRead, "client-3", ErrWrongGen},
		{rw, sample.Ino, 0, proto.AccessWrite, "client-3", ErrWrongGen},
		{ro, sample.Ino, sample.Gen, proto.AccessRead, "client-4", ErrHolder},
		{rw, sample.Ino, sample.Gen, proto.AccessWrite, "client-3", nil},
		{anyone, sample.Ino, sample.Gen, proto.AccessWrite, "whoever", nil},
	} {
		if err := tc.c.Allows(tc.ino, tc.gen, tc.want, tc.peer); !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
			t.Errorf("%+v allows(%d, %v, %q) = %v, want %v", tc.c, tc.ino, tc.want, tc.peer, err, tc.err)
		}
	}
}

func TestSignRefuses(t *testing.T) {
	k := mustKey(t, 0, secret)
	c := sample
	c.Holder = string(make([]byte, MaxHolder+1))
	if _, err := k.Sign(c); err == nil {
		t.Fatal("long holder signed")
	}
	c = sample
	c.Rights = 4
	if _, err := k.Sign(c); err == nil {
		t.Fatal("unknown rights signed")
	}
}

func FuzzVerify(f *testing.F) {
	k := mustKey(f, 0, secret)
	b, _ := k.Sign(sample)
	f.Add(b)
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, b []byte) {
		p, perr := Parse(b)
		c, err := k.Verify(b, t0)
		if err != nil {
			return
		}
		if perr != nil || p != c {
			t.Fatalf("Verify accepted what Parse refused: %v", perr)
		}
		// Only what Sign produces verifies.
		if again, _ := k.Sign(c); !bytes.Equal(again, b) {
			t.Fatalf("%+v verified but does not re-sign to its input", c)
		}
	})
}

// BenchmarkVerify is the storage server's cost per request: verify the MAC
// and expiry, then check inode, rights and holder.
func BenchmarkVerify(b *testing.B) {
	k := mustKey(b, 0, secret)
	c, _ := k.Sign(sample)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			v, err := k.Verify(c, t0)
			if err != nil {
				b.Fatal(err)
			}
			if err := v.Allows(sample.Ino, sample.Gen, proto.AccessRead, "client-3"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// A version 1 capability (no generation) is refused, not read as version 2.
func TestVersion1Refused(t *testing.T) {
	k := mustKey(t, 0, secret)
	b, _ := k.Sign(sample)
	b[0] = 1
	if _, err := k.Verify(b, t0); !errors.Is(err, ErrVersion) {
		t.Fatalf("version 1: %v", err)
	}
}
