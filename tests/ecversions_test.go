package tests

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/weft-fs/weft/internal/testcluster"
)

// ecRecord is the record size of the cross-mount EC test: IO500
// ior-hard's, so records straddle shard and row boundaries.
const ecRecord = 47008

// TestECCrossMountPartialWrites: two mounts (two client processes, each
// with its own row locks) write interleaved 47,008-byte records into the
// same rows of one ec 2+1 file at once, pass after pass. Every row update
// writes its shards conditionally on the versions it read, so colliding
// updates start again instead of leaving parity that belongs to neither.
// Afterwards the file reads back whole from a fresh mount with each
// storage server stopped in turn: every shard decoded from the others
// matches.
func TestECCrossMountPartialWrites(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Servers: 3, Targets: 3, Mounts: 2, Timeout: "10s"})
	protectSetup(t, c, "ec", 3, "--ec", "2+1")
	const records = 90 // about 4 MiB: two rows of 2 MiB
	const passes = 3
	want := make([]byte, records*ecRecord)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for w := range 2 {
		for r := w; r < records; r += 2 {
			copy(want[r*ecRecord:], pattern(uint32(1000*(passes-1)+r), int64(r*ecRecord), ecRecord))
		}
		wg.Go(func() {
			errs[w] = within(t, fmt.Sprintf("writer %d", w), func() error {
				f, err := os.OpenFile(filepath.Join(c.Mount(w), "m", "f0"), os.O_RDWR, 0)
				if err != nil {
					return err
				}
				defer f.Close()
				for pass := range passes {
					for r := w; r < records; r += 2 {
						if _, err := f.WriteAt(pattern(uint32(1000*pass+r), int64(r*ecRecord), ecRecord), int64(r*ecRecord)); err != nil {
							return err
						}
					}
					if err := f.Sync(); err != nil {
						return err
					}
				}
				return f.Close()
			})
		})
	}
	wg.Wait()
	for w, err := range errs {
		if err != nil {
			t.Fatalf("writer %d: %v", w, err)
		}
	}
	for i := range 3 {
		c.StopStorage(i)
		m := c.AddMount()
		var got []byte
		if err := within(t, "read", func() (err error) {
			got, err = os.ReadFile(filepath.Join(c.Mount(m), "m", "f0"))
			return err
		}); err != nil {
			t.Fatalf("storage server %d stopped: %v", i, err)
		}
		if !bytes.Equal(got, want) {
			at := 0
			for at < min(len(got), len(want)) && got[at] == want[at] {
				at++
			}
			t.Fatalf("storage server %d stopped: %d bytes, want %d, first difference at %d", i, len(got), len(want), at)
		}
		c.StartStorage(i)
		c.WaitTargetsUp(3)
	}
}

// TestMirrorLateWriteFrozen: a mirror 2 copy's server is stopped (SIGSTOP)
// while a file is written: the mount gives up on it and marks it stale,
// and the file is written again on the other copy. A resync started while
// the server is still stopped and the stopped server's late write race
// when it continues; the repair fenced the copy, so whichever comes first,
// the repaired copy ends up with the file's bytes, and the file reads back
// right from it alone.
func TestMirrorLateWriteFrozen(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Servers: 2, Targets: 2, Mounts: 2, Timeout: "10s"})
	d := mirrorSetup(t, c)
	p := filepath.Join(d, "f0")
	const n = 1<<20 + 1000
	if err := writeSynced(p, pattern(1, 0, n)); err != nil {
		t.Fatal(err)
	}
	c.FreezeStorage(1)
	defer c.ThawStorage(1)
	if err := within(t, "write with a server stopped", func() error { return writeSynced(p, pattern(2, 0, n)) }); err != nil {
		t.Fatal(err)
	}
	if s := staleCount(t, d); s != 1 {
		t.Fatalf("%d stale copies after a write with a server stopped, want 1", s)
	}
	cur := pattern(3, 0, n)
	if err := within(t, "write again", func() error { return writeSynced(p, cur) }); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		// From the other mount, so its requests reach the stopped server
		// on other connections than the late write.
		ctx := t.Context()
		c.Weft(ctx, "resync", filepath.Join(c.Mount(1), "m", "f0"))
	}()
	c.ThawStorage(1)
	<-done
	c.WaitTargetsUp(2)
	resync(t, c, d) // again if the first ran out of time while the server was stopped
	if s := staleCount(t, d); s != 0 {
		t.Fatalf("%d stale copies after resync", s)
	}
	c.StopStorage(0)
	m := c.AddMount()
	var got []byte
	if err := within(t, "read", func() (err error) {
		got, err = os.ReadFile(filepath.Join(c.Mount(m), "m", "f0"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, cur) {
		t.Fatalf("the repaired copy reads %d bytes, not the file's last content", len(got))
	}
}
