package main

import (
	"bytes"
	"os/user"
	"strings"
	"testing"

	"github.com/weft-fs/weft/meta/metarpc"
)

func TestQuotaAccount(t *testing.T) {
	root, err := user.LookupId("0")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		a    account
		kind metarpc.QuotaKind
		id   uint32
	}{
		{account{User: "1000"}, metarpc.QuotaUser, 1000},
		{account{User: root.Username}, metarpc.QuotaUser, 0},
		{account{Group: "50"}, metarpc.QuotaGroup, 50},
		{account{Project: "42"}, metarpc.QuotaProject, 42},
	} {
		kind, id, err := tc.a.resolve(false)
		if err != nil || kind != tc.kind || id != tc.id {
			t.Errorf("%+v: %v %d %v, want %v %d", tc.a, kind, id, err, tc.kind, tc.id)
		}
	}
	for _, bad := range []account{{}, {User: "1", Group: "2"}, {Project: "p"}, {User: "no-such-user-weft"}} {
		if _, _, err := bad.resolve(false); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	if kind, _, err := (&account{}).resolve(true); err != nil || kind != 0 {
		t.Errorf("no account, optional: %v %v", kind, err)
	}
}

func TestQuotaPrint(t *testing.T) {
	var b bytes.Buffer
	err := printQuotas(&b, []quotaJSON{
		{Kind: "user", ID: 1000, Bytes: 3 << 20, ByteLimit: 2 << 20, OverBytes: true, Inodes: 7, MountedPath: "/mnt"},
	})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("printed %q", b.String())
	}
	f := strings.Fields(lines[1])
	// kind id bytes* limit inodes limit(-) path: an over-limit figure is starred,
	// no limit is "-".
	if f[0] != "user" || f[1] != "1000" || !strings.HasSuffix(f[2], "*") || f[4] != "7" || f[5] != "-" || f[6] != "/mnt" {
		t.Fatalf("printed %q", lines[1])
	}
}

func TestQuotaSetNeedsALimit(t *testing.T) {
	cmd := newQuotaSetCmd()
	cmd.SetArgs([]string{"--user", "1000", "/nonexistent"})
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "--inodes") {
		t.Fatalf("quota set without a limit: %v", err)
	}
}
