package cputime

import "testing"

// TestSelfAdvances: spinning for a while shows up in Self (fails if it
// read nothing, or another process's or a child's time only).
func TestSelfAdvances(t *testing.T) {
	t0 := Self()
	x := 0
	for Self()-t0 < 20_000_000 { // 20 ms of CPU
		x++
	}
	if x == 0 || Self() <= t0 {
		t.Fatalf("CPU time did not advance: %v then %v", t0, Self())
	}
}
