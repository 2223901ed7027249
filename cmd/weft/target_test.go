package main

import (
	"strings"
	"testing"
	"time"

	"github.com/weft-fs/weft/proto"
)

func TestParseTargetID(t *testing.T) {
	for in, want := range map[string]proto.TargetID{"3": 3, "target-12": 12} {
		if got, err := parseTargetID(in); err != nil || got != want {
			t.Errorf("parseTargetID(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "0", "x", "-1", "target-"} {
		if _, err := parseTargetID(bad); err == nil {
			t.Errorf("parseTargetID(%q) accepted", bad)
		}
	}
}

func TestTargetListText(t *testing.T) {
	ts := []proto.TargetStatus{
		{TargetInfo: proto.TargetInfo{ID: 1, Addr: "a:1", Up: true, Total: 1 << 30}, State: "in"},
		{TargetInfo: proto.TargetInfo{ID: 2, Addr: "b:1"}, State: "out", Auto: true, Pending: 7},
	}
	rs := proto.RebuildStatus{Active: true, Objects: 10, Done: 3, Bytes: 10 << 20, BytesDone: 3 << 20,
		Rate: 1 << 20, Measured: 1 << 20, ETA: 7 * time.Second, Lost: 1}
	var b strings.Builder
	if err := printTargets(&b, ts, rs); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"target-2", "out*", "DOWN", "3 of 10 objects", "ETA 7s", "1 objects LOST", "rebuild_after"} {
		if !strings.Contains(out, want) {
			t.Errorf("target list lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	if err := printDFStates(&b, "/mnt", []targetJSON{{ID: 1, Up: true}, {ID: 2}}, map[uint32]string{1: "in", 2: "draining"}); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); !strings.Contains(out, "DOWN draining") || strings.Contains(out, "UP in") {
		t.Errorf("df with states:\n%s", out)
	}
}
