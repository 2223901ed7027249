package storagerpc_test

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/weft-fs/weft/jobstats"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/storage/storagerpc"
	"github.com/weft-fs/weft/transport"
	"github.com/weft-fs/weft/wire"
)

// Requests whose ctx names a job travel as OpJob (OpJobRead, OpJobWrite)
// over a real TCP connection and are counted for their job, bytes
// included; requests of no job are served and not counted; only servers
// may read the statistics.
func TestJobsCountedOverTCP(t *testing.T) {
	tb := jobstats.New(jobstats.Options{Service: "storage"})
	h := storagerpc.NewHandler(newServer(t), storagerpc.Options{AllowUnauthenticated: true, Jobs: tb})
	peer := transport.Peer{Addr: "10.0.0.1:1"} // its role is set per request (asRole)
	var asRole atomic.Value
	asRole.Store(transport.RoleStorage)
	served := func(c context.Context, op uint16, req []byte) ([]byte, error) {
		p := peer
		p.Role = asRole.Load().(transport.Role)
		return h(transport.WithPeer(c, p), op, req)
	}
	tcp := transport.NewTCP()
	ln, err := tcp.Listen("127.0.0.1:0", served)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	pool := transport.NewPool(tcp, transport.PoolOptions{})
	defer pool.Close()
	c := storagerpc.NewClient(pool, func(context.Context, proto.TargetID) (string, error) { return ln.Addr(), nil })

	obj := proto.ObjectID{Ino: 9}
	a, b := proto.WithJob(ctx, "jobA"), proto.WithJob(ctx, "dd.1000")
	if _, err := c.Write(a, 1, obj, 0, bytes.Repeat([]byte("a"), 3000)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(b, 1, obj, 3000, []byte("bb")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(ctx, 1, obj, 3002, []byte("no job")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 1000)
	if n, err := c.Read(b, 1, obj, 0, got); err != nil || n != 1000 {
		t.Fatalf("read %d, %v", n, err)
	}
	if err := c.Sync(b, 1, obj); err != nil {
		t.Fatal(err)
	}
	st, err := c.JobStats(ctx, 1, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 2 || st[0].Job != "dd.1000" || st[1].Job != "jobA" {
		t.Fatalf("jobs %+v", st)
	}
	if s := st[1]; s.WriteBytes != 3000 || s.ReadBytes != 0 || s.Op("write") != 1 || s.Requests != 1 {
		t.Fatalf("jobA %+v", s)
	}
	if s := st[0]; s.WriteBytes != 2 || s.ReadBytes != 1000 || s.Op("write") != 1 || s.Op("read") != 1 || s.Op("sync") != 1 {
		t.Fatalf("dd.1000 %+v", s)
	}
	if only, err := c.JobStats(ctx, 1, "jobA"); err != nil || len(only) != 1 {
		t.Fatalf("stats of jobA: %+v %v", only, err)
	}

	asRole.Store(transport.RoleClient)
	if _, err := c.JobStats(ctx, 1, ""); !errors.Is(err, syscall.EACCES) {
		t.Fatalf("a client asked for job statistics: %v", err)
	}
}

// A job envelope that lies about its inner op, nests, or names an invalid
// job is refused with EINVAL and serves nothing.
func TestJobEnvelopeRefused(t *testing.T) {
	tb := jobstats.New(jobstats.Options{})
	h := storagerpc.NewHandler(newServer(t), storagerpc.Options{AllowUnauthenticated: true, Jobs: tb})
	obj := storagerpc.ObjectReq{Target: 1, Obj: proto.ObjectID{Ino: 3}}
	w := storagerpc.WriteReq{ObjectReq: obj, Data: []byte("x")}
	body := append(w.EncodeHeader(), w.Data...)
	env := func(outer, inner uint16, job string) []byte {
		e := wire.NewEncoder(0)
		e.U8(1)
		e.U16(inner)
		e.String(job)
		return append(e.B, body...)
	}
	for _, tc := range []struct {
		name         string
		outer, inner uint16
		job          string
	}{
		{"write in a read envelope", storagerpc.OpJobRead, storagerpc.OpWrite, "j"},
		{"write in the generic envelope", storagerpc.OpJob, storagerpc.OpWrite, "j"},
		{"nested", storagerpc.OpJob, storagerpc.OpJob, "j"},
		{"space in job id", storagerpc.OpJobWrite, storagerpc.OpWrite, "a b"},
	} {
		if _, err := h(ctx, tc.outer, env(tc.outer, tc.inner, tc.job)); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("%s: %v, want EINVAL", tc.name, err)
		}
	}
	if _, err := h(ctx, storagerpc.OpJobWrite, append([]byte{2}, env(0, storagerpc.OpWrite, "j")[1:]...)); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("envelope version 2: %v", err)
	}
	if tb.Len() != 0 {
		t.Fatalf("%d jobs counted from refused envelopes", tb.Len())
	}
	if _, err := h(ctx, storagerpc.OpJobWrite, env(0, storagerpc.OpWrite, "ok")); err != nil || tb.Len() != 1 {
		t.Fatalf("valid envelope: %v, %d jobs", err, tb.Len())
	}
}
