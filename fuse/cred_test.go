package fuse

import (
	"context"
	"os"
	"reflect"
	"testing"
	"time"
)

func TestParseGroups(t *testing.T) {
	st := []byte("Name:\tbash\nUid:\t1000\t1000\t1000\t1000\nGid:\t100\t100\t100\t100\nGroups:\t10 100 65534 \nNgid:\t0\n")
	gs, err := parseGroups(st)
	if err != nil || !reflect.DeepEqual(gs, []uint32{10, 100, 65534}) {
		t.Fatalf("groups %v %v", gs, err)
	}
	if gs, err := parseGroups([]byte("Groups:\t\n")); err != nil || len(gs) != 0 {
		t.Fatalf("no groups: %v %v", gs, err)
	}
	if _, err := parseGroups([]byte("Groups:\tx\n")); err == nil {
		t.Fatal("bad group accepted")
	}
	if _, err := parseGroups([]byte("Uid:\t0\n")); err == nil {
		t.Fatal("missing Groups line accepted")
	}
}

// TestReadOwnGroups reads this process's groups from /proc.
func TestReadOwnGroups(t *testing.T) {
	gs, err := readGroups(uint32(os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := os.Getgroups()
	if len(gs) != len(want) {
		t.Fatalf("groups %v, want %v", gs, want)
	}
}

// TestCredsCached: one /proc read per process and groupsTTL, a new read
// when the process's uid or gid changed or the entry expired.
func TestCredsCached(t *testing.T) {
	now := time.Unix(1000, 0)
	c := newCreds("")
	c.now = func() time.Time { return now }
	c.read = func(pid uint32) ([]uint32, error) { return []uint32{pid, 7}, nil }
	for range 1000 {
		if cr := c.cred(1000, 100, 42); cr.Uid != 1000 || cr.Gid != 100 || !reflect.DeepEqual(cr.Groups, []uint32{42, 7}) {
			t.Fatalf("cred %+v", cr)
		}
	}
	if c.reads != 1 {
		t.Fatalf("%d /proc reads for 1000 calls of one process", c.reads)
	}
	c.cred(1001, 100, 42)
	if c.reads != 2 {
		t.Fatal("a changed uid did not read /proc again")
	}
	now = now.Add(groupsTTL)
	c.cred(1001, 100, 42)
	if c.reads != 3 {
		t.Fatal("an expired entry was reused")
	}
	// Outside a FUSE request ctx is left alone.
	if ctx := c.with(context.Background()); ctx != context.Background() {
		t.Fatal("ctx without a FUSE caller changed")
	}
}

// BenchmarkCreds compares the cached lookup with a /proc read per call:
// the cost a metadata operation would pay without the cache.
func BenchmarkCreds(b *testing.B) {
	pid := uint32(os.Getpid())
	b.Run("cached", func(b *testing.B) {
		c := newCreds("")
		for b.Loop() {
			c.cred(0, 0, pid)
		}
	})
	b.Run("proc-read", func(b *testing.B) {
		for b.Loop() {
			readGroups(pid)
		}
	})
}

// TestCredsWithoutJob: the FLUSH/RELEASE path (withoutJob) never asks for
// a job id on a cache miss (reading /proc/PID/environ of a process in
// execve would wait for it for ever) and caches nothing, so the next
// request of that process still gets its job; a cached job is used.
func TestCredsWithoutJob(t *testing.T) {
	c := newCreds("")
	c.read = func(pid uint32) ([]uint32, error) { return []uint32{7}, nil }
	jobReads := 0
	c.job = func(pid, uid uint32) string { jobReads++; return "j1" }
	cr, job := c.lookupEnv(1000, 100, 42, false)
	if jobReads != 0 || job != "" || !reflect.DeepEqual(cr.Groups, []uint32{7}) {
		t.Fatalf("miss without env: %+v job %q, %d job reads", cr, job, jobReads)
	}
	if _, job := c.lookup(1000, 100, 42); job != "j1" || jobReads != 1 {
		t.Fatalf("the next request got job %q after %d job reads: the miss was cached", job, jobReads)
	}
	if _, job := c.lookupEnv(1000, 100, 42, false); job != "j1" || jobReads != 1 {
		t.Fatalf("hit without env: job %q, %d job reads", job, jobReads)
	}
}
