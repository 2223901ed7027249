package storage_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
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
	"github.com/weft-fs/weft/storage/localread"
	"github.com/weft-fs/weft/storage/storagerpc"
	"github.com/weft-fs/weft/transport"
)

// localAsk sends req on the local socket at path and returns the answer
// and the descriptors that came with it.
func localAsk(t *testing.T, path string, req []byte) (storagerpc.LocalResp, []int, error) {
	t.Helper()
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute))
	if _, _, err := c.WriteMsgUnix(req, nil, nil); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, storagerpc.MaxLocalMessage)
	oob := make([]byte, syscall.CmsgSpace(4*4))
	n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return storagerpc.LocalResp{}, nil, err
	}
	var fds []int
	msgs, err := syscall.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		got, err := syscall.ParseUnixRights(&m)
		if err != nil {
			t.Fatal(err)
		}
		fds = append(fds, got...)
	}
	resp, err := storagerpc.DecodeLocalResp(buf[:n])
	return resp, fds, err
}

// TestLocalSocket runs a storage server (Run) with a local socket and a
// client whose storage is a localread.Reader: the client's reads of a
// file are served from the object's files, and a corrupt block falls back
// to the server's read (EIO, reported). On the socket itself, LocalOpen
// answers descriptors only with a capability, signed with the cluster's
// key and unexpired, granting read on that very object (inode and
// generation); anything else is refused with EACCES and no descriptor.
func TestLocalSocket(t *testing.T) {
	ctx := context.Background()
	key := bytes.Repeat([]byte{0x42}, capability.KeySize)
	msrv, err := meta.New(meta.Options{Store: store.NewMem(), CapabilityKey: key})
	if err != nil {
		t.Fatal(err)
	}
	defer msrv.Close()
	ready := make(chan string, 1)
	tdir := filepath.Join(t.TempDir(), "t")
	sock := filepath.Join(t.TempDir(), "local.sock")
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- storage.Run(runCtx, storage.Config{
			ListenAddr: "127.0.0.1:0", Targets: []string{tdir}, LocalSocket: sock,
			Registry: registryNotify{msrv, ready}, Transport: asClients{transport.NewTCP()}, CapabilityKey: key,
			HeartbeatInterval: 10 * time.Millisecond,
		})
	}()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
		if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the local socket is left behind: %v", err)
		}
	}()
	addr := <-ready
	pool := transport.NewPool(transport.NewTCP(), transport.PoolOptions{})
	defer pool.Close()
	sc := storagerpc.NewClient(pool, func(context.Context, proto.TargetID) (string, error) { return addr, nil })
	lr := localread.New(sc, localread.Options{})
	defer lr.Close()
	c := client.NewWithServices(msrv, lr, client.Config{})
	defer c.Close()

	f, a, _, err := c.CreateOpen(ctx, proto.CreateIn{Parent: proto.RootIno, Name: "f", Mode: syscall.S_IFREG | 0o644}, proto.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 1<<20+3000)
	for i := range data {
		data[i] = byte(i*7 + i>>12)
	}
	if _, err := f.Write(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Fsync(ctx); err != nil {
		t.Fatal(err)
	}
	// The first read of the target asks for its socket in the background.
	got := make([]byte, len(data)+5000)
	deadline := time.Now().Add(time.Minute)
	for {
		n, err := f.Read(ctx, got, 0)
		if err != nil || !bytes.Equal(got[:n], data) {
			t.Fatalf("read %d bytes, %v", n, err)
		}
		if lr.Counts().Local > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no read was served locally")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, r := range [][2]int{{5, 100}, {4096, 4096}, {1<<20 - 7, 5000}, {len(data) - 10, 100}} {
		n, err := f.Read(ctx, got[:r[1]], uint64(r[0]))
		want := data[r[0]:min(r[0]+r[1], len(data))]
		if err != nil || !bytes.Equal(got[:n], want) {
			t.Fatalf("read [%d,+%d): %d bytes, %v", r[0], r[1], n, err)
		}
	}
	// A small aligned read bypasses it only for a handle opened O_DIRECT
	// (its reads' context marked uncached), and reads the same bytes. (A
	// second handle: its open drops the first's read-ahead chunks, which
	// would serve these reads.)
	f2, _, err := c.Open(ctx, a.Ino, proto.AccessRead)
	if err != nil {
		t.Fatal(err)
	}
	small := make([]byte, 4096, 64<<10)[:4096] // page aligned, as every buffer this large
	for i, uncached := range []bool{false, true} {
		rctx := ctx
		if uncached {
			rctx = proto.WithUncached(ctx)
		}
		off := (i + 3) * 64 << 10 // where nothing was read before
		before := lr.Counts().Direct
		if n, err := f2.Read(rctx, small, uint64(off)); err != nil || !bytes.Equal(small[:n], data[off:off+4096]) {
			t.Fatalf("4 KiB read (uncached %v): %d bytes, %v", uncached, n, err)
		}
		if direct := lr.Counts().Direct - before; direct != map[bool]uint64{false: 0, true: 1}[uncached] {
			t.Fatalf("4 KiB read (uncached %v): %d reads bypassed the page cache", uncached, direct)
		}
	}
	if err := f2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// A large aligned read bypasses the page cache (O_DIRECT) and reads
	// what was written last. (Into a buffer of its own, page aligned: Go
	// allocates buffers this large at page boundaries.)
	newer := bytes.Repeat([]byte("direct"), 200<<10/6)[:128<<10]
	if _, err := f.Write(ctx, newer, 256<<10); err != nil {
		t.Fatal(err)
	}
	if err := f.Fsync(ctx); err != nil {
		t.Fatal(err)
	}
	copy(data[256<<10:], newer)
	big := make([]byte, 512<<10)
	if n, err := f.Read(ctx, big, 128<<10); err != nil || !bytes.Equal(big[:n], data[128<<10:640<<10]) {
		t.Fatalf("large read: %d bytes, %v", n, err)
	}
	if lr.Counts().Direct == 0 {
		t.Fatal("no read bypassed the page cache")
	}
	// (Concurrent first reads of the object may each have opened it.)
	if n := lr.Counts(); n.Fallback != 0 || n.Opens == 0 || lr.OpenObjects() != 1 {
		t.Fatalf("local %d, fallback %d, opens %d, open objects %d: want no fallback, one object open", n.Local, n.Fallback, n.Opens, lr.OpenObjects())
	}

	if err := f.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := lr.OpenObjects(); n != 0 {
		t.Fatalf("%d objects still open after the file's release", n)
	}

	// A flipped byte: the local check fails, the server's read fails
	// with EIO. (A new handle: the old one's read-ahead may hold it.)
	a, err = msrv.GetAttr(ctx, a.Ino)
	if err != nil {
		t.Fatal(err)
	}
	obj := proto.ObjectID{Ino: a.Ino, Gen: a.Gen}
	objPath := filepath.Join(tdir, "objects", fmt.Sprintf("%02x", uint64(a.Ino)&0xff), fmt.Sprintf("%d.%x.0", a.Ino, a.Gen))
	of, err := os.OpenFile(objPath, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := []byte{0}
	of.ReadAt(b, 8192+10)
	b[0] ^= 1
	of.WriteAt(b, 8192+10)
	of.Close()
	f, _, err = c.Open(ctx, a.Ino, proto.AccessRead)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Read(ctx, got[:4096], 8192); !errors.Is(err, syscall.EIO) {
		t.Fatalf("read of a corrupt block: %v, want EIO", err)
	}
	if fallback := lr.Counts().Fallback; fallback != 1 {
		t.Fatalf("%d reads fell back to RPC, want the corrupt one", fallback)
	}
	if n, err := f.Read(ctx, got[:4096], 0); err != nil || !bytes.Equal(got[:n], data[:4096]) {
		t.Fatalf("read of a good block after the corrupt one: %d, %v", n, err)
	}
	if err := f.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := lr.OpenObjects(); n != 0 {
		t.Fatalf("%d objects still open after the file's release", n)
	}

	// The socket itself.
	ck, err := capability.NewKey(0, key)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := capability.NewKey(0, bytes.Repeat([]byte{0x43}, capability.KeySize))
	now := time.Now()
	sign := func(k *capability.Key, c capability.Capability) []byte {
		if c.Issued.IsZero() {
			c.Issued = now
		}
		if c.Expiry.IsZero() {
			c.Expiry = now.Add(time.Hour)
		}
		b, err := k.Sign(c)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tgt := a.Layout.Targets[0]
	for _, tc := range []struct {
		name  string
		cap   []byte
		obj   proto.ObjectID
		errno syscall.Errno
	}{
		{"a read capability", sign(ck, capability.Capability{Ino: a.Ino, Gen: a.Gen, Rights: proto.AccessRead}), obj, 0},
		{"a read capability of another client", sign(ck, capability.Capability{Ino: a.Ino, Gen: a.Gen, Rights: proto.AccessRead, Holder: "mount-9"}), obj, 0},
		{"no capability", nil, obj, syscall.EACCES},
		{"another inode's", sign(ck, capability.Capability{Ino: a.Ino + 1, Gen: a.Gen, Rights: proto.AccessRead}), obj, syscall.EACCES},
		{"for another object than it names", sign(ck, capability.Capability{Ino: a.Ino, Gen: a.Gen, Rights: proto.AccessRead}),
			proto.ObjectID{Ino: a.Ino + 1, Gen: a.Gen}, syscall.EACCES},
		{"another generation's", sign(ck, capability.Capability{Ino: a.Ino, Gen: a.Gen + 1, Rights: proto.AccessRead}), obj, syscall.EACCES},
		{"a write-only capability", sign(ck, capability.Capability{Ino: a.Ino, Gen: a.Gen, Rights: proto.AccessWrite}), obj, syscall.EACCES},
		{"an expired capability", sign(ck, capability.Capability{Ino: a.Ino, Gen: a.Gen, Rights: proto.AccessRead,
			Issued: now.Add(-2 * time.Hour), Expiry: now.Add(-time.Hour)}), obj, syscall.EACCES},
		{"signed with another key", sign(other, capability.Capability{Ino: a.Ino, Gen: a.Gen, Rights: proto.AccessRead}), obj, syscall.EACCES},
		{"a missing object", sign(ck, capability.Capability{Ino: a.Ino, Gen: a.Gen, Rights: proto.AccessRead}),
			proto.ObjectID{Ino: a.Ino, Gen: a.Gen, Stripe: 5}, syscall.ENOENT},
	} {
		req := storagerpc.LocalReq{Op: storagerpc.LocalOpen, Cap: tc.cap, ObjectReq: storagerpc.ObjectReq{Target: tgt, Obj: tc.obj}}
		resp, fds, err := localAsk(t, sock, req.Encode())
		for _, fd := range fds {
			syscall.Close(fd)
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if resp.Errno != tc.errno {
			t.Errorf("%s: errno %v (%s), want %v", tc.name, resp.Errno, resp.Msg, tc.errno)
		}
		if want := map[bool]int{true: 2, false: 0}[tc.errno == 0]; len(fds) != want {
			t.Errorf("%s: %d descriptors, want %d", tc.name, len(fds), want)
		}
	}
	// A request that does not decode is refused, and the connection ends.
	if resp, fds, err := localAsk(t, sock, []byte{storagerpc.LocalFormat, storagerpc.LocalOpen, 1, 2}); err != nil || resp.Errno != syscall.EINVAL || len(fds) != 0 {
		t.Errorf("malformed request: %+v, %d descriptors, %v; want EINVAL", resp, len(fds), err)
	}
	if resp, _, err := localAsk(t, sock, []byte{9, storagerpc.LocalHello}); err != nil || resp.Errno != syscall.EINVAL {
		t.Errorf("request of an unknown format: %+v, %v; want EINVAL", resp, err)
	}
}
