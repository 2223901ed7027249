package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFindWeftMount(t *testing.T) {
	for _, tc := range []struct {
		name, mounts, want string
		err                bool
	}{
		{"fstype", "proc /proc proc rw 0 0\nweft /mnt/weft fuse.weft rw,nosuid 0 0\n", "/mnt/weft", false},
		{"source", "sysfs /sys sysfs rw 0 0\nweft /home/a/weft/mnt fuse rw 0 0\n", "/home/a/weft/mnt", false},
		{"first of two", "weft /a fuse.weft rw 0 0\nweft /b fuse.weft rw 0 0\n", "/a", false},
		{"escaped space", `weft /mnt/my\040weft fuse.weft rw 0 0`, "/mnt/my weft", false},
		{"other fuse", "sshfs /mnt/x fuse.sshfs rw 0 0\n", "", true},
		{"weft-named non-fuse", "weft /mnt/x ext4 rw 0 0\n", "", true},
		{"empty", "", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := findWeftMount(strings.NewReader(tc.mounts))
			if (err != nil) != tc.err || got != tc.want {
				t.Fatalf("findWeftMount = %q, %v; want %q, err=%v", got, err, tc.want, tc.err)
			}
		})
	}
}

func TestUnescapeMountField(t *testing.T) {
	for in, want := range map[string]string{
		`/plain`:           "/plain",
		`/a\040b`:          "/a b",
		`/tab\011x`:        "/tab\tx",
		`/back\134slash`:   `/back\slash`,
		`/trailing\04`:     `/trailing\04`,
		`/notoctal\9999`:   `/notoctal\9999`,
		`\040\040`:         "  ",
		`/end\`:            `/end\`,
		`/mixed\040and\04`: `/mixed and\04`,
	} {
		if got := unescapeMountField(in); got != want {
			t.Errorf("unescapeMountField(%q) = %q, want %q", in, got, want)
		}
	}
}

// A directory that is not on weft has no weft attributes: the tools say so
// instead of printing an empty layout.
func TestNotOnWeft(t *testing.T) {
	dir := t.TempDir()
	if _, err := getLayout(dir); !errors.Is(err, errNotWeft) {
		t.Fatalf("getLayout on %s: %v, want errNotWeft", dir, err)
	}
	if _, err := getDF(dir); !errors.Is(err, errNotWeft) {
		t.Fatalf("getDF on %s: %v, want errNotWeft", dir, err)
	}
	err := execute(newGetstripeCmd(), dir)
	wantErr(t, err, dir, "not on a weft file system")
	err = execute(newDfCmd(), "--json", dir)
	wantErr(t, err, "not on a weft file system")

	// setstripe on a new name must not leave a file behind.
	p := filepath.Join(dir, "new")
	wantErr(t, execute(newSetstripeCmd(), "-c", "2", p), "not on a weft file system")
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("setstripe left %s behind: %v", p, err)
	}
	// On a directory it must not set anything either.
	wantErr(t, execute(newSetstripeCmd(), "-c", "2", dir), "not on a weft file system")
}

func TestGetstripeArgs(t *testing.T) {
	wantErr(t, execute(newGetstripeCmd()), "requires at least 1 arg")
	wantErr(t, execute(newGetstripeCmd(), t.TempDir()+"/missing"), "missing")
}
