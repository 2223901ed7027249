package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"go.uber.org/goleak"

	"github.com/weft-fs/weft/meta/metarpc"
	"github.com/weft-fs/weft/storage/storagerpc"
	"github.com/weft-fs/weft/transport"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// execute runs cmd with args, output discarded, and returns its error.
func execute(cmd *cobra.Command, args ...string) error {
	cmd.SetArgs(args)
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	cmd.SilenceUsage = true
	cmd.SilenceErrors = true
	return cmd.ExecuteContext(context.Background())
}

// writeFile writes content to dir/name and returns the path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// wantErr fails unless err is non-nil and contains every fragment.
func wantErr(t *testing.T, err error, fragments ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one containing %q", fragments)
	}
	for _, f := range fragments {
		if !strings.Contains(err.Error(), f) {
			t.Fatalf("error %q does not contain %q", err, f)
		}
	}
}

func TestRootHasEverySubcommand(t *testing.T) {
	root := newRootCmd()
	for _, name := range []string{"up", "meta", "storage", "mount", "setstripe", "getstripe", "df", "bench"} {
		if c, _, err := root.Find([]string{name}); err != nil || c.Name() != name {
			t.Errorf("subcommand %s missing: %v", name, err)
		}
	}
}

func mkdir(p string) error { return os.MkdirAll(p, 0o755) }

func TestOpNameCoversEveryService(t *testing.T) {
	for op, want := range map[uint16]string{
		transport.OpProbe:    "probe",
		metarpc.OpCreateOpen: "create_open",
		metarpc.OpLookup:     "lookup",
		storagerpc.OpRead:    "read",
		storagerpc.OpWrite:   "write",
		999:                  "op_999",
		// These shared codes with metadata ops before protocol version 2,
		// and were named after them.
		storagerpc.OpAllocated: "allocated",
		storagerpc.OpSpace:     "space",
		storagerpc.OpSeek:      "seek",
		storagerpc.OpRebuild:   "rebuild",
		metarpc.OpScrubStatus:  "scrub_status",
		metarpc.OpLeasePoll:    "lease_poll",
		metarpc.OpMigrateBegin: "migrate_begin",
	} {
		if got := opName(op); got != want {
			t.Errorf("opName(%d) = %q, want %q", op, got, want)
		}
	}
}

// TestOpCodesDoNotCollide: an op code names one operation of one service
// (metadata 1..99, storage 100..199), so the metrics, which name ops by
// code alone, name each right.
func TestOpCodesDoNotCollide(t *testing.T) {
	for op := 0; op <= 0xffff; op++ {
		m, s := metarpc.OpName(uint16(op)), storagerpc.OpName(uint16(op))
		switch {
		case m != "" && s != "":
			t.Errorf("op %d is metadata's %q and storage's %q", op, m, s)
		case m != "" && op >= 100:
			t.Errorf("metadata op %q has code %d, outside 1..99", m, op)
		case s != "" && (op < 100 || op > 199):
			t.Errorf("storage op %q has code %d, outside 100..199", s, op)
		}
	}
}
