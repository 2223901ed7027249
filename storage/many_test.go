package storage

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/weft-fs/weft/proto"
)

// fastDir is a temporary directory on tmpfs when there is one.
func fastDir(t testing.TB) string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		d, err := os.MkdirTemp("/dev/shm", "weft-storage-test-")
		if err == nil {
			t.Cleanup(func() { os.RemoveAll(d) })
			return d
		}
	}
	return t.TempDir()
}

func openFDs(t *testing.T) int {
	names, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(names)
}

// TestManyObjects writes 100,000 objects to one target on the real
// filesystem with the descriptor limit lowered to 1,024: a target that held
// a descriptor per object would fail long before the end.
func TestManyObjects(t *testing.T) {
	const objects = 100_000
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	low := lim
	low.Cur = 1024
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim) })

	dir := filepath.Join(fastDir(t), "target")
	tg, err := OpenTarget(dir, TargetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before := openFDs(t)
	start := time.Now()
	maxFDs := 0
	for i := 1; i <= objects; i++ {
		obj := proto.ObjectID{Ino: proto.Ino(i)}
		if _, err := tg.Write(ctx, obj, 0, []byte{byte(i), byte(i >> 8), byte(i >> 16)}); err != nil {
			t.Fatalf("object %d: %v", i, err)
		}
		if i%10_000 == 0 {
			maxFDs = max(maxFDs, openFDs(t)-before)
		}
	}
	t.Logf("wrote %d objects in %v; at most %d descriptors open", objects, time.Since(start), maxFDs)
	if maxFDs > 2*DefaultMaxOpen+8 {
		t.Fatalf("%d descriptors open for the target", maxFDs)
	}
	if n := tg.cache.open(); n > DefaultMaxOpen {
		t.Fatalf("%d objects open", n)
	}
	tg.Close()

	tg, err = OpenTarget(dir, TargetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	u, err := tg.Usage()
	if err != nil || u.Objects != objects || u.Used != objects*BlockSize {
		t.Fatalf("usage after restart = %+v, %v", u, err)
	}
	buf := make([]byte, 10)
	for i := 1; i <= objects; i += 997 {
		n, err := tg.Read(ctx, proto.ObjectID{Ino: proto.Ino(i)}, 0, buf)
		if err != nil || n != 3 || buf[0] != byte(i) || buf[1] != byte(i>>8) || buf[2] != byte(i>>16) {
			t.Fatalf("object %d: %d, %v, %x", i, n, err, buf[:n])
		}
	}
}
