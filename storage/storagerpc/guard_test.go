package storagerpc_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weft-fs/weft/capability"
	"github.com/weft-fs/weft/internal/ratelog"
	"github.com/weft-fs/weft/internal/testutil"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/storage/storagerpc"
	"github.com/weft-fs/weft/transport"
)

var (
	capSecret = bytes.Repeat([]byte{0x5a}, capability.KeySize)
	capNow    = time.Unix(1_900_000_000, 0)
	client    = transport.Peer{Addr: "10.1.2.3:40000", Role: transport.RoleClient, Name: "client-a"}
)

func capKey(t testing.TB) *capability.Key {
	k, err := capability.NewKey(0, capSecret)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// sign returns a capability for ino with rights r, issued at capNow and
// valid for a minute, to holder.
func sign(t testing.TB, k *capability.Key, ino proto.Ino, r proto.Access, holder string) []byte {
	b, err := k.Sign(capability.Capability{Ino: ino, Rights: r, Issued: capNow, Expiry: capNow.Add(time.Minute), Holder: holder})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCapabilityChecks(t *testing.T) {
	log, lb := testutil.NewLogger()
	k := capKey(t)
	now := capNow
	h := storagerpc.NewHandler(newServer(t), storagerpc.Options{Logger: log, CapabilityKey: k, Now: func() time.Time { return now }})
	obj := storagerpc.ObjectReq{Target: 1, Obj: proto.ObjectID{Ino: 42, Stripe: 2}}
	ro := sign(t, k, 42, proto.AccessRead, "client-a")
	rw := sign(t, k, 42, proto.AccessReadWrite, "client-a")
	wo := sign(t, k, 42, proto.AccessWrite, "")
	other := sign(t, k, 43, proto.AccessReadWrite, "client-a")
	bob := sign(t, k, 42, proto.AccessReadWrite, "client-b")
	forged := bytes.Clone(other)
	forged[4] = 42 // inode 43 made 42: the signature no longer matches...
	forgedRO := bytes.Clone(ro)
	forgedRO[2] = byte(proto.AccessReadWrite) // ...nor here
	wrongKey, _ := capability.NewKey(0, bytes.Repeat([]byte{1}, capability.KeySize))

	read := func(c []byte) []byte { return storagerpc.ReadReq{Cap: c, ObjectReq: obj, Len: 10}.Encode() }
	write := func(c []byte) []byte {
		w := storagerpc.WriteReq{Cap: c, ObjectReq: obj, Data: []byte("data")}
		return append(w.EncodeHeader(), w.Data...)
	}
	trunc := func(c []byte) []byte { return storagerpc.TruncateReq{Cap: c, ObjectReq: obj, Size: 1}.Encode() }
	sync := func(c []byte) []byte { return storagerpc.SyncReq{Cap: c, ObjectReq: obj}.Encode() }
	space := func(c []byte) []byte {
		return storagerpc.SpaceReq{Cap: c, ObjectReq: obj, Mode: proto.SpacePunch, Off: 0, Len: 4096}.Encode()
	}
	copyReq := func(dstCap, srcCap []byte) []byte {
		return storagerpc.CopyReq{Cap: dstCap, Dst: obj, SrcCap: srcCap, Src: obj, Len: 10}.Encode()
	}
	copyRow := func(dstCap, srcCap []byte) []byte {
		return storagerpc.CopyRowReq{Cap: dstCap, Dst: obj, RowCopy: proto.RowCopy{SrcTarget: obj.Target, Src: obj.Obj, SrcCap: srcCap,
			Off: 1 << 20, Unit: 1 << 20, Len: 10, Tag: 5}}.Encode()
	}
	seek := func(c []byte) []byte {
		return storagerpc.SeekReq{Cap: c, ObjectReq: obj, What: proto.SeekHole}.Encode()
	}
	removeMany := storagerpc.RemoveManyReq{Target: 1, Objs: []proto.ObjectID{obj.Obj}}.Encode()

	server := transport.Peer{Addr: "10.0.0.1:7000", Role: transport.RoleMeta, Name: "meta-1"}
	storageSrv := transport.Peer{Addr: "10.0.0.2:7001", Role: transport.RoleStorage, Name: "storage-2"}
	anon := transport.Peer{Addr: "10.9.9.9:1", Role: transport.RoleNone}
	for _, tc := range []struct {
		name string
		peer *transport.Peer // nil: in-process
		op   uint16
		req  []byte
		why  string // "" = allowed
	}{
		{"client write rw", &client, storagerpc.OpWrite, write(rw), ""},
		{"client read ro", &client, storagerpc.OpRead, read(ro), ""},
		{"client read rw", &client, storagerpc.OpRead, read(rw), ""},
		{"client truncate rw", &client, storagerpc.OpTruncate, trunc(rw), ""},
		{"client sync rw", &client, storagerpc.OpSync, sync(rw), ""},
		{"client extend rw", &client, storagerpc.OpExtend, trunc(rw), ""},
		{"extend with read-only", &client, storagerpc.OpExtend, trunc(ro), "does not grant"},
		{"extend without capability", &client, storagerpc.OpExtend, trunc(nil), "none attached"},
		{"client write, write-only, any holder", &client, storagerpc.OpWrite, write(wo), ""},
		{"no capability", &client, storagerpc.OpRead, read(nil), "none attached"},
		{"no capability write", &client, storagerpc.OpWrite, write(nil), "none attached"},
		{"read with write-only", &client, storagerpc.OpRead, read(wo), "does not grant"},
		{"write with read-only", &client, storagerpc.OpWrite, write(ro), "does not grant"},
		{"truncate with read-only", &client, storagerpc.OpTruncate, trunc(ro), "does not grant"},
		{"sync with read-only", &client, storagerpc.OpSync, sync(ro), "does not grant"},
		{"client space rw", &client, storagerpc.OpSpace, space(rw), ""},
		{"space with read-only", &client, storagerpc.OpSpace, space(ro), "does not grant"},
		{"space without capability", &client, storagerpc.OpSpace, space(nil), "none attached"},
		{"client seek ro", &client, storagerpc.OpSeek, seek(ro), ""},
		{"client copy", &client, storagerpc.OpCopy, copyReq(rw, ro), ""},
		{"copy without write on the destination", &client, storagerpc.OpCopy, copyReq(ro, ro), "does not grant"},
		{"copy without read on the source", &client, storagerpc.OpCopy, copyReq(rw, wo), "does not grant"},
		{"copy from another inode", &client, storagerpc.OpCopy, copyReq(rw, other), "another inode"},
		{"client copy row", &client, storagerpc.OpCopyRow, copyRow(rw, ro), ""},
		{"copy row without write on the destination", &client, storagerpc.OpCopyRow, copyRow(ro, ro), "does not grant"},
		{"copy row without read on the source", &client, storagerpc.OpCopyRow, copyRow(rw, wo), "does not grant"},
		{"copy row from another inode", &client, storagerpc.OpCopyRow, copyRow(rw, other), "another inode"},
		{"copy row without capability", &client, storagerpc.OpCopyRow, copyRow(nil, ro), "none attached"},
		{"seek with write-only", &client, storagerpc.OpSeek, seek(wo), "does not grant"},
		{"wrong inode", &client, storagerpc.OpRead, read(other), "another inode"},
		// The object of another generation of inode 42 (its number reused
		// after a metadata rollback): the capability for 42 does not reach it.
		{"another generation", &client, storagerpc.OpRead, storagerpc.ReadReq{Cap: rw,
			ObjectReq: storagerpc.ObjectReq{Target: 1, Obj: proto.ObjectID{Ino: 42, Stripe: 2, Gen: 7}}, Len: 10}.Encode(),
			"another generation"},
		{"another client's", &client, storagerpc.OpRead, read(bob), "another client"},
		{"rights raised", &client, storagerpc.OpWrite, write(forgedRO), "bad signature"},
		{"tampered", &client, storagerpc.OpRead, read(forged), "bad signature"},
		{"other key", &client, storagerpc.OpRead, read(sign(t, wrongKey, 42, proto.AccessRead, "")), "bad signature"},
		{"garbage", &client, storagerpc.OpRead, read([]byte{capability.Version, 2, 3}), "malformed"},
		{"client remove", &client, storagerpc.OpRemove, obj.Encode(), "only servers"},
		{"client remove many", &client, storagerpc.OpRemoveMany, removeMany, "only servers"},
		{"unauthenticated", &anon, storagerpc.OpRead, read(rw), "did not authenticate"},
		{"unauthenticated remove", &anon, storagerpc.OpRemove, obj.Encode(), "did not authenticate"},
		{"meta without capability", &server, storagerpc.OpWrite, write(nil), ""},
		{"storage without capability", &storageSrv, storagerpc.OpRead, read(nil), ""},
		{"meta remove", &server, storagerpc.OpRemove, obj.Encode(), ""},
		{"meta remove many", &server, storagerpc.OpRemoveMany, removeMany, ""},
		{"in-process", nil, storagerpc.OpTruncate, trunc(nil), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ctx
			if tc.peer != nil {
				c = transport.WithPeer(ctx, *tc.peer)
			}
			_, err := h(c, tc.op, tc.req)
			if tc.why == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, syscall.EACCES) || !strings.Contains(err.Error(), tc.why) {
				t.Fatalf("err %v, want EACCES for %q", err, tc.why)
			}
			// The refusal names the peer and why. (Each subtest is more
			// than the rate limit apart only in the first; later ones may
			// be suppressed, so check the first refusal of the run.)
			if tc.name == "no capability" && (!strings.Contains(lb.String(), tc.peer.Addr) || !strings.Contains(lb.String(), tc.why)) {
				t.Fatalf("log lacks the peer or the reason: %s", lb.String())
			}
		})
	}

	// Expiry: accepted up to expiry+Skew by the storage server's clock.
	c := transport.WithPeer(ctx, client)
	now = capNow.Add(time.Minute + capability.Skew)
	if _, err := h(c, storagerpc.OpRead, read(ro)); err != nil {
		t.Fatalf("within skew: %v", err)
	}
	now = now.Add(time.Millisecond)
	if _, err := h(c, storagerpc.OpRead, read(ro)); !errors.Is(err, syscall.EACCES) || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("expired: %v", err)
	}
}

func TestCapabilityUnauthenticatedAllowed(t *testing.T) {
	h := storagerpc.NewHandler(newServer(t), storagerpc.Options{AllowUnauthenticated: true})
	c := transport.WithPeer(ctx, transport.Peer{Addr: "127.0.0.1:1", Role: transport.RoleNone})
	obj := storagerpc.ObjectReq{Target: 1, Obj: proto.ObjectID{Ino: 1}}
	w := storagerpc.WriteReq{ObjectReq: obj, Data: []byte("x")}
	if _, err := h(c, storagerpc.OpWrite, append(w.EncodeHeader(), w.Data...)); err != nil {
		t.Fatal(err)
	}
	if _, err := h(c, storagerpc.OpRemove, obj.Encode()); err != nil {
		t.Fatal(err)
	}
	// A client still needs a capability, and without a key none verifies.
	if _, err := h(transport.WithPeer(ctx, client), storagerpc.OpRead, storagerpc.ReadReq{ObjectReq: obj, Len: 1}.Encode()); !errors.Is(err, syscall.EACCES) {
		t.Fatalf("client without a key configured: %v", err)
	}
}

// A flood of refused requests logs at most ratelog.DefaultBurst lines per
// second, not one each.
func TestRefusalLogRateLimited(t *testing.T) {
	log, lb := testutil.NewLogger()
	h := storagerpc.NewHandler(newServer(t), storagerpc.Options{Logger: log, CapabilityKey: capKey(t)})
	c := transport.WithPeer(ctx, client)
	req := storagerpc.ReadReq{ObjectReq: storagerpc.ObjectReq{Target: 1, Obj: proto.ObjectID{Ino: 1}}, Len: 1}.Encode()
	start := time.Now()
	for range 1000 {
		if _, err := h(c, storagerpc.OpRead, req); !errors.Is(err, syscall.EACCES) {
			t.Fatal(err)
		}
	}
	lines := strings.Count(lb.String(), "request refused")
	if max := ratelog.DefaultBurst * (1 + int(time.Since(start)/time.Second)); lines < 1 || lines > max {
		t.Fatalf("%d refusal lines logged for 1000 refusals in %v", lines, time.Since(start))
	}
}

// The capability travels from the client's ctx through a real TCP
// connection; the wrapper stands in for an authenticating transport.
func TestCapabilityOverTCP(t *testing.T) {
	k := capKey(t)
	h := storagerpc.NewHandler(newServer(t), storagerpc.Options{CapabilityKey: k, Now: func() time.Time { return capNow }})
	asClient := func(c context.Context, op uint16, req []byte) ([]byte, error) {
		return h(transport.WithPeer(c, client), op, req)
	}
	tcp := transport.NewTCP()
	ln, err := tcp.Listen("127.0.0.1:0", asClient)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	pool := transport.NewPool(tcp, transport.PoolOptions{})
	defer pool.Close()
	c := storagerpc.NewClient(pool, func(context.Context, proto.TargetID) (string, error) { return ln.Addr(), nil })
	obj := proto.ObjectID{Ino: 9}
	if _, err := c.Write(ctx, 1, obj, 0, []byte("x")); !errors.Is(err, syscall.EACCES) {
		t.Fatalf("write without capability: %v", err)
	}
	rw := proto.WithCapability(ctx, sign(t, k, 9, proto.AccessReadWrite, "client-a"))
	if _, err := c.Write(rw, 1, obj, 0, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if err := c.Truncate(rw, 1, obj, 4); err != nil {
		t.Fatal(err)
	}
	if err := c.Sync(rw, 1, obj); err != nil {
		t.Fatal(err)
	}
	ro := proto.WithCapability(ctx, sign(t, k, 9, proto.AccessRead, "client-a"))
	buf := make([]byte, 10)
	if n, err := c.Read(ro, 1, obj, 0, buf); err != nil || string(buf[:n]) != "hell" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	if _, err := c.Write(ro, 1, obj, 0, []byte("x")); !errors.Is(err, syscall.EACCES) {
		t.Fatalf("write with a read capability: %v", err)
	}
	if err := c.Remove(rw, 1, obj); !errors.Is(err, syscall.EACCES) {
		t.Fatalf("client remove: %v", err)
	}
}

// BenchmarkHandlerRead4K is a 4 KiB read served by the handler from an
// in-memory target: as an in-process (trusted) call, and from a client
// whose capability is verified; the difference is the capability's cost.
func BenchmarkHandlerRead4K(b *testing.B) {
	k := capKey(b)
	h := storagerpc.NewHandler(newServer(b), storagerpc.Options{CapabilityKey: k, Now: func() time.Time { return capNow }})
	obj := storagerpc.ObjectReq{Target: 1, Obj: proto.ObjectID{Ino: 5}}
	w := storagerpc.WriteReq{ObjectReq: obj, Data: make([]byte, 1<<20)}
	if _, err := h(ctx, storagerpc.OpWrite, append(w.EncodeHeader(), w.Data...)); err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		ctx  context.Context
		cap  []byte
	}{
		{"trusted", ctx, nil},
		{"capability", transport.WithPeer(ctx, client), sign(b, k, 5, proto.AccessRead, "client-a")},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(4096)
			i := 0
			for b.Loop() {
				req := storagerpc.ReadReq{Cap: bc.cap, ObjectReq: obj, Off: uint64(i%256) * 4096, Len: 4096}.Encode()
				if _, err := h(bc.ctx, storagerpc.OpRead, req); err != nil {
					b.Fatal(err)
				}
				i += 97
			}
		})
	}
}

// BenchmarkRead4KOverTCP is a 4 KiB random read from a client through a
// real TCP connection (loopback), trusted vs with a capability verified:
// the capability's share of a read as the budget counts it
// (minus FUSE and disk, which only make the share smaller).
func BenchmarkRead4KOverTCP(b *testing.B) {
	k := capKey(b)
	srv := newServer(b)
	h := storagerpc.NewHandler(srv, storagerpc.Options{CapabilityKey: k, Now: func() time.Time { return capNow }})
	obj := proto.ObjectID{Ino: 5}
	if _, err := srv.Write(ctx, 1, obj, 0, make([]byte, 1<<20)); err != nil {
		b.Fatal(err)
	}
	server := transport.Peer{Addr: client.Addr, Role: transport.RoleStorage, Name: "storage"}
	for _, bc := range []struct {
		name string
		peer transport.Peer // in place of the transport's (unauthenticated) one
		cap  []byte
	}{
		{"trusted", server, nil},
		{"capability", client, sign(b, k, 5, proto.AccessRead, "client-a")},
	} {
		b.Run(bc.name, func(b *testing.B) {
			served := func(c context.Context, op uint16, req []byte) ([]byte, error) {
				return h(transport.WithPeer(c, bc.peer), op, req)
			}
			tcp := transport.NewTCP()
			ln, err := tcp.Listen("127.0.0.1:0", served)
			if err != nil {
				b.Fatal(err)
			}
			defer ln.Close()
			pool := transport.NewPool(tcp, transport.PoolOptions{})
			defer pool.Close()
			c := storagerpc.NewClient(pool, func(context.Context, proto.TargetID) (string, error) { return ln.Addr(), nil })
			rctx := proto.WithCapability(ctx, bc.cap)
			buf := make([]byte, 4096)
			b.SetBytes(4096)
			i := 0
			for b.Loop() {
				if _, err := c.Read(rctx, 1, obj, uint64(i%256)*4096, buf); err != nil {
					b.Fatal(err)
				}
				i += 97
			}
		})
	}
}
