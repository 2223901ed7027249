package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weft-fs/weft/auth"
	"github.com/weft-fs/weft/meta"
	"github.com/weft-fs/weft/meta/metarpc"
	"github.com/weft-fs/weft/meta/raftlog"
	"github.com/weft-fs/weft/meta/store"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/transport"
)

// TestAdminMeta runs `weft admin meta` against a replicated metadata
// service served over TCP with real keys: list shows the one member;
// add brings in a second (a fresh server joining), which catches up and
// becomes a voter; remove takes it out again; a client's keys are refused.
func TestAdminMeta(t *testing.T) {
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca")
	if err := auth.NewCA(ca); err != nil {
		t.Fatal(err)
	}
	for _, k := range []struct {
		role transport.Role
		name string
	}{{transport.RoleMeta, "m1"}, {transport.RoleClient, "c1"}} {
		if err := auth.Issue(ca, k.role, k.name, filepath.Join(dir, k.name)); err != nil {
			t.Fatal(err)
		}
	}
	keys, err := auth.Load(filepath.Join(dir, "m1"))
	if err != nil {
		t.Fatal(err)
	}

	nw := raftlog.NewMemNetwork()
	start := func(id uint64, join bool) *meta.Server {
		lg, err := raftlog.OpenStorage("raft", raftlog.StorageOptions{FS: vfs.NewMem()})
		if err != nil {
			t.Fatal(err)
		}
		srv, err := meta.New(meta.Options{Store: store.NewMem(), Replica: &meta.Replica{
			ID: id, Peers: []uint64{1}, Join: join, Log: lg, Transport: nw.Transport(id),
			Started:      func(n *raftlog.Node) { nw.Attach(id, n) },
			TickInterval: 5 * time.Millisecond, ElectionTick: 50,
		}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nw.Detach(id); srv.Close(); lg.Close() })
		return srv
	}
	s1 := start(1, false)
	for {
		if _, err := s1.Mkdir(context.Background(), proto.RootIno, "d", 0755, 0, 0); err == nil {
			break
		}
		time.Sleep(5 * time.Millisecond) // until it leads and formatted the store
	}
	tr := transport.NewTCPWith(transport.TCPOptions{Security: keys.Security(false)})
	ln, err := tr.Listen("127.0.0.1:0", metarpc.NewHandler(s1, s1, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	admin := func(keyDir string, args ...string) (string, error) {
		var out bytes.Buffer
		cmd := newRootCmd()
		cmd.SetArgs(append([]string{"admin", "meta"}, append(args, "--meta", ln.Addr(), "--keys", filepath.Join(dir, keyDir), "--timeout", "1m")...))
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		err := cmd.ExecuteContext(context.Background())
		return out.String(), err
	}
	out, err := admin("m1", "list")
	if err != nil || !strings.Contains(out, "1  ") || !strings.Contains(out, "voter,leader") {
		t.Fatalf("list: %v\n%s", err, out)
	}
	_, err = admin("c1", "list")
	wantErr(t, err, "role meta")

	start(2, true)
	if out, err = admin("m1", "add", "2", "127.0.0.1:7402"); err != nil {
		t.Fatalf("add: %v\n%s", err, out)
	}
	out, err = admin("m1", "list")
	if err != nil || !strings.Contains(out, "127.0.0.1:7402") || strings.Count(out, "voter") != 2 {
		t.Fatalf("list after add: %v\n%s", err, out)
	}
	t.Logf("weft admin meta list:\n%s", out)
	out, err = admin("m1", "list", "--json")
	var ms []metarpc.Member
	if err != nil || json.Unmarshal([]byte(out), &ms) != nil || len(ms) != 2 || ms[1].ID != 2 || ms[1].Learner || ms[1].Addr != "127.0.0.1:7402" {
		t.Fatalf("list --json: %v %+v\n%s", err, ms, out)
	}
	if out, err = admin("m1", "remove", "2"); err != nil {
		t.Fatalf("remove: %v\n%s", err, out)
	}
	out, err = admin("m1", "list")
	if err != nil || strings.Contains(out, "7402") {
		t.Fatalf("list after remove: %v\n%s", err, out)
	}
	_, err = admin("m1", "remove", "1")
	wantErr(t, err, "last voter")
	_, err = admin("m1", "add", "0", "h:1")
	wantErr(t, err, "ids are 1 to 65535")
}
