package storagerpc_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/goleak"

	"github.com/weft-fs/weft/internal/testutil"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/storage"
	"github.com/weft-fs/weft/storage/storagerpc"
	"github.com/weft-fs/weft/storage/vfs"
	"github.com/weft-fs/weft/transport"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var ctx = context.Background()

// newServer returns a storage server with targets 1 and 2 in memory.
func newServer(t testing.TB) *storage.Server {
	srv := storage.NewServer()
	fs := vfs.NewMem(1 << 30)
	for _, id := range []proto.TargetID{1, 2} {
		dir := fmt.Sprintf("/t%d", id)
		tg, err := storage.OpenTarget(dir, storage.TargetOptions{FS: fs})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tg.Close() })
		if err := tg.SetID(id); err != nil {
			t.Fatal(err)
		}
		if err := srv.Add(tg); err != nil {
			t.Fatal(err)
		}
	}
	return srv
}

func TestHandlerDirect(t *testing.T) {
	log, lb := testutil.NewLogger()
	h := storagerpc.NewHandler(newServer(t), storagerpc.Options{Logger: log})
	obj := storagerpc.ObjectReq{Target: 1, Obj: proto.ObjectID{Ino: 3}}
	w := storagerpc.WriteReq{ObjectReq: obj, Off: 10, Data: []byte("hello")}
	resp, err := h(ctx, storagerpc.OpWrite, append(w.EncodeHeader(), w.Data...))
	if err != nil {
		t.Fatal(err)
	}
	// A new object's first write: version 1, and one block allocated.
	if v, n, err := storagerpc.DecodeWriteReply(resp); v != 1 || n != storage.BlockSize || err != nil {
		t.Fatalf("write reply: version %d, allocated %d, %v", v, n, err)
	}
	resp, err = h(ctx, storagerpc.OpRead, storagerpc.ReadReq{ObjectReq: obj, Off: 8, Len: 100}.Encode())
	if err != nil || !bytes.Equal(resp, []byte("\x00\x00hello")) {
		t.Fatalf("read = %q, %v", resp, err)
	}
	if _, err := h(ctx, storagerpc.OpTruncate, storagerpc.TruncateReq{ObjectReq: obj, Size: 12}.Encode()); err != nil {
		t.Fatal(err)
	}
	if _, err := h(ctx, storagerpc.OpSync, storagerpc.SyncReq{ObjectReq: obj}.Encode()); err != nil {
		t.Fatal(err)
	}
	if _, err := h(ctx, storagerpc.OpRemove, obj.Encode()); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name  string
		op    uint16
		req   []byte
		errno syscall.Errno
		log   string
	}{
		{"unknown target", storagerpc.OpSync, storagerpc.SyncReq{ObjectReq: storagerpc.ObjectReq{Target: 9}}.Encode(), syscall.ESTALE, ""},
		{"retired read without capability", 100, obj.Encode(), syscall.ENOSYS, "unknown op"},
		{"malformed read", storagerpc.OpRead, []byte{1, 2, 3}, syscall.EINVAL, "malformed request"},
		{"malformed write", storagerpc.OpWrite, append(w.EncodeHeader(), 'x'), syscall.EINVAL, "malformed request"},
		{"trailing bytes", storagerpc.OpRemove, append(obj.Encode(), 0), syscall.EINVAL, "malformed request"},
		{"read too big", storagerpc.OpRead, storagerpc.ReadReq{ObjectReq: obj, Len: storagerpc.MaxIO + 1}.Encode(), syscall.EINVAL, "malformed request"},
		{"unknown op", 199, nil, syscall.ENOSYS, "unknown op"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h(ctx, tc.op, tc.req)
			if !errors.Is(err, tc.errno) {
				t.Fatalf("err %v, want %v", err, tc.errno)
			}
			if tc.log != "" && !strings.Contains(lb.String(), tc.log) {
				t.Fatalf("log lacks %q: %s", tc.log, lb.String())
			}
		})
	}
}

// loopback is an in-process transport.Transport: a Conn calls the handler
// directly and turns its error into an errno, as the TCP transport does.
type loopback struct{ h transport.Handler }

func (l loopback) Dial(ctx context.Context, addr string) (transport.Conn, error) {
	return loopConn(l), nil
}

func (l loopback) Listen(addr string, h transport.Handler) (transport.Listener, error) {
	return nil, syscall.ENOSYS
}

type loopConn loopback

func (c loopConn) Call(ctx context.Context, op uint16, parts ...[]byte) ([]byte, error) {
	resp, err := c.h(ctx, op, bytes.Join(parts, nil))
	var errno syscall.Errno
	if err != nil && !errors.As(err, &errno) {
		errno = syscall.EIO
	}
	if err != nil {
		return nil, fmt.Errorf("loopback: %s: %w", err, errno)
	}
	return resp, nil
}

func (loopConn) Close() error { return nil }

// exercise runs the client against a server through pool.
func exercise(t *testing.T, pool *transport.Pool, addr string) {
	resolve := func(_ context.Context, id proto.TargetID) (string, error) {
		if id == 404 {
			return "", fmt.Errorf("no address: %w", syscall.ENOENT)
		}
		return addr, nil
	}
	var c proto.StorageService = storagerpc.NewClient(pool, resolve)
	obj := proto.ObjectID{Ino: 77, Stripe: 1}
	big := bytes.Repeat([]byte("0123456789abcdef"), (storagerpc.MaxIO+5000)/16) // split into two RPCs
	v, err := c.Write(ctx, 2, obj, 100, big)
	if err != nil || v != 2 {
		t.Fatalf("big write: version %d, %v", v, err)
	}
	buf := make([]byte, len(big)+1000)
	n, err := c.Read(ctx, 2, obj, 100, buf)
	if err != nil || n != len(big) || !bytes.Equal(buf[:n], big) {
		t.Fatalf("big read: %d, %v", n, err)
	}
	if v, err := c.Write(ctx, 2, obj, 0, []byte("x")); err != nil || v != 3 {
		t.Fatalf("small write: %d, %v", v, err)
	}
	if err := c.Truncate(ctx, 2, obj, 50); err != nil {
		t.Fatal(err)
	}
	n, err = c.Read(ctx, 2, obj, 0, buf[:100])
	if err != nil || n != 50 || buf[0] != 'x' {
		t.Fatalf("read after truncate: %d, %v", n, err)
	}
	if err := c.Sync(ctx, 2, obj); err != nil {
		t.Fatal(err)
	}
	if err := c.Remove(ctx, 2, obj); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Read(ctx, 2, obj, 0, buf[:10]); n != 0 || err != nil {
		t.Fatalf("read removed: %d, %v", n, err)
	}
	// RemoveMany: more objects than one RPC carries, present and missing.
	var many []proto.ObjectID
	for i := range storagerpc.MaxRemoveMany + 10 {
		many = append(many, proto.ObjectID{Ino: proto.Ino(1000 + i)})
	}
	for _, o := range []proto.ObjectID{many[0], many[storagerpc.MaxRemoveMany+5]} {
		if _, err := c.Write(ctx, 2, o, 0, []byte("doomed")); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.RemoveMany(ctx, 2, many); err != nil {
		t.Fatal(err)
	}
	for _, o := range []proto.ObjectID{many[0], many[storagerpc.MaxRemoveMany+5]} {
		if n, err := c.Read(ctx, 2, o, 0, buf[:10]); n != 0 || err != nil {
			t.Fatalf("read of %v after RemoveMany: %d, %v", o, n, err)
		}
	}
	if err := c.RemoveMany(ctx, 3, many[:2]); !errors.Is(err, syscall.ESTALE) {
		t.Fatalf("RemoveMany on an unknown target: %v", err)
	}
	if _, err := c.Read(ctx, 3, obj, 0, buf[:10]); !errors.Is(err, syscall.ESTALE) {
		t.Fatalf("unknown target: %v", err)
	}
	if err := c.Sync(ctx, 404, obj); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("unresolvable target: %v", err)
	}
}

func TestClientLoopback(t *testing.T) {
	pool := transport.NewPool(loopback{storagerpc.NewHandler(newServer(t), storagerpc.Options{})}, transport.PoolOptions{})
	defer pool.Close()
	exercise(t, pool, "loopback")
}

func TestClientTCP(t *testing.T) {
	tcp := transport.NewTCP()
	// A transport without security: its peers did not authenticate.
	ln, err := tcp.Listen("127.0.0.1:0", storagerpc.NewHandler(newServer(t), storagerpc.Options{AllowUnauthenticated: true}))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	pool := transport.NewPool(tcp, transport.PoolOptions{})
	defer pool.Close()
	exercise(t, pool, ln.Addr())
}

// TestRemoveManyOldServer: a server that predates OpRemoveMany answers
// ENOSYS, and the client removes the objects one by one instead.
func TestRemoveManyOldServer(t *testing.T) {
	h := storagerpc.NewHandler(newServer(t), storagerpc.Options{})
	var manyCalls, removeCalls int
	old := func(ctx context.Context, op uint16, req []byte) ([]byte, error) {
		switch op {
		case storagerpc.OpRemoveMany:
			manyCalls++
			return nil, syscall.ENOSYS
		case storagerpc.OpRemove:
			removeCalls++
		}
		return h(ctx, op, req)
	}
	pool := transport.NewPool(loopback{old}, transport.PoolOptions{})
	defer pool.Close()
	c := storagerpc.NewClient(pool, func(context.Context, proto.TargetID) (string, error) { return "old", nil })
	objs := []proto.ObjectID{{Ino: 1}, {Ino: 2}, {Ino: 3}}
	for _, o := range objs {
		if _, err := c.Write(ctx, 1, o, 0, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.RemoveMany(ctx, 1, objs); err != nil {
		t.Fatal(err)
	}
	if manyCalls != 1 || removeCalls != 3 {
		t.Fatalf("%d RemoveMany and %d Remove calls, want 1 and 3", manyCalls, removeCalls)
	}
	buf := make([]byte, 4)
	for _, o := range objs {
		if n, err := c.Read(ctx, 1, o, 0, buf); n != 0 || err != nil {
			t.Fatalf("object %v still there: %d, %v", o, n, err)
		}
	}
}

// TestWriteReply: a write reply carries the version and the allocated
// bytes; one of the version alone decodes as not counted; anything else is
// refused.
func TestWriteReply(t *testing.T) {
	if v, n, err := storagerpc.DecodeWriteReply(storagerpc.EncodeWriteReply(7, 8192)); v != 7 || n != 8192 || err != nil {
		t.Errorf("round trip: %d %d %v", v, n, err)
	}
	if v, n, err := storagerpc.DecodeWriteReply(storagerpc.EncodeVersion(7)); v != 7 || n != proto.AllocatedUnknown || err != nil {
		t.Errorf("version alone: %d %d %v", v, n, err)
	}
	for _, l := range []int{0, 4, 12, 15, 17, 24} {
		if _, _, err := storagerpc.DecodeWriteReply(make([]byte, l)); err == nil {
			t.Errorf("a %d-byte write reply decoded", l)
		}
	}
}
