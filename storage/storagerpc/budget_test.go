package storagerpc_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/storage/storagerpc"
	"github.com/weft-fs/weft/transport"
)

// rawRequest is a transport request frame built by hand, as a hostile client
// would send it.
func rawRequest(op uint16, id uint64, body []byte) []byte {
	b := make([]byte, transport.HeaderSize, transport.HeaderSize+len(body))
	binary.LittleEndian.PutUint32(b[0:], transport.Magic)
	b[4] = transport.Version
	b[5] = 1 // request
	binary.LittleEndian.PutUint16(b[6:], op)
	binary.LittleEndian.PutUint64(b[8:], id)
	binary.LittleEndian.PutUint32(b[20:], uint32(len(body)))
	binary.LittleEndian.PutUint32(b[28:], crc32.Checksum(b[:28], crc32.MakeTable(crc32.Castagnoli)))
	return append(b, body...)
}

// waitUntil polls cond (for up to 2 minutes, a hang guard).
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute) // a hang guard
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestReadBudgetPerConnection: a client that pipelines many MaxIO reads and
// never reads the responses pins at most the per-connection read budget;
// another connection is still served meanwhile, and everything is given
// back when the hostile connection closes.
func TestReadBudgetPerConnection(t *testing.T) {
	const perConn = 2 * storagerpc.MaxIO
	srv := newServer(t)
	obj := proto.ObjectID{Ino: 7}
	data := bytes.Repeat([]byte("weft"), storagerpc.MaxIO/4)
	if _, err := srv.Write(ctx, 1, obj, 0, data); err != nil {
		t.Fatal(err)
	}
	h := storagerpc.New(srv, storagerpc.Options{AllowUnauthenticated: true, ReadBytesPerConn: perConn, ReadBytesPerServer: 3 * storagerpc.MaxIO})
	tr := transport.NewTCP()
	ln, err := tr.Listen("127.0.0.1:0", h.Serve)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	// A small receive buffer, set before connecting, so that the server's
	// writes stall soon.
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	nc, err := d.Dial("tcp", ln.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	const reads = 40 // 640 MiB of responses, never read
	req := storagerpc.ReadReq{ObjectReq: storagerpc.ObjectReq{Target: 1, Obj: obj}, Len: storagerpc.MaxIO}.Encode()
	go func() {
		for i := range reads {
			if _, err := nc.Write(rawRequest(storagerpc.OpRead, uint64(i+1), req)); err != nil {
				return
			}
		}
	}()
	// The budget fills (the responses stall) and stays within its bound.
	waitUntil(t, "the connection's read budget to fill", func() bool { return h.ReadBytesHeld() == perConn })

	// Another connection is served at once, from the server's budget.
	pool := transport.NewPool(tr, transport.PoolOptions{})
	defer pool.Close()
	c := storagerpc.NewClient(pool, func(context.Context, proto.TargetID) (string, error) { return ln.Addr(), nil })
	got := make([]byte, storagerpc.MaxIO)
	for range 3 {
		n, err := c.Read(ctx, 1, obj, 0, got)
		if err != nil || n != len(data) || !bytes.Equal(got, data) {
			t.Fatalf("read on another connection: %d bytes, %v", n, err)
		}
		// The read just answered may not have given its buffer back yet
		// (that happens after its response is written, which the client
		// can see first): at most one MaxIO on top of the stalled budget.
		if held := h.ReadBytesHeld(); held > perConn+storagerpc.MaxIO {
			t.Fatalf("%d read-buffer bytes held, budget of the stalled connection %d", held, perConn)
		}
	}
	waitUntil(t, "the other connection's buffers to be given back", func() bool { return h.ReadBytesHeld() == perConn })

	// Closing the stalled connection gives back every byte, on the
	// paths of written, dropped and never-started responses alike.
	nc.Close()
	waitUntil(t, "the read budget to drain", func() bool { return h.ReadBytesHeld() == 0 })
}

// TestReadBudgetDirect: called without a transport, a read gives its budget
// back on return (the buffer is the caller's).
func TestReadBudgetDirect(t *testing.T) {
	h := storagerpc.New(newServer(t), storagerpc.Options{AllowUnauthenticated: true})
	for range 100 {
		req := storagerpc.ReadReq{ObjectReq: storagerpc.ObjectReq{Target: 1, Obj: proto.ObjectID{Ino: 1}}, Len: storagerpc.MaxIO}.Encode()
		if _, err := h.Serve(ctx, storagerpc.OpRead, req); err != nil {
			t.Fatal(err)
		}
		// An error path too: a target this server does not serve.
		req = storagerpc.ReadReq{ObjectReq: storagerpc.ObjectReq{Target: 9}, Len: storagerpc.MaxIO}.Encode()
		if _, err := h.Serve(ctx, storagerpc.OpRead, req); err == nil {
			t.Fatal("read of an unknown target succeeded")
		}
	}
	if held := h.ReadBytesHeld(); held != 0 {
		t.Fatalf("%d bytes held after direct calls", held)
	}
}

// TestReadBudgetCancel: a read waiting for its connection's budget gives
// up when its ctx ends and takes nothing; another connection is not held
// up by it.
func TestReadBudgetCancel(t *testing.T) {
	started, block := make(chan struct{}, 2), make(chan struct{})
	h := storagerpc.New(blockingReader{started, block}, storagerpc.Options{AllowUnauthenticated: true, ReadBytesPerConn: storagerpc.MaxIO})
	req := storagerpc.ReadReq{ObjectReq: storagerpc.ObjectReq{Target: 1}, Len: storagerpc.MaxIO}.Encode()
	conn1 := transport.WithPeer(ctx, transport.Peer{Addr: "10.0.0.1:1"})
	conn2 := transport.WithPeer(ctx, transport.Peer{Addr: "10.0.0.2:1"})
	done := make(chan error, 2)
	serve := func(ctx context.Context) { _, err := h.Serve(ctx, storagerpc.OpRead, req); done <- err }
	go serve(conn1) // holds conn1's whole budget until block closes
	<-started
	cctx, cancel := context.WithCancel(conn1)
	waiting := make(chan error, 1)
	go func() { _, err := h.Serve(cctx, storagerpc.OpRead, req); waiting <- err }()
	go serve(conn2)
	<-started // conn2 got its buffer although conn1's read waits
	cancel()
	if err := <-waiting; !errors.Is(err, syscall.EINTR) {
		t.Fatalf("a read waiting for budget, cancelled: %v", err)
	}
	if held := h.ReadBytesHeld(); held != 2*storagerpc.MaxIO {
		t.Fatalf("held %d after a cancelled wait, want %d", held, 2*storagerpc.MaxIO)
	}
	close(block)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if held := h.ReadBytesHeld(); held != 0 {
		t.Fatalf("held %d after every read returned", held)
	}
}

// blockingReader is a storage service whose reads block until released.
type blockingReader struct {
	started chan struct{}
	release chan struct{}
}

func (b blockingReader) Read(context.Context, proto.TargetID, proto.ObjectID, uint64, []byte) (int, error) {
	b.started <- struct{}{}
	<-b.release
	return 0, nil
}
func (blockingReader) Write(context.Context, proto.TargetID, proto.ObjectID, uint64, []byte) (uint64, error) {
	return 0, syscall.ENOSYS
}
func (blockingReader) Truncate(context.Context, proto.TargetID, proto.ObjectID, uint64) error {
	return syscall.ENOSYS
}
func (blockingReader) Sync(context.Context, proto.TargetID, proto.ObjectID) error {
	return syscall.ENOSYS
}
func (blockingReader) Space(context.Context, proto.TargetID, proto.ObjectID, proto.SpaceMode, uint64, uint64) error {
	return syscall.ENOSYS
}
func (blockingReader) Seek(context.Context, proto.TargetID, proto.ObjectID, uint64, proto.SeekWhat) (uint64, error) {
	return 0, syscall.ENOSYS
}
func (blockingReader) Allocated(context.Context, proto.TargetID, proto.ObjectID) (uint64, error) {
	return 0, syscall.ENOSYS
}
func (blockingReader) Copy(context.Context, proto.TargetID, proto.ObjectID, uint64, proto.TargetID, proto.ObjectID, uint64, uint64, []byte) error {
	return syscall.ENOSYS
}
func (blockingReader) Remove(context.Context, proto.TargetID, proto.ObjectID) error {
	return syscall.ENOSYS
}
func (blockingReader) RemoveMany(context.Context, proto.TargetID, []proto.ObjectID) error {
	return syscall.ENOSYS
}
