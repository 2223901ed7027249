package version

import (
	"runtime"
	"strings"
	"testing"
)

func TestGet(t *testing.T) {
	i := Get()
	if i.Release != Release || i.Go != runtime.Version() {
		t.Fatalf("Get() = %+v", i)
	}
	s := String()
	if !strings.HasPrefix(s, Release+" (") || !strings.Contains(s, runtime.Version()) {
		t.Fatalf("String() = %q", s)
	}
	if (Info{Release: "1", Go: "go1"}).String() != "1 (unknown revision, go1)" {
		t.Fatalf("String without revision = %q", (Info{Release: "1", Go: "go1"}).String())
	}
}
