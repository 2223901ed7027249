package storage

import (
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/weft-fs/weft/internal/pace"
	"github.com/weft-fs/weft/proto"
)

// benchTargets are where the benchmarks run: tmpfs and the disk holding
// the test's temporary directory.
var benchTargets = []struct {
	name string
	dir  func(testing.TB) string
}{
	{"shm", fastDir},
	{"disk", func(b testing.TB) string { return b.TempDir() }},
}

const benchObjSize = 64 << 20

func benchTarget(b *testing.B, dir string, fill bool) (*Target, proto.ObjectID) {
	tg, err := OpenTarget(filepath.Join(dir, "target"), TargetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { tg.Close() })
	obj := proto.ObjectID{Ino: 1}
	if fill {
		buf := pattern(1, 1<<20)
		for off := 0; off < benchObjSize; off += len(buf) {
			if _, err := tg.Write(ctx, obj, uint64(off), buf); err != nil {
				b.Fatal(err)
			}
		}
	}
	return tg, obj
}

func BenchmarkWrite1MiB(b *testing.B) {
	for _, bt := range benchTargets {
		b.Run(bt.name, func(b *testing.B) {
			tg, obj := benchTarget(b, bt.dir(b), false)
			buf := pattern(1, 1<<20)
			b.SetBytes(int64(len(buf)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				off := uint64(i%64) << 20
				if _, err := tg.Write(ctx, obj, off, buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkRead1MiB(b *testing.B) {
	for _, bt := range benchTargets {
		b.Run(bt.name, func(b *testing.B) {
			tg, obj := benchTarget(b, bt.dir(b), true)
			buf := make([]byte, 1<<20)
			b.SetBytes(int64(len(buf)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				off := uint64(i%64) << 20
				if n, err := tg.Read(ctx, obj, off, buf); err != nil || n != len(buf) {
					b.Fatal(n, err)
				}
			}
		})
	}
}

func BenchmarkRandRead4KiB(b *testing.B) {
	for _, bt := range benchTargets {
		b.Run(bt.name, func(b *testing.B) {
			tg, obj := benchTarget(b, bt.dir(b), true)
			buf := make([]byte, 4096)
			r := rand.New(rand.NewPCG(1, 2))
			b.SetBytes(int64(len(buf)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				off := uint64(r.IntN(benchObjSize/4096)) * 4096
				if n, err := tg.Read(ctx, obj, off, buf); err != nil || n != len(buf) {
					b.Fatal(n, err)
				}
			}
		})
	}
}

// BenchmarkScrub64MiB: one unpaced scrub of a 64 MiB object (the ceiling
// scrub.rate throttles).
func BenchmarkScrub64MiB(b *testing.B) {
	for _, bt := range benchTargets {
		b.Run(bt.name, func(b *testing.B) {
			tg, obj := benchTarget(b, bt.dir(b), true)
			buf := make([]byte, scrubChunk)
			p := pace.New(0)
			b.SetBytes(benchObjSize)
			b.ResetTimer()
			for range b.N {
				if n, err := tg.ScrubObject(ctx, obj, p, buf); err != nil || n != benchObjSize {
					b.Fatalf("scrub: %d, %v", n, err)
				}
			}
		})
	}
}
