package health

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/weft-fs/weft/proto"
)

func TestJudge(t *testing.T) {
	ok := proto.ClusterStatus{FSID: "fs", Version: "v", Uptime: 2 * time.Second, Files: 3, Requests: 9,
		Targets: []proto.TargetInfo{{ID: 1, Addr: "b:1", Up: true}, {ID: 2, Addr: "a:1", Up: true}, {ID: 3, Addr: "b:1", Up: true}},
		Clients: []proto.ClientStatus{{Name: "c", Session: proto.SessionID{0xab}, Age: time.Second, Handles: 2}}}
	r := Judge("m:7400", ok)
	if !r.Healthy || len(r.Problems) != 0 || len(r.Servers) != 2 || r.Servers[0].Addr != "a:1" || len(r.Servers[1].Targets) != 2 ||
		r.Meta.Requests != 9 || r.Meta.Uptime != 2 || r.Clients[0].Session[:2] != "ab" {
		t.Fatalf("healthy cluster judged %+v", r)
	}
	for _, tc := range []struct {
		name string
		mod  func(*proto.ClusterStatus)
		want []string
	}{
		{"no targets", func(s *proto.ClusterStatus) { s.Targets = nil }, []string{"no storage target"}},
		{"one target down", func(s *proto.ClusterStatus) { s.Targets[0].Up = false }, []string{"target-1 on b:1 is down"}},
		{"server down", func(s *proto.ClusterStatus) { s.Targets[1].Up = false },
			[]string{"storage server a:1 is down (targets [2])", "target-2 on a:1 is down"}},
		{"no leader", func(s *proto.ClusterStatus) { s.Replica = &proto.ReplicaStatus{ID: 1} }, []string{"no leader"}},
	} {
		st := ok
		st.Targets = append([]proto.TargetInfo(nil), ok.Targets...)
		tc.mod(&st)
		r := Judge("m", st)
		got := strings.Join(r.Problems, "\n")
		if r.Healthy || len(r.Problems) != len(tc.want) {
			t.Errorf("%s: problems %q", tc.name, r.Problems)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: problems %q lack %q", tc.name, got, w)
			}
		}
	}
	// Empty lists are [] in JSON, never null: scripts index them.
	b, _ := json.Marshal(Judge("m", proto.ClusterStatus{}))
	if !strings.Contains(string(b), `"targets":[]`) || !strings.Contains(string(b), `"clients":[]`) || !strings.Contains(string(b), `"storage_servers":[]`) {
		t.Fatalf("empty report %s", b)
	}
}
