package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/weft-fs/weft/proto"
)

func sampleScrub() proto.ScrubStatus {
	at := time.Date(2026, 11, 24, 3, 0, 0, 0, time.UTC).UnixNano()
	return proto.ScrubStatus{
		Targets: []proto.ScrubTargetStatus{
			{ScrubTarget: proto.ScrubTarget{Target: 1, Start: at, End: at + int64(time.Minute), Bytes: 3 << 20, Objects: 7, Passes: 1},
				Reported: 2, Repaired: 1, Heard: at},
			{ScrubTarget: proto.ScrubTarget{Target: 2, Running: true, Start: at, Bytes: 1 << 20}, Reported: 1, Lost: 1, Heard: at},
			{ScrubTarget: proto.ScrubTarget{Target: 3}},
		},
		Lost: []proto.LostObject{{Target: 2, Obj: proto.ObjectID{Ino: 42, Gen: 0xab, Stripe: 1}}},
	}
}

func TestScrubText(t *testing.T) {
	var b strings.Builder
	if err := printScrub(&b, sampleScrub(), time.Now()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"target-1", "2026-11-24 03:01:00", "3MiB", "running", "unknown",
		"LOST: target-2 inode 42 slot 1 (generation 0xab)", "EIO"} {
		if !strings.Contains(out, want) {
			t.Errorf("scrub status lacks %q:\n%s", want, out)
		}
	}
	line := scrubLine(sampleScrub())
	for _, want := range []string{"1 of 3 targets scrubbing", "2026-11-24 03:01:00", "3 reported, 1 repaired, 1 lost"} {
		if !strings.Contains(line, want) {
			t.Errorf("status line %q lacks %q", line, want)
		}
	}
}

func TestScrubJSON(t *testing.T) {
	var b strings.Builder
	if err := printJSON(&b, toScrubJSON(sampleScrub())); err != nil {
		t.Fatal(err)
	}
	var got scrubJSON
	if err := json.Unmarshal([]byte(b.String()), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Targets) != 3 || got.Targets[0].Repaired != 1 || got.Targets[0].Bytes != 3<<20 || !got.Targets[1].Running ||
		len(got.Lost) != 1 || got.Lost[0] != (lostJSON{Target: 2, Ino: 42, Gen: 0xab, Slot: 1}) {
		t.Fatalf("scrub --json: %s", b.String())
	}
	// Empty lists are lists, not null.
	b.Reset()
	if err := printJSON(&b, toScrubJSON(proto.ScrubStatus{})); err != nil || strings.TrimSpace(b.String()) != `{"targets":[],"lost":[]}` {
		t.Fatalf("empty: %s, %v", b.String(), err)
	}
}
