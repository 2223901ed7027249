package main

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestUsePercent(t *testing.T) {
	for _, tc := range []struct {
		used, free uint64
		want       string
	}{
		{0, 0, "-"},
		{0, 100, "0%"},
		{1, 99, "1%"},
		{1, 1000, "1%"}, // rounded up: any use shows
		{50, 50, "50%"},
		{999, 1, "100%"},
		{100, 0, "100%"},
		{1 << 60, 1 << 60, "50%"},
	} {
		if got := usePercent(tc.used, tc.free); got != tc.want {
			t.Errorf("usePercent(%d, %d) = %s, want %s", tc.used, tc.free, got, tc.want)
		}
	}
}

var dfTargets = []targetJSON{
	{ID: 0, Addr: "127.0.0.1:7410", Total: 100 << 30, Used: 25 << 30, Free: 75 << 30, Up: true},
	{ID: 1, Addr: "127.0.0.1:7411", Total: 100 << 30, Used: 50 << 30, Free: 50 << 30, Up: true},
	{ID: 2, Addr: "10.0.0.3:7410", Total: 1 << 40, Used: 1 << 30, Free: 1<<40 - 1<<30, Up: false},
}

func TestPrintDF(t *testing.T) {
	var b bytes.Buffer
	if err := printDF(&b, "/mnt/weft", dfTargets); err != nil {
		t.Fatal(err)
	}
	want := "" +
		"TARGET    ADDRESS           SIZE   USED    AVAIL  USE%  STATUS\n" +
		"target-0  127.0.0.1:7410  100GiB  25GiB    75GiB   25%  UP\n" +
		"target-1  127.0.0.1:7411  100GiB  50GiB    50GiB   50%  UP\n" +
		"target-2  10.0.0.3:7410     1TiB   1GiB  1023GiB    1%  DOWN\n" +
		"filesystem_summary:       200GiB  75GiB   125GiB   38%  2/3 targets up\n" +
		"(file system of /mnt/weft)\n"
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
}

func TestPrintDFNarrow(t *testing.T) {
	// With short addresses the summary label widens the address column.
	var b bytes.Buffer
	if err := printDF(&b, "/m", []targetJSON{{ID: 7, Addr: "h:1", Total: 1 << 20, Free: 1 << 20, Up: true}}); err != nil {
		t.Fatal(err)
	}
	want := "" +
		"TARGET    ADDRESS    SIZE  USED  AVAIL  USE%  STATUS\n" +
		"target-7  h:1        1MiB    0B   1MiB    0%  UP\n" +
		"filesystem_summary:  1MiB    0B   1MiB    0%  1/1 targets up\n" +
		"(file system of /m)\n"
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
}

func TestPrintDFJSON(t *testing.T) {
	var b bytes.Buffer
	if err := printDFJSON(&b, "/mnt/weft", dfTargets); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Path    string       `json:"path"`
		Targets []targetJSON `json:"targets"`
		Summary dfSummary    `json:"summary"`
	}
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	want := dfSummary{Total: 200 << 30, Used: 75 << 30, Free: 125 << 30, Targets: 3, Up: 2}
	if got.Path != "/mnt/weft" || len(got.Targets) != 3 || got.Targets[2] != dfTargets[2] || got.Summary != want {
		t.Fatalf("got %+v", got)
	}
	b.Reset()
	if err := printDFJSON(&b, "/m", nil); err != nil {
		t.Fatal(err)
	}
	if want := `{"path":"/m","targets":[],"summary":{"total":0,"used":0,"free":0,"targets":0,"up":0,"objects":0,"files_free":0}}` + "\n"; b.String() != want {
		t.Fatalf("empty: %s", b.String())
	}
}

// TestSummarizeSharedDevice: four targets on one disk (one device) count
// the disk once; a target with a capacity of its own (no device) and
// another disk count on their own; a down target not at all.
func TestSummarizeSharedDevice(t *testing.T) {
	disk := targetJSON{Total: 252 << 30, Free: 200 << 30, Up: true, Device: "m1:abc", FilesFree: 1000}
	var ts []targetJSON
	for i := range 4 {
		d := disk
		d.ID, d.Used, d.Objects = uint32(i), 10<<30, 5
		ts = append(ts, d)
	}
	ts = append(ts,
		targetJSON{ID: 4, Total: 1 << 30, Used: 1 << 20, Free: 1<<30 - 1<<20, Up: true, Objects: 1},
		targetJSON{ID: 5, Total: 100 << 30, Used: 0, Free: 100 << 30, Up: true, Device: "m2:abc", FilesFree: 7},
		targetJSON{ID: 6, Total: 100 << 30, Free: 100 << 30, Up: false, Device: "m3:abc", FilesFree: 9})
	got := summarize(ts)
	want := dfSummary{Total: 252<<30 + 1<<30 + 100<<30, Used: 40<<30 + 1<<20, Free: 200<<30 + 1<<30 - 1<<20 + 100<<30,
		Targets: 7, Up: 6, Objects: 21, FilesFree: 1007}
	if got != want {
		t.Fatalf("summarize = %+v, want %+v", got, want)
	}
	var b bytes.Buffer
	if err := printDFInodes(&b, "/m", 42, 100, ts[:1]); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"metadata", "42", "100", "target-0", "5", "1000", "filesystem_summary:"} {
		if !bytes.Contains(b.Bytes(), []byte(s)) {
			t.Fatalf("df -i output lacks %q:\n%s", s, b.String())
		}
	}
}
