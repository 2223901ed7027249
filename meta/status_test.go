package meta

import (
	"errors"
	"syscall"
	"testing"

	"github.com/weft-fs/weft/internal/version"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/transport"
)

// TestStatus: the status names every target and every client session, with
// the version the client announced, its address and its open handles; a
// client that is not root is refused.
func TestStatus(t *testing.T) {
	e := newEnv(t)
	e.addTarget("t1", 1<<30)
	e.addTarget("t2", 1<<30)
	a := remote("host-a", 1)
	_, err := e.srv.OpenSession(proto.WithClientVersion(a, "0.9 (test)"), nil)
	e.must(err)
	for range 2 {
		_, _, err = e.srv.Open(a, proto.RootIno, proto.AccessRead)
		e.must(err)
	}
	_, err = e.srv.OpenSession(remote("host-b", 2), nil)
	e.must(err)

	st, err := e.srv.Status(remote("host-a", 1))
	e.must(err)
	if st.FSID == "" || st.FSID != e.srv.FSID() || st.Version != version.String() || st.Replica != nil || st.Files != 1 {
		t.Fatalf("status %+v", st)
	}
	if len(st.Targets) != 2 || st.Targets[0].ID >= st.Targets[1].ID || !st.Targets[0].Up {
		t.Fatalf("targets %+v", st.Targets)
	}
	if len(st.Clients) != 2 {
		t.Fatalf("clients %+v", st.Clients)
	}
	c := st.Clients[0]
	if c.Name != "host-a" || c.Session != (proto.SessionID{1}) || c.Version != "0.9 (test)" || c.Addr != "10.0.0.1:1" ||
		c.Handles != 2 || c.LeaseLeft <= 0 || c.Age < 0 {
		t.Fatalf("client a %+v", c)
	}
	if st.Clients[1].Name != "host-b" || st.Clients[1].Handles != 0 {
		t.Fatalf("client b %+v", st.Clients[1])
	}

	user := transport.WithPeer(proto.WithCred(ctx, proto.Cred{Uid: 1000, Gid: 1000}), transport.Peer{Role: transport.RoleClient, Name: "host-a"})
	if _, err := e.srv.Status(user); !errors.Is(err, syscall.EPERM) {
		t.Fatalf("status as uid 1000: %v, want EPERM", err)
	}
}
