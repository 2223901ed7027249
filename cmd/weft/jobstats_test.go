package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/weft-fs/weft/proto"
)

func TestPrintJobStats(t *testing.T) {
	st := []proto.JobStat{
		{Job: "b", Service: "storage", Server: "h:1", WriteBytes: 3 << 20, Requests: 3, Latency: 3 * time.Millisecond,
			Ops: []proto.JobOp{{Name: "write", Count: 3, Errors: 1}}, LastSeen: time.Now()},
		{Job: "a", Service: "meta", Server: "meta", Requests: 2, Ops: []proto.JobOp{{Name: "create_open", Count: 2}}, LastSeen: time.Now()},
	}
	sortJobStats(st)
	var b bytes.Buffer
	if err := printJobStats(&b, st); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[1], "a ") || !strings.Contains(lines[1], "create_open=2") ||
		!strings.Contains(lines[2], "write=3(1 failed)") || !strings.Contains(lines[2], "1ms") {
		t.Fatalf("printed:\n%s", b.String())
	}
	b.Reset()
	if err := printJobStatsJSON(&b, st); err != nil || !strings.Contains(b.String(), `"write": 3`) || !strings.Contains(b.String(), `"errors"`) {
		t.Fatalf("json: %v\n%s", err, b.String())
	}
	b.Reset()
	if err := printJobStats(&b, nil); err != nil || !strings.Contains(b.String(), "no job statistics") {
		t.Fatalf("empty: %v %q", err, b.String())
	}
}
