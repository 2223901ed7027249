package meta

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weft-fs/weft/meta/metarpc"
	"github.com/weft-fs/weft/meta/store"
	"github.com/weft-fs/weft/transport"
)

func TestParsePeers(t *testing.T) {
	p, err := ParsePeers(" 2=b:1, 1=a:1,3=c:1 ")
	if err != nil || p.String() != "1=a:1,2=b:1,3=c:1" {
		t.Fatalf("ParsePeers: %v %v", p, err)
	}
	for in, want := range map[string]string{
		"":                "no members",
		"1=a:1,1=b:1":     "member id 1 appears twice",
		"1=a:1,2=a:1":     "same address",
		"x=a:1":           "1 to 65535",
		"0=a:1":           "1 to 65535",
		"70000=a:1":       "1 to 65535",
		"1=a:1,2":         "want ID=HOST:PORT",
		"1=a:1,2=":        "want ID=HOST:PORT",
		"1=a:1,,2=b:1,2=": "want ID=HOST:PORT",
	} {
		if _, err := ParsePeers(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParsePeers(%q): %v, want an error saying %q", in, err, want)
		}
	}
}

// TestMemberDir: a data directory is served only as the member and group
// it was made for, and a first start needs an empty one; a refusal changes
// nothing in the directory.
func TestMemberDir(t *testing.T) {
	peers := Peers{1: "a:1", 2: "b:1", 3: "c:1"}
	dir := t.TempDir()
	if fresh, err := checkMemberDir(dir, 1, peers); err != nil || !fresh {
		t.Fatalf("empty dir: fresh %v, %v", fresh, err)
	}
	if err := writeMemberFile(dir, 1, peers); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(filepath.Join(dir, MemberFile))
	if fresh, err := checkMemberDir(dir, 1, Peers{3: "c:1", 2: "b:1", 1: "a:1"}); err != nil || fresh {
		t.Fatalf("same member: fresh %v, %v", fresh, err)
	}
	for _, tc := range []struct {
		name  string
		id    uint64
		peers Peers
		want  string
	}{
		{"another member's directory", 2, peers, "belongs to member 1, not 2"},
		{"another peer list", 1, Peers{1: "a:1", 2: "b:1", 3: "d:1"}, "was made for the group 1=a:1,2=b:1,3=c:1"},
		{"a member more", 1, Peers{1: "a:1", 2: "b:1", 3: "c:1", 4: "d:1"}, "was made for the group"},
	} {
		_, err := checkMemberDir(dir, tc.id, tc.peers)
		if !errors.Is(err, ErrWrongMember) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrWrongMember saying %q", tc.name, err, tc.want)
		}
	}
	if after, _ := os.ReadFile(filepath.Join(dir, MemberFile)); string(after) != string(before) {
		t.Fatal("a refused start changed the member file")
	}

	single := t.TempDir()
	os.WriteFile(filepath.Join(single, "CURRENT"), []byte("x"), 0o644)
	if _, err := checkMemberDir(single, 1, peers); !errors.Is(err, ErrWrongMember) || !strings.Contains(err.Error(), "not a member's directory") {
		t.Fatalf("a single server's directory: %v", err)
	}

	// A single server refuses a member's directory (its store has no
	// WAL: its latest changes may be in the raft log only), at Run,
	// before it opens anything; and New refuses a store without a WAL
	// for a single server.
	err := Run(context.Background(), Config{DataDir: dir, ListenAddr: "127.0.0.1:0", AllowUnauthenticated: true})
	if !errors.Is(err, ErrWrongMember) || !strings.Contains(err.Error(), "member 1 of a replicated group") {
		t.Fatalf("a single server on a member's directory: %v", err)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, MemberFile)); string(after) != string(before) {
		t.Fatal("a refused single server changed the member file")
	}
	if names, _ := os.ReadDir(dir); len(names) != 1 {
		t.Fatalf("a refused single server left %d entries in the directory", len(names))
	}
	nowal, err := store.OpenPebble(t.TempDir(), store.PebbleOptions{NoWAL: true})
	if err != nil {
		t.Fatal(err)
	}
	defer nowal.Close()
	if _, err := New(Options{Store: nowal}); err == nil || !strings.Contains(err.Error(), "needs its write-ahead log") {
		t.Fatalf("a single server on a store without a WAL: %v", err)
	}

	bad := t.TempDir()
	os.WriteFile(filepath.Join(bad, MemberFile), []byte(`{"version": 9, "id": 1}`), 0o644)
	if _, err := checkMemberDir(bad, 1, peers); err == nil || !strings.Contains(err.Error(), "format version 9") {
		t.Fatalf("unknown member file version: %v", err)
	}
}

// TestRunPeerListDisagrees starts a real member (Run, TCP) and then a
// second one with another peer list: the second refuses to start, names
// the difference, and leaves its empty data directory empty.
func TestRunPeerListDisagrees(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	a1, a2, a3 := freePort(t), freePort(t), freePort(t)
	peers := Peers{1: a1, 2: a2, 3: a3}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ready := make(chan struct{})
	go func() {
		done <- Run(ctx, Config{DataDir: t.TempDir(), ID: 1, Peers: peers, AllowUnauthenticated: true, Logger: quiet,
			Transport: transport.NewTCPWith(transport.TCPOptions{Logger: quiet}), Ready: func(string) { close(ready) }})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("member 1: %v", err)
		}
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("member 1 did not start: %v", err)
	}

	other := Peers{1: a1, 2: a2, 3: freePort(t)}
	dir := t.TempDir()
	err := Run(context.Background(), Config{DataDir: dir, ID: 2, Peers: other, AllowUnauthenticated: true, Logger: quiet,
		Transport: transport.NewTCPWith(transport.TCPOptions{Logger: quiet})})
	if !errors.Is(err, ErrWrongMember) || !strings.Contains(err.Error(), "every member must be given the same list") {
		t.Fatalf("member 2 with another peer list: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("the refused member left %d files in its empty data directory", len(ents))
	}

	// The same id twice: member 1's address answers as member 1, so a
	// second "member 1" elsewhere is not possible (its address is
	// taken); a member that names member 1's address for id 3 is refused.
	swapped := Peers{1: a3, 2: a2, 3: a1}
	err = Run(context.Background(), Config{DataDir: t.TempDir(), ID: 2, Peers: swapped, AllowUnauthenticated: true, Logger: quiet,
		Transport: transport.NewTCPWith(transport.TCPOptions{Logger: quiet})})
	if !errors.Is(err, ErrWrongMember) || !strings.Contains(err.Error(), fmt.Sprintf("%s answers as member 1, but --peers names it member 3", a1)) {
		t.Fatalf("member 2 with ids swapped: %v", err)
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestCheckPeersFSID: a member whose store belongs to another file system
// than a peer's is refused (ErrForeignStore); a peer not running, or a
// store not formatted yet on either side, is no reason to refuse.
func TestCheckPeersFSID(t *testing.T) {
	peers := Peers{1: "a:1", 2: "b:1", 3: "c:1"}
	members := []metarpc.GroupMember{{ID: 1, Addr: "a:1"}, {ID: 2, Addr: "b:1"}, {ID: 3, Addr: "c:1"}}
	ask := func(fsid string) func(context.Context, string) (metarpc.Membership, error) {
		return func(_ context.Context, addr string) (metarpc.Membership, error) {
			if addr == "c:1" {
				return metarpc.Membership{}, errors.New("connection refused") // not running
			}
			return metarpc.Membership{ID: 2, FSID: fsid, Members: members}, nil
		}
	}
	if err := checkPeers(context.Background(), ask("fs-x"), 1, peers, "fs-y"); !errors.Is(err, ErrForeignStore) {
		t.Fatalf("a store of another file system than its peer's: %v, want ErrForeignStore", err)
	}
	for _, tc := range [][2]string{{"fs-x", "fs-x"}, {"", "fs-y"}, {"fs-x", ""}} {
		if err := checkPeers(context.Background(), ask(tc[0]), 1, peers, tc[1]); err != nil {
			t.Errorf("peer fsid %q, own %q: %v", tc[0], tc[1], err)
		}
	}
}
