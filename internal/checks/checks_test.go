package checks

import "testing"

// TestChecksOn: the test suite runs only on builds with every check on;
// a weft_nocheck build is for benchmarks (bench-ab.sh --tags-b).
func TestChecksOn(t *testing.T) {
	if Off {
		t.Fatal("built with -tags weft_nocheck: permission and capability checks are off; run the tests on a normal build")
	}
}
