package meta

import (
	"errors"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/weft-fs/weft/proto"
)

// TestRegistryGraceAfterRestart: targets registered before a restart count
// as up for one heartbeat timeout after it, so a restarted server places
// files at once; a target that sends no heartbeat within that grace is
// down again, one that does stays up.
func TestRegistryGraceAfterRestart(t *testing.T) {
	for _, tc := range []struct {
		name string
		// before the restart: how long the targets were silent
		silent time.Duration
		// after the restart: heartbeats (uuid -> free) at each step, the
		// time advanced after them, and what a create gives then
		beats   map[string]uint64
		advance time.Duration
		wantUp  []proto.TargetID
		wantErr error
		placeOn []proto.TargetID // the create's targets must be among these
	}{
		{name: "just restarted", wantUp: []proto.TargetID{1, 2}, placeOn: []proto.TargetID{1, 2}},
		{name: "silent long before the restart", silent: time.Hour, wantUp: []proto.TargetID{1, 2}, placeOn: []proto.TargetID{1, 2}},
		{name: "within the grace", advance: 9 * time.Second, wantUp: []proto.TargetID{1, 2}, placeOn: []proto.TargetID{1, 2}},
		{name: "grace over, no heartbeat", advance: 11 * time.Second, wantErr: syscall.EIO},
		{name: "grace over, one heartbeat", beats: map[string]uint64{"b": 1 << 30}, advance: 9*time.Second + 5*time.Second,
			wantUp: []proto.TargetID{2}, placeOn: []proto.TargetID{2}},
		// A heard target that is full does not make the unheard one full.
		{name: "heard full, unheard placeable", beats: map[string]uint64{"a": 0},
			wantUp: []proto.TargetID{1, 2}, placeOn: []proto.TargetID{2}},
		{name: "all heard full", beats: map[string]uint64{"a": 0, "b": 100}, wantUp: []proto.TargetID{1, 2}, wantErr: syscall.ENOSPC},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			for _, u := range []string{"a", "b"} {
				if _, err := e.srv.RegisterTarget(ctx, u, proto.TargetInfo{Addr: "host:" + u, Total: 1 << 30, Free: 1 << 30}); err != nil {
					t.Fatal(err)
				}
			}
			e.clock.Advance(tc.silent)
			e.restart()
			// beats come 9s after the restart when advance is long, so
			// that the grace is over but the heartbeat still counts
			step := min(tc.advance, 9*time.Second)
			e.clock.Advance(step)
			for u, free := range tc.beats {
				if _, err := e.srv.RegisterTarget(ctx, u, proto.TargetInfo{Addr: "host:" + u, Total: 1 << 31, Free: free}); err != nil {
					t.Fatal(err)
				}
			}
			e.clock.Advance(tc.advance - step)

			ts, err := e.srv.Targets(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var up []proto.TargetID
			for _, ti := range ts {
				if ti.Up {
					up = append(up, ti.ID)
				}
			}
			if !slices.Equal(up, tc.wantUp) {
				t.Errorf("up targets %v, want %v (%+v)", up, tc.wantUp, ts)
			}
			for i := range 8 {
				a, err := e.srv.Create(ctx, proto.CreateIn{Parent: proto.RootIno, Name: fmt.Sprint("f", i), Mode: 0o644})
				if tc.wantErr != nil {
					if !errors.Is(err, tc.wantErr) {
						t.Fatalf("create: %v, want %v", err, tc.wantErr)
					}
					continue
				}
				if err != nil {
					t.Fatalf("create %d: %v", i, err)
				}
				for _, id := range a.Layout.Targets {
					if !slices.Contains(tc.placeOn, id) {
						t.Fatalf("create %d placed on %v, want only %v", i, a.Layout.Targets, tc.placeOn)
					}
				}
			}
		})
	}
}

// TestRegistryGraceSpreads: files created during the grace, before any
// usage is known, are spread over the loaded targets.
func TestRegistryGraceSpreads(t *testing.T) {
	e := newEnv(t)
	for _, u := range []string{"a", "b", "c"} {
		if _, err := e.srv.RegisterTarget(ctx, u, proto.TargetInfo{Addr: "host:" + u, Total: 1 << 30, Free: 1 << 30}); err != nil {
			t.Fatal(err)
		}
	}
	e.restart()
	seen := map[proto.TargetID]int{}
	for i := range 30 {
		a, err := e.srv.Create(ctx, proto.CreateIn{Parent: proto.RootIno, Name: fmt.Sprint("f", i), Mode: 0o644})
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range a.Layout.Targets {
			seen[id]++
		}
	}
	if len(seen) != 3 {
		t.Fatalf("30 files during the grace landed on %v, want all 3 targets", seen)
	}
}

// TestStatFSSharedDevice: targets that report one device (one disk) count
// its size and free space once in StatFS; the bytes each holds add up.
func TestStatFSSharedDevice(t *testing.T) {
	e := newEnv(t)
	for i, dev := range []string{"m1:disk", "m1:disk", "m1:disk", "", "m2:disk"} {
		uuid := fmt.Sprint("t", i)
		_, err := e.srv.RegisterTarget(ctx, uuid, proto.TargetInfo{Addr: "host:" + uuid, Total: 100, Used: 10, Free: 60, Device: dev, Objects: 3, FilesFree: 5})
		e.must(err)
	}
	st, err := e.srv.StatFS(ctx)
	e.must(err)
	if st.Total != 300 || st.Free != 180 || st.Used != 50 {
		t.Fatalf("statfs %+v, want total 300 (one disk counted once, two others), free 180, used 50", st)
	}
	ts, err := e.srv.Targets(ctx)
	e.must(err)
	if ts[0].Device != "m1:disk" || ts[0].Objects != 3 || ts[0].FilesFree != 5 {
		t.Fatalf("target %+v: the heartbeat's objects, free inodes and device are not kept", ts[0])
	}
}

// TestStatFSSharedDeviceReports: targets of one disk that reported its
// free space at different moments (each at its own heartbeat, while the
// disk filled) give StatFS the figures of the lowest-numbered one, every
// time, as `weft df` counts them: not whichever target came first.
func TestStatFSSharedDeviceReports(t *testing.T) {
	e := newEnv(t)
	for i, free := range []uint64{60, 50, 40, 30} {
		uuid := fmt.Sprint("t", i)
		_, err := e.srv.RegisterTarget(ctx, uuid, proto.TargetInfo{Addr: "host:" + uuid, Total: 100, Used: 10, Free: free, Device: "m1:disk"})
		e.must(err)
	}
	ts, err := e.srv.Targets(ctx)
	e.must(err)
	want := ts[0].Free
	for range 100 {
		st, err := e.srv.StatFS(ctx)
		e.must(err)
		if st.Total != 100 || st.Free != want {
			t.Fatalf("statfs %+v, want total 100 and the free space of target %d (%d)", st, ts[0].ID, want)
		}
	}
}
