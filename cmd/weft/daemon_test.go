package main

import (
	"log/slog"
	"runtime"
	"testing"
)

// --gomaxprocs sets the runtime's GOMAXPROCS, a command's default stands in
// for 0, and the environment variable GOMAXPROCS wins over both.
func TestSetMaxProcs(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	t.Setenv("GOMAXPROCS", "")
	for _, tc := range []struct{ flag, def, want int }{
		{flag: 1, def: 8, want: 1},
		{flag: 3, def: 0, want: 3},
		{flag: 0, def: 5, want: 5},
	} {
		o := daemonOptions{GoMaxProcs: tc.flag}
		if got := o.setMaxProcs(tc.def); got != tc.want || runtime.GOMAXPROCS(0) != tc.want {
			t.Errorf("--gomaxprocs %d, default %d: %d in force, want %d", tc.flag, tc.def, got, tc.want)
		}
	}
	runtime.GOMAXPROCS(2)
	t.Setenv("GOMAXPROCS", "2")
	o := daemonOptions{GoMaxProcs: 1}
	if got := o.setMaxProcs(8); got != 2 {
		t.Errorf("with GOMAXPROCS=2 in the environment, --gomaxprocs 1 gave %d", got)
	}
	if err := (&daemonOptions{GoMaxProcs: -1}).validate(); err == nil {
		t.Error("--gomaxprocs -1 accepted")
	}
}

// A member with --follower-gomaxprocs starts with it, switches to the
// leader's value when it leads and back when it follows again; without
// the setting, or with GOMAXPROCS in the environment, nothing switches.
func TestFollowerProcs(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	t.Setenv("GOMAXPROCS", "")
	log := slog.New(slog.DiscardHandler)
	o := metaOptions{FollowerGoMaxProcs: 1}
	onRole := o.followerProcs(3, log)
	if onRole == nil || runtime.GOMAXPROCS(0) != 1 {
		t.Fatalf("a member starts with GOMAXPROCS %d (switch %v), want 1", runtime.GOMAXPROCS(0), onRole != nil)
	}
	for _, leader := range []bool{true, false, true} {
		onRole(leader)
		if want := map[bool]int{true: 3, false: 1}[leader]; runtime.GOMAXPROCS(0) != want {
			t.Errorf("leader %v: GOMAXPROCS %d, want %d", leader, runtime.GOMAXPROCS(0), want)
		}
	}
	if (&metaOptions{}).followerProcs(3, log) != nil {
		t.Error("a switch without --follower-gomaxprocs")
	}
	t.Setenv("GOMAXPROCS", "2")
	if o.followerProcs(3, log) != nil {
		t.Error("a switch although the environment sets GOMAXPROCS")
	}
}
