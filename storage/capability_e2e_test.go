package storage_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/weft-fs/weft/capability"
	"github.com/weft-fs/weft/client"
	"github.com/weft-fs/weft/meta"
	"github.com/weft-fs/weft/meta/store"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/storage"
	"github.com/weft-fs/weft/storage/storagerpc"
	"github.com/weft-fs/weft/transport"
)

// asClients is a TCP transport whose server side presents every peer as an
// authenticated client, as the secure transport will for mounts.
type asClients struct{ transport.Transport }

func (a asClients) Listen(addr string, h transport.Handler) (transport.Listener, error) {
	return a.Transport.Listen(addr, func(ctx context.Context, op uint16, req []byte) ([]byte, error) {
		return h(transport.WithPeer(ctx, transport.Peer{Addr: "127.0.0.1:1", Role: transport.RoleClient, Name: "mount-1"}), op, req)
	})
}

// TestCapabilitiesEndToEnd: a metadata server issues capabilities, the
// client attaches them, a storage server (Run, over TCP) verifies each
// request; a client that bypasses the metadata server gets nothing.
func TestCapabilitiesEndToEnd(t *testing.T) {
	ctx := context.Background()
	key := bytes.Repeat([]byte{0x42}, capability.KeySize)
	msrv, err := meta.New(meta.Options{Store: store.NewMem(), CapabilityKey: key})
	if err != nil {
		t.Fatal(err)
	}
	defer msrv.Close()

	ready := make(chan string, 1)
	tr := asClients{transport.NewTCP()}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- storage.Run(runCtx, storage.Config{
			ListenAddr: "127.0.0.1:0", Targets: []string{filepath.Join(t.TempDir(), "t")},
			Registry: registryNotify{msrv, ready}, Transport: tr, CapabilityKey: key,
			HeartbeatInterval: 10 * time.Millisecond,
		})
	}()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	addr := <-ready

	pool := transport.NewPool(transport.NewTCP(), transport.PoolOptions{})
	defer pool.Close()
	sc := storagerpc.NewClient(pool, func(context.Context, proto.TargetID) (string, error) { return addr, nil })
	c := client.NewWithServices(msrv, sc, client.Config{})
	defer c.Close()

	f, a, _, err := c.CreateOpen(ctx, proto.CreateIn{Parent: proto.RootIno, Name: "f", Mode: syscall.S_IFREG | 0o644}, proto.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("weft"), 1<<18) // 1 MiB
	if _, err := f.Write(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Fsync(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Truncate(ctx, 1000); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 2000)
	if n, err := f.Read(ctx, got, 0); err != nil || !bytes.Equal(got[:n], data[:1000]) {
		t.Fatalf("read %d bytes, %v", n, err)
	}
	if err := f.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetAttr(ctx, a.Ino, proto.SetAttrIn{Valid: proto.SetSize, Size: 10}); err != nil {
		t.Fatalf("truncate by path: %v", err)
	}

	// Straight to storage, without asking the metadata server: refused.
	a, err = msrv.GetAttr(ctx, a.Ino)
	if err != nil {
		t.Fatal(err)
	}
	obj := proto.ObjectID{Ino: a.Ino, Gen: a.Gen}
	tgt := a.Layout.Targets[0]
	if _, err := sc.Read(ctx, tgt, obj, 0, got); !errors.Is(err, syscall.EACCES) {
		t.Fatalf("read without a capability: %v", err)
	}
	if err := sc.Remove(ctx, tgt, obj); !errors.Is(err, syscall.EACCES) {
		t.Fatalf("remove by a client: %v", err)
	}
	ro, err := msrv.Capability(ctx, a.Ino, proto.AccessRead)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sc.Write(proto.WithCapability(ctx, ro), tgt, obj, 0, []byte("x")); !errors.Is(err, syscall.EACCES) {
		t.Fatalf("write with a read capability: %v", err)
	}
	if n, err := sc.Read(proto.WithCapability(ctx, ro), tgt, obj, 0, got); err != nil || n != 10 {
		t.Fatalf("read with a read capability: %d, %v", n, err)
	}
}

// registryNotify passes registrations on to the metadata server and
// reports the storage server's address once its first heartbeat came: the
// storage server serves a target only after its registration returned, so
// the registration itself is too early.
type registryNotify struct {
	*meta.Server
	ready chan string
}

func (r registryNotify) RegisterTarget(ctx context.Context, uuid string, info proto.TargetInfo) (proto.TargetID, error) {
	id, err := r.Server.RegisterTarget(ctx, uuid, info)
	if err == nil && info.ID != 0 {
		select {
		case r.ready <- info.Addr:
		default:
		}
	}
	return id, err
}
