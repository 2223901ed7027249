package metarpc_test

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/weft-fs/weft/meta/metarpc"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/transport"
)

// TestLocksOverTheWire: locks, their test and wait, and appends travel
// over TCP; an append and a lock whose replies are lost with the
// connection are sent again and take effect once (the append's reply is
// the server's remembered one: one reservation, not two).
func TestLocksOverTheWire(t *testing.T) {
	srv := newServer(t)
	tcp := transport.NewTCP()
	ln, err := tcp.Listen("127.0.0.1:0", metarpc.NewHandler(srv, srv, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	lossy := &lossyTransport{Transport: tcp, lose: map[uint16]int{metarpc.OpAppend: 1, metarpc.OpLock: 1}}
	pool := transport.NewPool(lossy, transport.PoolOptions{})
	defer pool.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := srv.RegisterTarget(ctx, "u1", proto.TargetInfo{Addr: "h:1", Total: 1 << 30, Free: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	a := metarpc.NewClient(pool, ln.Addr(), metarpc.WithSession(proto.NewSessionID()))
	b := metarpc.NewClient(pool, ln.Addr(), metarpc.WithSession(proto.NewSessionID()))
	var ino proto.Ino
	for _, c := range []*metarpc.Client{a, b} {
		if _, err := c.OpenSession(ctx, nil); err != nil {
			t.Fatal(err)
		}
		attr, _, _, err := c.CreateOpen(ctx, proto.CreateIn{Parent: proto.RootIno, Name: "f", Mode: 0o666}, proto.AccessReadWrite)
		if err != nil {
			t.Fatal(err)
		}
		ino = attr.Ino
	}

	got, err := a.Append(ctx, ino, 100)
	if err != nil || got.Size != 100 {
		t.Fatalf("append whose first reply was lost: size %d, %v; want 100", got.Size, err)
	}
	lk := proto.Lock{Owner: 7, Type: proto.LockWrite, Start: 0, End: 99, Pid: 1234}
	if _, err := a.Lock(ctx, ino, lk, proto.LockSet); err != nil {
		t.Fatalf("lock whose first reply was lost: %v", err)
	}
	if lossy.lost != 2 {
		t.Fatalf("%d replies lost, want 2", lossy.lost)
	}
	if n := srv.LockCount(ino); n != 1 {
		t.Fatalf("%d locks after a retried lock, want 1", n)
	}
	c, err := b.Lock(ctx, ino, proto.Lock{Owner: 7, Type: proto.LockRead, Start: 50, End: 50}, proto.LockTest)
	if err != nil || c != lk {
		t.Fatalf("test from another session: %+v, %v; want %+v", c, err, lk)
	}
	if _, err := b.Lock(ctx, ino, proto.Lock{Owner: 7, Type: proto.LockRead, Start: 50, End: 50}, proto.LockSet); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("conflicting lock: %v, want EAGAIN", err)
	}
	done := make(chan error, 1)
	go func() { done <- b.LockWait(ctx, ino, proto.Lock{Owner: 7, Type: proto.LockRead, Start: 50, End: 50}) }()
	if _, err := a.Lock(ctx, ino, proto.Lock{Owner: 7, Type: proto.LockUnlock, Start: 0, End: proto.LockEOF}, proto.LockSet); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("wait: %v", err)
	}
	if _, err := b.Lock(ctx, ino, proto.Lock{Owner: 7, Type: proto.LockRead, Start: 50, End: 50}, proto.LockSet); err != nil {
		t.Fatalf("lock after the holder let go: %v", err)
	}
	// A malformed lock is refused plainly.
	if _, err := b.Lock(ctx, ino, proto.Lock{Type: proto.LockWrite, Start: 9, End: 1}, proto.LockSet); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("lock with end before start: %v", err)
	}
}
