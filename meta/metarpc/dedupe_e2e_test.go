package metarpc_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/weft-fs/weft/meta/metarpc"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/transport"
)

// lossyTransport is TCP where the first reply of each op in lose is lost:
// the request reaches the server and is served, then the connection
// breaks before the client sees the answer.
type lossyTransport struct {
	transport.Transport
	mu   sync.Mutex
	lose map[uint16]int // op → replies still to lose
	lost int
}

func (t *lossyTransport) Dial(ctx context.Context, addr string) (transport.Conn, error) {
	c, err := t.Transport.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	return &lossyConn{Conn: c, t: t}, nil
}

type lossyConn struct {
	transport.Conn
	t *lossyTransport
}

func (c *lossyConn) Call(ctx context.Context, op uint16, parts ...[]byte) ([]byte, error) {
	resp, err := c.Conn.Call(ctx, op, parts...)
	c.t.mu.Lock()
	lose := c.t.lose[op] > 0
	if lose {
		c.t.lose[op]--
		c.t.lost++
	}
	c.t.mu.Unlock()
	if !lose {
		return resp, err
	}
	c.Conn.Close()
	return nil, fmt.Errorf("test: connection broken after op %d was served (%v): %w", op, err, syscall.EIO)
}

// TestRetryAfterLostReply: the server applies a create, an unlink, a
// rename, a CreateOpen, an Open and a ReleaseMany whose replies are lost
// with the connection; the client sends each again with the same sequence
// number and gets the first attempt's success: one inode, no EEXIST, no
// ENOENT, each handle counted and dropped once.
func TestRetryAfterLostReply(t *testing.T) {
	srv := newServer(t)
	tcp := transport.NewTCP()
	ln, err := tcp.Listen("127.0.0.1:0", metarpc.NewHandler(srv, srv, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	lossy := &lossyTransport{Transport: tcp, lose: map[uint16]int{
		metarpc.OpCreate: 1, metarpc.OpUnlinkAt: 1, metarpc.OpRename: 1, metarpc.OpCreateOpen: 1,
		metarpc.OpOpen: 1, metarpc.OpReleaseMany: 1,
	}}
	pool := transport.NewPool(lossy, transport.PoolOptions{})
	defer pool.Close()
	c := metarpc.NewClient(pool, ln.Addr(), metarpc.WithSession(proto.NewSessionID()))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := srv.RegisterTarget(ctx, "u1", proto.TargetInfo{Addr: "h:1", Total: 1 << 30, Free: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.OpenSession(ctx, nil); err != nil {
		t.Fatal(err)
	}
	before, _ := srv.StatFS(ctx)
	a, err := c.Create(ctx, proto.CreateIn{Parent: proto.RootIno, Name: "f", Mode: 0644, Exclusive: true})
	if err != nil {
		t.Fatalf("create whose first reply was lost: %v", err)
	}
	if got, err := srv.Lookup(ctx, proto.RootIno, "f"); err != nil || got.Ino != a.Ino {
		t.Fatalf("the retried create answered inode %d, the file is %+v (%v)", a.Ino, got, err)
	}
	if after, _ := srv.StatFS(ctx); after.Files != before.Files+1 {
		t.Fatalf("%d inodes after one create, want %d", after.Files, before.Files+1)
	}
	if err := c.Rename(ctx, proto.RootIno, "f", proto.RootIno, "g", proto.RenameNoReplace); err != nil {
		t.Fatalf("rename whose first reply was lost: %v", err)
	}
	if _, err := c.UnlinkAt(ctx, proto.RootIno, "g"); err != nil {
		t.Fatalf("unlink whose first reply was lost: %v", err)
	}
	if _, err := srv.GetAttr(ctx, a.Ino); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("the unlinked file: %v", err)
	}
	o, _, _, err := c.CreateOpen(ctx, proto.CreateIn{Parent: proto.RootIno, Name: "h", Mode: 0644, Exclusive: true}, proto.AccessReadWrite)
	if err != nil {
		t.Fatalf("CreateOpen whose first reply was lost: %v", err)
	}
	if n := srv.OpenCount(o.Ino); n != 1 {
		t.Fatalf("a retried CreateOpen left %d handles, want 1", n)
	}
	// Open and ReleaseMany are retried too, and counted once.
	if _, _, err := c.Open(ctx, o.Ino, proto.AccessRead); err != nil {
		t.Fatalf("open whose first reply was lost: %v", err)
	}
	if n := srv.OpenCount(o.Ino); n != 2 {
		t.Fatalf("%d handles after a retried open, want 2", n)
	}
	if err := c.ReleaseMany(ctx, []proto.Ino{o.Ino}); err != nil {
		t.Fatalf("release whose first reply was lost: %v", err)
	}
	if n := srv.OpenCount(o.Ino); n != 1 {
		t.Fatalf("%d handles after a retried release of one, want 1", n)
	}
	if lossy.lost != 6 {
		t.Fatalf("%d replies lost, want 6", lossy.lost)
	}
	// Without a session nothing is retried: the broken connection is the
	// answer.
	lossy.mu.Lock()
	lossy.lose[metarpc.OpMkdir] = 1
	lossy.mu.Unlock()
	plain := metarpc.NewClient(pool, ln.Addr())
	if _, err := plain.Mkdir(ctx, proto.RootIno, "d", 0755, 0, 0); !errors.Is(err, syscall.EIO) {
		t.Fatalf("sessionless mkdir with a lost reply: %v", err)
	}
}
