package meta

import (
	"context"
	"errors"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/weft-fs/weft/internal/testutil"
	"github.com/weft-fs/weft/meta/store"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/transport"
	"github.com/weft-fs/weft/wire"
)

func peerCtx(role transport.Role, name string) context.Context {
	return transport.WithPeer(context.Background(), transport.Peer{Addr: "10.0.0.9:4711", Role: role, Name: name})
}

var goodUsage = proto.TargetInfo{Total: 1 << 40, Used: 1 << 30, Free: 1<<40 - 1<<30}

func withAddr(info proto.TargetInfo, addr string) proto.TargetInfo {
	info.Addr = addr
	return info
}

// TestRegisterTargetRoles: only a storage server (or an in-process caller,
// or an unauthenticated peer where allowed) may register; the others get
// EACCES, are logged with their address, and register nothing.
func TestRegisterTargetRoles(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ctx     context.Context
		allow   bool
		wantErr error
	}{
		{"in-process", context.Background(), false, nil},
		{"storage", peerCtx(transport.RoleStorage, "s1"), false, nil},
		{"client", peerCtx(transport.RoleClient, "c1"), false, syscall.EACCES},
		{"meta", peerCtx(transport.RoleMeta, "m1"), false, syscall.EACCES},
		{"unauthenticated", peerCtx(transport.RoleNone, ""), false, syscall.EACCES},
		{"unauthenticated allowed", peerCtx(transport.RoleNone, ""), true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log, logs := testutil.NewLogger()
			e := newEnv(t, func(o *Options) { o.AllowUnauthenticated = tc.allow; o.Logger = log })
			_, err := e.srv.RegisterTarget(tc.ctx, "u1", withAddr(goodUsage, "h:1"))
			if tc.wantErr == nil {
				e.must(err)
				return
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("got %v, want %v", err, tc.wantErr)
			}
			if ts, _ := e.srv.Targets(ctx); len(ts) != 0 {
				t.Fatalf("refused registration left targets %+v", ts)
			}
			if !strings.Contains(logs.String(), "10.0.0.9:4711") {
				t.Fatalf("refusal not logged with the peer address: %q", logs.String())
			}
		})
	}
}

// TestRegisterTargetOwner: a uuid stays with the certificate name that
// registered it, also across a restart; another name cannot move it.
func TestRegisterTargetOwner(t *testing.T) {
	probe := newFakeProbe()
	e := newEnv(t, func(o *Options) { o.Probe = probe.probe })
	s1, s2 := peerCtx(transport.RoleStorage, "storage-1"), peerCtx(transport.RoleStorage, "storage-2")
	id, err := e.srv.RegisterTarget(s1, "u1", withAddr(goodUsage, "h1:1"))
	e.must(err)
	for range 2 {
		if _, err := e.srv.RegisterTarget(s2, "u1", withAddr(goodUsage, "evil:1")); !errors.Is(err, syscall.EPERM) {
			t.Fatalf("another identity re-registered the uuid: %v", err)
		}
		// nor with the same address (a heartbeat of someone else's target)
		if _, err := e.srv.RegisterTarget(s2, "u1", withAddr(goodUsage, "h1:1")); !errors.Is(err, syscall.EPERM) {
			t.Fatalf("another identity heartbeat the uuid: %v", err)
		}
		if ts, _ := e.srv.Targets(ctx); len(ts) != 1 || ts[0].Addr != "h1:1" {
			t.Fatalf("targets %+v", ts)
		}
		if probe.count("evil:1") != 0 {
			t.Fatal("the refused address was probed")
		}
		// The owner may heartbeat and move (after a probe).
		if got, err := e.srv.RegisterTarget(s1, "u1", withAddr(goodUsage, "h1:1")); err != nil || got != id {
			t.Fatalf("owner's heartbeat: %d %v", got, err)
		}
		e.restart() // the owner is persisted
	}
	if _, err := e.srv.RegisterTarget(s1, "u1", withAddr(goodUsage, "h1:2")); err != nil {
		t.Fatal(err)
	}
	if ts, _ := e.srv.Targets(ctx); ts[0].Addr != "h1:2" || probe.count("h1:2") != 1 {
		t.Fatalf("owner's move: %+v, probes %d", ts, probe.count("h1:2"))
	}
	// An in-process caller is trusted and keeps the owner.
	if _, err := e.srv.RegisterTarget(ctx, "u1", withAddr(goodUsage, "h1:3")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.srv.RegisterTarget(s2, "u1", withAddr(goodUsage, "h1:3")); !errors.Is(err, syscall.EPERM) {
		t.Fatalf("owner lost after an in-process registration: %v", err)
	}
}

// TestTargetRecordV1: a record written before owners (version 1) still
// loads; the first named registrant then owns the uuid.
func TestTargetRecordV1(t *testing.T) {
	st := store.NewMem()
	e := newEnv(t, func(o *Options) { o.Store = st })
	e.addTarget("u1", 1<<30)
	e.srv.Close()
	// Rewrite the record in the version 1 format.
	v1 := wire.NewEncoder(0)
	v1.U8(1)
	v1.String("u1")
	v1.String("host:u1")
	b := st.NewBatch()
	b.Set(store.TargetIDKey(1), v1.B)
	e.must(b.Commit(true))
	b.Close()
	e.start()
	if ts, _ := e.srv.Targets(ctx); len(ts) != 1 || ts[0].Addr != "host:u1" {
		t.Fatalf("targets from a v1 record: %+v", ts)
	}
	if _, err := e.srv.RegisterTarget(peerCtx(transport.RoleStorage, "s1"), "u1", withAddr(goodUsage, "host:u1")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.srv.RegisterTarget(peerCtx(transport.RoleStorage, "s2"), "u1", withAddr(goodUsage, "host:u1")); !errors.Is(err, syscall.EPERM) {
		t.Fatalf("second name took a v1 target adopted by the first: %v", err)
	}
	rec, err := st.Get(store.TargetIDKey(1))
	e.must(err)
	if r, err := decodeTargetRecord(rec); err != nil || r.owner != "s1" || r.uuid != "u1" {
		t.Fatalf("record after adoption: %+v %v", r, err)
	}
}

type fakeProbe struct {
	mu     sync.Mutex
	probes map[string]int
	dead   map[string]bool
}

func newFakeProbe() *fakeProbe { return &fakeProbe{probes: map[string]int{}, dead: map[string]bool{}} }

func (p *fakeProbe) probe(ctx context.Context, addr string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.probes[addr]++
	if p.dead[addr] {
		return syscall.ECONNREFUSED
	}
	return nil
}

func (p *fakeProbe) count(addr string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.probes[addr]
}

// TestRegisterTargetProbe: a new target and a new address are accepted only
// once the address answered a probe; heartbeats are not probed.
func TestRegisterTargetProbe(t *testing.T) {
	probe := newFakeProbe()
	probe.dead["dead:1"] = true
	e := newEnv(t, func(o *Options) { o.Probe = probe.probe })
	s := peerCtx(transport.RoleStorage, "s1")
	_, err := e.srv.RegisterTarget(s, "u1", withAddr(goodUsage, "dead:1"))
	if !errors.Is(err, syscall.EHOSTUNREACH) || !strings.Contains(err.Error(), "did not answer") {
		t.Fatalf("unanswered address: %v", err)
	}
	if ts, _ := e.srv.Targets(ctx); len(ts) != 0 {
		t.Fatalf("registered anyway: %+v", ts)
	}
	_, err = e.srv.RegisterTarget(s, "u1", withAddr(goodUsage, "live:1"))
	e.must(err)
	for range 5 {
		_, err = e.srv.RegisterTarget(s, "u1", withAddr(goodUsage, "live:1"))
		e.must(err)
	}
	if n := probe.count("live:1"); n != 1 {
		t.Fatalf("live:1 probed %d times, want once (heartbeats are not probed)", n)
	}
	if _, err := e.srv.RegisterTarget(s, "u1", withAddr(goodUsage, "dead:1")); !errors.Is(err, syscall.EHOSTUNREACH) {
		t.Fatalf("move to an unanswered address: %v", err)
	}
	if ts, _ := e.srv.Targets(ctx); len(ts) != 1 || ts[0].Addr != "live:1" {
		t.Fatalf("targets after a refused move: %+v", ts)
	}
}

// TestRegisterTargetUsage: figures no real target reports are refused and
// never ranked; plausible ones (with accounting slack) pass.
func TestRegisterTargetUsage(t *testing.T) {
	for _, tc := range []struct {
		name string
		info proto.TargetInfo
		ok   bool
	}{
		{"plausible", goodUsage, true},
		{"empty disk", proto.TargetInfo{Total: 1 << 40, Free: 1 << 40}, true},
		{"full, used a bit over", proto.TargetInfo{Total: 1 << 40, Used: 1<<40 + 1<<20}, true},
		{"full, capacity lowered", proto.TargetInfo{Total: 1 << 30, Used: 1 << 40}, true},
		{"used over the cap", proto.TargetInfo{Total: 1 << 40, Used: 1 << 60}, false},
		{"at the cap", proto.TargetInfo{Total: MaxTargetBytes, Free: MaxTargetBytes}, true},
		{"black hole 1 EiB", proto.TargetInfo{Total: 1 << 60, Free: 1 << 60}, false},
		{"free over total", proto.TargetInfo{Total: 1 << 30, Free: 1 << 40}, false},
		{"free without total", proto.TargetInfo{Free: 1 << 30}, false},
		{"used+free over total", proto.TargetInfo{Total: 1 << 40, Used: 1 << 40, Free: 1 << 40}, false},
		{"overflowing sum", proto.TargetInfo{Total: 1 << 40, Used: ^uint64(0), Free: 1 << 40}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			_, err := e.srv.RegisterTarget(peerCtx(transport.RoleStorage, "s"), "u", withAddr(tc.info, "h:1"))
			if tc.ok {
				e.must(err)
				return
			}
			if !errors.Is(err, syscall.EINVAL) {
				t.Fatalf("got %v, want EINVAL", err)
			}
			// Nor as a heartbeat of a registered target.
			_, err = e.srv.RegisterTarget(ctx, "u", withAddr(goodUsage, "h:1"))
			e.must(err)
			if _, err := e.srv.RegisterTarget(ctx, "u", withAddr(tc.info, "h:1")); !errors.Is(err, syscall.EINVAL) {
				t.Fatalf("heartbeat: got %v, want EINVAL", err)
			}
			if ts, _ := e.srv.Targets(ctx); ts[0].Total != goodUsage.Total || ts[0].Free != goodUsage.Free {
				t.Fatalf("implausible heartbeat recorded: %+v", ts[0])
			}
		})
	}
}

// TestProbeAddr: the probe Run uses answers for a live transport server
// and fails for an address nobody serves.
func TestProbeAddr(t *testing.T) {
	tr := transport.NewTCP()
	ln, err := tr.Listen("127.0.0.1:0", func(context.Context, uint16, []byte) ([]byte, error) {
		t.Error("the handler saw the probe")
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr()
	probe := ProbeAddr(tr)
	if err := probe(ctx, addr); err != nil {
		t.Fatalf("live address: %v", err)
	}
	ln.Close()
	if err := probe(ctx, addr); err == nil {
		t.Fatal("closed address answered")
	}
}
