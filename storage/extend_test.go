package storage

import (
	"bytes"
	"context"
	"testing"

	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/storage/vfs"
)

// Extend grows an object with a hole and never shortens it; a missing
// object is created.
func TestExtend(t *testing.T) {
	ctx := context.Background()
	tg, err := OpenTarget("/t", TargetOptions{FS: vfs.NewMem(1 << 30)})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	obj := proto.ObjectID{Ino: 5, Stripe: 1, Gen: 9}
	if err := tg.Extend(ctx, obj, 100); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 200)
	if n, err := tg.Read(ctx, obj, 0, buf); err != nil || n != 100 || !bytes.Equal(buf[:n], make([]byte, 100)) {
		t.Fatalf("a missing object extended: %d %v", n, err)
	}
	if _, err := tg.Write(ctx, obj, 0, bytes.Repeat([]byte("x"), 150)); err != nil {
		t.Fatal(err)
	}
	if err := tg.Extend(ctx, obj, 120); err != nil {
		t.Fatal(err)
	}
	if n, err := tg.Read(ctx, obj, 0, buf); err != nil || n != 150 {
		t.Fatalf("Extend to less shortened the object: %d %v", n, err)
	}
	if err := tg.Extend(ctx, obj, 5000); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 6000)
	n, err := tg.Read(ctx, obj, 0, big)
	if err != nil || n != 5000 || !bytes.Equal(big[:150], bytes.Repeat([]byte("x"), 150)) || !bytes.Equal(big[150:5000], make([]byte, 4850)) {
		t.Fatalf("extended object: %d %v", n, err)
	}
}
