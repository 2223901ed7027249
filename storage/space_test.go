package storage

import (
	"bytes"
	"errors"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/storage/vfs"
)

// TestSpaceAndSeek runs punch, zero and allocate on one object of a target
// on the real disk (fallocate, lseek) and on the in-memory FS (the zeroing
// fallbacks), checking after each step the bytes read, where Seek finds
// data and holes, and the used bytes.
func TestSpaceAndSeek(t *testing.T) {
	for _, name := range []string{"disk", "mem"} {
		t.Run(name, func(t *testing.T) {
			var tg *Target
			if name == "mem" {
				tg = openMem(t, newMemFS(t), TargetOptions{Capacity: 1 << 30})
			} else {
				var err error
				tg, err = OpenTarget(filepath.Join(t.TempDir(), "target"), TargetOptions{Capacity: 1 << 30})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { tg.Close() })
			}
			obj := proto.ObjectID{Ino: 7, Stripe: 0, Gen: 3}
			var m model
			used := func() uint64 {
				u, err := tg.Usage()
				if err != nil {
					t.Fatal(err)
				}
				return u.Used
			}
			check := func(step string, wantUsed uint64, seeks [][3]uint64) {
				t.Helper()
				got := make([]byte, len(m)+BlockSize)
				n, err := tg.Read(ctx, obj, 0, got)
				if err != nil {
					t.Fatalf("%s: read: %v", step, err)
				}
				if !bytes.Equal(got[:n], m) {
					t.Fatalf("%s: read %d bytes, want %d; differ", step, n, len(m))
				}
				if u := used(); u != wantUsed {
					t.Errorf("%s: used %d, want %d", step, u, wantUsed)
				}
				for _, s := range seeks {
					what, off, want := proto.SeekWhat(s[0]), s[1], s[2]
					res, err := tg.Seek(ctx, obj, off, what)
					if want == ^uint64(0) {
						if !errors.Is(err, syscall.ENXIO) {
							t.Errorf("%s: seek %d from %d: %d, %v, want ENXIO", step, what, off, res, err)
						}
						continue
					}
					if err != nil || res != want {
						t.Errorf("%s: seek %d from %d: %d, %v, want %d", step, what, off, res, err, want)
					}
				}
			}
			const D, H, none = uint64(proto.SeekData), uint64(proto.SeekHole), ^uint64(0)
			B := uint64(BlockSize)

			// Missing object: all hole.
			check("missing", 0, [][3]uint64{{D, 0, none}, {H, 5, 5}})
			// Data in blocks 0-3 and 10-11 (a hole between).
			for _, w := range []struct{ off, n int }{{0, 4 * BlockSize}, {10 * BlockSize, 2 * BlockSize}} {
				p := pattern(w.off, w.n)
				if _, err := tg.Write(ctx, obj, uint64(w.off), p); err != nil {
					t.Fatal(err)
				}
				m.write(w.off, p)
			}
			check("written", 6*B, [][3]uint64{{D, 0, 0}, {D, 5 * B, 10 * B}, {H, 0, 4 * B}, {H, 4*B + 7, 4*B + 7}, {H, 10 * B, 12 * B}, {D, 12 * B, none}})

			// Punch [B/2, 3B+5): block 0's tail and block 3's head are zeroed
			// (still data), blocks 1 and 2 are freed.
			if err := tg.Space(ctx, obj, proto.SpacePunch, B/2, 3*B+5-B/2); err != nil {
				t.Fatal(err)
			}
			clear(m[B/2 : 3*B+5])
			check("punched", 4*B, [][3]uint64{{D, 0, 0}, {H, 0, B}, {D, B, 3 * B}, {H, 3 * B, 4 * B}})

			// Punch past the end of the object: the tail blocks go, the size stays.
			if err := tg.Space(ctx, obj, proto.SpacePunch, 10*B, 100*B); err != nil {
				t.Fatal(err)
			}
			clear(m[10*B:])
			check("punched the tail", 2*B, [][3]uint64{{D, 4 * B, none}, {H, 10 * B, 10 * B}})

			// Allocate [2B, 6B): blocks 1..5 that are holes get reserved (block 3 is data).
			if err := tg.Space(ctx, obj, proto.SpaceAllocate, 2*B, 4*B); err != nil {
				t.Fatal(err)
			}
			check("allocated", 5*B, [][3]uint64{{D, B, 2 * B}, {H, 2 * B, 6 * B}})

			// Allocate past the end: the object grows (reads as zeros).
			if err := tg.Space(ctx, obj, proto.SpaceAllocate, 20*B, 3*B); err != nil {
				t.Fatal(err)
			}
			m = append(m, make([]byte, 23*B-uint64(len(m)))...)
			check("allocated past the end", 8*B, [][3]uint64{{D, 6 * B, 20 * B}, {H, 20 * B, 23 * B}})

			// Zero [0, 2B+100): data becomes zeros, the range stays allocated.
			p := pattern(99, int(2*B))
			if _, err := tg.Write(ctx, obj, B, p); err != nil {
				t.Fatal(err)
			}
			m.write(int(B), p)
			if err := tg.Space(ctx, obj, proto.SpaceZero, 0, 2*B+100); err != nil {
				t.Fatal(err)
			}
			clear(m[:2*B+100])
			check("zeroed", 9*B, [][3]uint64{{D, 0, 0}, {H, 0, 6 * B}})

			// Beyond the capacity: ENOSPC, nothing changes.
			before := used()
			if err := tg.Space(ctx, obj, proto.SpaceAllocate, 100*B, 1<<31); !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("allocate past the capacity: %v, want ENOSPC", err)
			}
			check("refused", before, nil)

			// Bad mode.
			if err := tg.Space(ctx, obj, 9, 0, B); !errors.Is(err, syscall.EINVAL) {
				t.Errorf("mode 9: %v, want EINVAL", err)
			}
		})
	}
}

// TestSpaceReopen: after punch and allocate, a reopened target counts the
// same used bytes and reads the same bytes (the header and sidecar were
// written right).
func TestSpaceReopen(t *testing.T) {
	fs := newMemFS(t)
	tg := openMem(t, fs, TargetOptions{})
	obj := proto.ObjectID{Ino: 9}
	p := pattern(1, 8*BlockSize)
	if _, err := tg.Write(ctx, obj, 0, p); err != nil {
		t.Fatal(err)
	}
	if err := tg.Space(ctx, obj, proto.SpacePunch, BlockSize, 2*BlockSize); err != nil {
		t.Fatal(err)
	}
	if err := tg.Space(ctx, obj, proto.SpaceAllocate, 8*BlockSize, 4*BlockSize); err != nil {
		t.Fatal(err)
	}
	u1, _ := tg.Usage()
	tg.Close()
	tg2, err := OpenTarget("/t/target", TargetOptions{FS: vfs.FS(fs)})
	if err != nil {
		t.Fatal(err)
	}
	defer tg2.Close()
	u2, _ := tg2.Usage()
	if u1.Used != u2.Used || u1.Used != 10*BlockSize {
		t.Errorf("used %d before reopening, %d after, want %d", u1.Used, u2.Used, 10*BlockSize)
	}
	got := make([]byte, 12*BlockSize)
	n, err := tg2.Read(ctx, obj, 0, got)
	clear(p[BlockSize : 3*BlockSize])
	want := append(p, make([]byte, 4*BlockSize)...)
	if err != nil || !bytes.Equal(got[:n], want) {
		t.Errorf("read after reopening: %d, %v", n, err)
	}
}
