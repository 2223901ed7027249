package storagerpc_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/storage"
	"github.com/weft-fs/weft/storage/storagerpc"
	"github.com/weft-fs/weft/storage/vfs"
	"github.com/weft-fs/weft/transport"
)

// TestReadSumsOverTCP: whole-block reads go as OpReadSums, whose bytes the
// server sends from the disk file with sendfile and the client checks; a
// byte flipped on the disk is caught by the client, read again with OpRead,
// and fails with EIO, the server reporting the object as corrupt; other
// reads go as OpRead. On the in-memory FS (no descriptor to send from)
// the server copies the bytes and the client checks them the same way.
func TestReadSumsOverTCP(t *testing.T) {
	for _, onDisk := range []bool{true, false} {
		name := "memory"
		if onDisk {
			name = "disk"
		}
		t.Run(name, func(t *testing.T) {
			fs, dir := vfs.Default, filepath.Join(t.TempDir(), "t")
			if !onDisk {
				fs, dir = vfs.NewMem(1<<30), "/t"
			}
			srv := storage.NewServer()
			tg, err := storage.OpenTarget(dir, storage.TargetOptions{FS: fs})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { tg.Close() })
			if err := tg.SetID(1); err != nil {
				t.Fatal(err)
			}
			if err := srv.Add(tg); err != nil {
				t.Fatal(err)
			}
			var corrupt sync.Map
			tg.SetCorruptHook(func(o proto.ObjectID) { corrupt.Store(o, true) })
			h := storagerpc.NewHandler(srv, storagerpc.Options{AllowUnauthenticated: true})
			var mu sync.Mutex
			ops := map[uint16]int{}
			tcp := transport.NewTCP()
			ln, err := tcp.Listen("127.0.0.1:0", func(ctx context.Context, op uint16, req []byte) ([]byte, error) {
				mu.Lock()
				ops[op]++
				mu.Unlock()
				return h(ctx, op, req)
			})
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			pool := transport.NewPool(tcp, transport.PoolOptions{})
			defer pool.Close()
			// The address lookup calls another server with the read's ctx,
			// as a mount's does the metadata service: its answer must not
			// land in the read's buffers.
			lookup, err := tcp.Listen("127.0.0.1:0", func(_ context.Context, _ uint16, req []byte) ([]byte, error) { return req, nil })
			if err != nil {
				t.Fatal(err)
			}
			defer lookup.Close()
			c := storagerpc.NewClient(pool, func(ctx context.Context, _ proto.TargetID) (string, error) {
				q := bytes.Repeat([]byte("where is target 1? "), 1000) // longer than any head here
				if a, err := pool.Call(ctx, lookup.Addr(), 1, q); err != nil || !bytes.Equal(a, q) {
					return "", fmt.Errorf("lookup answered %d bytes of %d, %v", len(a), len(q), err)
				}
				return ln.Addr(), nil
			})
			count := func(op uint16) int {
				mu.Lock()
				defer mu.Unlock()
				n := ops[op]
				ops[op] = 0
				return n
			}

			obj := proto.ObjectID{Ino: 77, Gen: 3}
			data := make([]byte, 3<<20+1000) // ends inside a block
			for i := range data {
				data[i] = byte(i*13 + i>>11)
			}
			if _, err := c.Write(ctx, 1, obj, 0, data); err != nil {
				t.Fatal(err)
			}
			for _, tc := range []struct{ off, n, want int }{
				{0, 64 << 10, 64 << 10}, {8192, 1 << 20, 1 << 20}, {1 << 20, 3 << 20, len(data) - 1<<20}, {3 << 20, 64 << 10, 1000}, {4 << 20, 64 << 10, 0},
			} {
				got := make([]byte, tc.n)
				n, err := c.Read(ctx, 1, obj, uint64(tc.off), got)
				if err != nil || n != tc.want || !bytes.Equal(got[:n], data[min(tc.off, len(data)):][:n]) {
					t.Fatalf("read %d at %d: %d bytes, %v; want %d of the object's", tc.n, tc.off, n, err, tc.want)
				}
			}
			if s, r := count(storagerpc.OpReadSums), count(storagerpc.OpRead); s != 5 || r != 0 {
				t.Fatalf("whole-block reads: %d OpReadSums, %d OpRead; want 5, 0", s, r)
			}
			for _, n := range []int{1000, 4096, storagerpc.MinReadSums + 100} { // a partial block; a small read
				got := make([]byte, n)
				if got, err := c.Read(ctx, 1, obj, 4096, got); err != nil || got != n {
					t.Fatalf("%d bytes: %d, %v", n, got, err)
				}
				if !bytes.Equal(got, data[4096:4096+n]) {
					t.Fatalf("%d bytes: not the object's", n)
				}
				if s, r := count(storagerpc.OpReadSums), count(storagerpc.OpRead); s != 0 || r != 1 {
					t.Fatalf("%d bytes: %d OpReadSums, %d OpRead; want 0, 1", n, s, r)
				}
			}
			if _, ok := corrupt.Load(obj); ok {
				t.Fatal("a good object was reported corrupt")
			}

			// Flip a byte of the second block where the data lives.
			flip := 4096 + 17
			// Under the sidecar, as a disk's bit rot would (the object's
			// name: package storage's format, objects/<ino&0xff>/<ino>.<gen>.<stripe>).
			f, err := fs.OpenFile(filepath.Join(dir, "objects", "4d", "77.3.0"), os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt([]byte{data[flip] ^ 0x40}, int64(flip)); err != nil {
				t.Fatal(err)
			}
			f.Close()
			got := make([]byte, 1<<20)
			n, err := c.Read(ctx, 1, obj, 0, got)
			if !errors.Is(err, syscall.EIO) {
				t.Fatalf("read over a flipped byte: %d bytes, %v; want EIO", n, err)
			}
			if s, r := count(storagerpc.OpReadSums), count(storagerpc.OpRead); s != 1 || r != 1 {
				t.Fatalf("read over a flipped byte: %d OpReadSums, %d OpRead; want 1 (caught by the client) then 1 (checked by the server)", s, r)
			}
			if _, ok := corrupt.Load(obj); !ok {
				t.Fatal("the corrupt object was not reported")
			}
			// The blocks before it still read.
			if n, err := c.Read(ctx, 1, obj, 1<<20, got[:64<<10]); err != nil || n != 64<<10 || !bytes.Equal(got[:64<<10], data[1<<20:][:64<<10]) {
				t.Fatalf("the good block before: %d, %v", n, err)
			}
		})
	}
}

// TestReadSumsRacingWrites: reads racing with writes of the same range
// (the server lets the object's lock go before it sends the bytes) never
// fail and never return a block that is neither the old nor the new bytes:
// a block changed in between fails the client's check and is read again,
// checked on the server under the lock.
func TestReadSumsRacingWrites(t *testing.T) {
	srv := storage.NewServer()
	tg, err := storage.OpenTarget(filepath.Join(t.TempDir(), "t"), storage.TargetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tg.Close() })
	if err := tg.SetID(1); err != nil {
		t.Fatal(err)
	}
	if err := srv.Add(tg); err != nil {
		t.Fatal(err)
	}
	tcp := transport.NewTCP()
	ln, err := tcp.Listen("127.0.0.1:0", storagerpc.NewHandler(srv, storagerpc.Options{AllowUnauthenticated: true}))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	pool := transport.NewPool(tcp, transport.PoolOptions{})
	defer pool.Close()
	c := storagerpc.NewClient(pool, func(context.Context, proto.TargetID) (string, error) { return ln.Addr(), nil })
	obj := proto.ObjectID{Ino: 8}
	a, b := bytes.Repeat([]byte{'a'}, 1<<20), bytes.Repeat([]byte{'b'}, 1<<20)
	if _, err := c.Write(ctx, 1, obj, 0, a); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	wrote := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				wrote <- nil
				return
			default:
			}
			if _, err := c.Write(ctx, 1, obj, 0, [][]byte{a, b}[i%2]); err != nil {
				wrote <- err
				return
			}
		}
	}()
	got := make([]byte, 1<<20)
	for i := 0; i < 300; i++ {
		n, err := c.Read(ctx, 1, obj, 0, got)
		if err != nil || n != len(got) {
			t.Fatalf("read %d: %d bytes, %v", i, n, err)
		}
		for blk := 0; blk < len(got); blk += 4096 {
			if b := got[blk : blk+4096]; !bytes.Equal(b, a[:4096]) && !bytes.Equal(b, bb(4096)) {
				t.Fatalf("read %d: block at %d is neither the old nor the new bytes", i, blk)
			}
		}
	}
	close(stop)
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
}

func bb(n int) []byte { return bytes.Repeat([]byte{'b'}, n) }
