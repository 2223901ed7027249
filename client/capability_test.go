package client

import (
	"bytes"
	"context"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/weft-fs/weft/capability"
	"github.com/weft-fs/weft/proto"
)

// capClock is the metadata and storage servers' clock in these tests: the
// real one plus an offset a test can jump.
type capClock struct{ offset atomic.Int64 }

func (c *capClock) now() time.Time        { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *capClock) jump(d time.Duration)  { c.offset.Add(int64(d)) }
func (c *capClock) storageNow() time.Time { return c.now().Add(capability.Skew) }

// newCapEnv is an env whose metadata server issues capabilities of the
// given lifetime and whose storage requires them. The storage clock runs
// Skew ahead, so that a capability is refused exactly at its expiry.
func newCapEnv(t *testing.T, lifetime time.Duration) (*env, *capClock) {
	e := newEnv(t, 64<<10, 2, Config{})
	k, err := capability.NewKey(0, bytes.Repeat([]byte{9}, capability.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	clk := &capClock{}
	e.meta.IssueCapabilities(k, lifetime, clk.now)
	e.store.RequireCapabilities(k, clk.storageNow)
	return e, clk
}

func TestOpenAccess(t *testing.T) {
	for _, tc := range []struct {
		flags uint32
		want  proto.Access
	}{
		{syscall.O_RDONLY, proto.AccessRead},
		{syscall.O_WRONLY, proto.AccessWrite},
		{syscall.O_RDWR, proto.AccessReadWrite},
		{syscall.O_RDONLY | syscall.O_TRUNC, proto.AccessReadWrite},
		{syscall.O_WRONLY | syscall.O_APPEND | syscall.O_CREAT, proto.AccessWrite},
		{syscall.O_RDONLY | fmodeExec, proto.AccessExec},
	} {
		if got := OpenAccess(tc.flags); got != tc.want {
			t.Errorf("OpenAccess(%#o) = %v, want %v", tc.flags, got, tc.want)
		}
	}
}

// Every storage request carries a capability with the right it needs:
// the storage refuses none, and handles opened read-only and write-only
// together give the inode both rights without asking for more.
func TestCapabilitiesAttached(t *testing.T) {
	e, _ := newCapEnv(t, time.Minute)
	ctx := context.Background()
	a, err := e.c.Create(ctx, proto.CreateIn{Parent: proto.RootIno, Name: "f", Mode: syscall.S_IFREG | 0o644})
	if err != nil {
		t.Fatal(err)
	}
	w, _, err := e.c.Open(ctx, a.Ino, proto.AccessWrite)
	if err != nil {
		t.Fatal(err)
	}
	r, _, err := e.c.Open(ctx, a.Ino, proto.AccessRead)
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("0123456789"), 20000) // several stripes and chunks
	mustWrite(t, w, data, 0)
	if err := w.Fsync(ctx); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	for off := 0; off < len(data); off += 4096 { // sequential: read-ahead too
		n, err := r.Read(ctx, got[off:min(off+4096, len(data))], uint64(off))
		if err != nil || n != min(4096, len(data)-off) {
			t.Fatalf("read at %d: %d, %v", off, n, err)
		}
	}
	if !bytes.Equal(got, data) {
		t.Fatal("read back different bytes")
	}
	if _, err := w.Truncate(ctx, 100); err != nil {
		t.Fatal(err)
	}
	for _, f := range []*File{w, r} {
		if err := f.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.store.Refused(); n != 0 {
		t.Fatalf("storage refused %d requests", n)
	}
	if n := e.meta.CapabilityCalls(); n != 0 {
		t.Fatalf("%d Capability calls; the opens' capabilities should have sufficed", n)
	}
}

// A file that stays open past its capability's lifetime keeps working:
// the client renews the capability before it expires.
func TestCapabilityRenewedWhileOpen(t *testing.T) {
	const lifetime = 2 * time.Second
	e, _ := newCapEnv(t, lifetime)
	ctx := context.Background()
	f, _ := e.create(t, "long")
	opened := time.Now()
	mustWrite(t, f, []byte("before"), 0)
	if err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// Two renewals: the second comes 4/3 lifetimes after the open, when
	// the capability of the open has expired.
	deadline := time.Now().Add(time.Minute)
	for e.meta.CapabilityCalls() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d renewals after a minute", e.meta.CapabilityCalls())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if time.Since(opened) <= lifetime {
		t.Fatalf("two renewals within the first lifetime (%v)", time.Since(opened))
	}
	mustWrite(t, f, []byte("after!"), 6)
	if err := f.Fsync(ctx); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 12)
	if n, err := f.Read(ctx, buf, 0); err != nil || string(buf[:n]) != "beforeafter!" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	if n := e.store.Refused(); n != 0 {
		t.Fatalf("storage refused %d requests: renewal came too late", n)
	}
	if err := f.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A capability that expired without being renewed (the client was
// suspended, say) is renewed when storage refuses it, and the request
// retried once.
func TestCapabilityRenewedAfterRefusal(t *testing.T) {
	e, clk := newCapEnv(t, time.Minute)
	ctx := context.Background()
	f, _ := e.create(t, "f")
	mustWrite(t, f, []byte("hello"), 0)
	if err := f.Fsync(ctx); err != nil {
		t.Fatal(err)
	}
	clk.jump(time.Hour) // both servers' clocks: the capability is long expired
	buf := make([]byte, 5)
	if n, err := f.Read(ctx, buf, 0); err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	if e.store.Refused() == 0 || e.meta.CapabilityCalls() != 1 {
		t.Fatalf("%d refusals and %d renewals; want some and one", e.store.Refused(), e.meta.CapabilityCalls())
	}
	// The renewed capability (read-write, as opened) serves writes too.
	refused := e.store.Refused()
	mustWrite(t, f, []byte("HELLO"), 0)
	if err := f.Fsync(ctx); err != nil {
		t.Fatal(err)
	}
	if e.store.Refused() != refused || e.meta.CapabilityCalls() != 1 {
		t.Fatalf("write after renewal: %d more refusals, %d renewals", e.store.Refused()-refused, e.meta.CapabilityCalls())
	}
	if err := f.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Truncating a file no handle has open here first asks for a capability.
func TestTruncateByPathTakesCapability(t *testing.T) {
	e, _ := newCapEnv(t, time.Minute)
	ctx := context.Background()
	f, a := e.create(t, "f")
	mustWrite(t, f, bytes.Repeat([]byte("x"), 200<<10), 0)
	if err := f.Release(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := e.c.SetAttr(ctx, a.Ino, proto.SetAttrIn{Valid: proto.SetSize, Size: 1000})
	if err != nil || got.Size != 1000 {
		t.Fatalf("truncate: size %d, %v", got.Size, err)
	}
	if e.store.Refused() != 0 || e.meta.CapabilityCalls() != 1 {
		t.Fatalf("%d refusals, %d capability calls; want 0 and 1", e.store.Refused(), e.meta.CapabilityCalls())
	}
}

// Without capabilities a storage that requires them refuses everything,
// so the tests above would catch a request sent without one.
func TestStorageRequiresCapability(t *testing.T) {
	e, _ := newCapEnv(t, time.Minute)
	e.meta.IssueCapabilities(nil, 0, nil)
	ctx := context.Background()
	f, _ := e.create(t, "f")
	mustWrite(t, f, []byte("x"), 0)
	if err := f.Fsync(ctx); err == nil {
		t.Fatal("write without a capability succeeded")
	}
	if e.store.Refused() == 0 {
		t.Fatal("storage refused nothing")
	}
	f.Release(ctx)
}

// A file opened for exec holds a read capability, renewed as opened (for
// exec, which an execute-only file allows, not for read).
func TestExecHandleReads(t *testing.T) {
	e, clk := newCapEnv(t, time.Minute)
	ctx := context.Background()
	w, a := e.create(t, "bin")
	mustWrite(t, w, []byte("#!binary"), 0)
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	f, _, err := e.c.Open(ctx, a.Ino, proto.AccessExec)
	if err != nil {
		t.Fatal(err)
	}
	clk.jump(time.Hour) // force a renewal on the next read
	buf := make([]byte, 8)
	if n, err := f.Read(ctx, buf, 0); err != nil || string(buf[:n]) != "#!binary" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	if got := e.meta.LastCapabilityAccess(); got != proto.AccessExec {
		t.Fatalf("renewed asking for %v, want exec", got)
	}
	if err := f.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
