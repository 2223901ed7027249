package meta

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/weft-fs/weft/layout"
	"github.com/weft-fs/weft/proto"
)

// TestScenarios runs the scripts under testdata/scenarios. Commands:
//
//	mkdir PATH [mode=0755] [uid=N] [gid=N]
//	create PATH [mode=0644] [uid=N] [gid=N] [excl] [type=fifo|sock|chr|blk] [rdev=N] [stripes=N]
//	symlink PATH TARGET          readlink PATH
//	link OLD NEW                 unlink PATH        rmdir PATH
//	rename OLD NEW [noreplace] [exchange]
//	setattr PATH [mode=0N] [uid=N] [gid=N] [size=N] [atime=now|S] [mtime=now|S] [ctime=S]
//	setxattr PATH NAME VALUE [create] [replace]   getxattr PATH NAME
//	listxattr PATH               removexattr PATH NAME
//	open PATH                    release PATH|ino=N
//	writedone PATH|ino=N END     setlayout PATH size=KiB count=N [targets=1,2]
//	target UUID [free=N] [id=N]  targets        down ID     statfs
//	stat PATH|ino=N              tree [attrs]   tick [S]
//	orphans                      gc-queue       removed
//	restart
func TestScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata/scenarios", func(t *testing.T, path string) {
		e := newEnv(t)
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return e.run(t, d)
		})
		e.waitReclaim(t)
		checkInvariants(t, e.st)
	})
}

func (e *env) ino(t *testing.T, d *datadriven.TestData, i int) (proto.Ino, error) {
	a := d.CmdArgs[i]
	if a.Key == "ino" {
		n, err := strconv.ParseUint(a.Vals[0], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return proto.Ino(n), nil
	}
	at, err := e.resolve(a.Key)
	return at.Ino, err
}

func u32arg(t *testing.T, d *datadriven.TestData, key string, def uint32) uint32 {
	if a, ok := d.Arg(key); ok {
		v, err := strconv.ParseUint(a.Vals[0], 0, 32)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		return uint32(v)
	}
	return def
}

func secs(t *testing.T, s string) int64 {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatal(err)
	}
	return testEpoch.UnixNano() + int64(f*1e9)
}

func (e *env) run(t *testing.T, d *datadriven.TestData) string {
	arg := func(i int) string {
		if i >= len(d.CmdArgs) {
			t.Fatalf("%s: missing argument %d", d.Cmd, i)
		}
		return d.CmdArgs[i].Key
	}
	attrOut := func(a proto.Attr, err error) string {
		if err != nil {
			return "error: " + errName(err)
		}
		return fmtAttr(a) + "\n"
	}
	errOut := func(err error) string {
		if err != nil {
			return "error: " + errName(err)
		}
		return "ok"
	}
	switch d.Cmd {
	case "mkdir":
		p, name, err := e.parentOf(arg(0))
		if err != nil {
			return "error: " + errName(err)
		}
		return attrOut(e.srv.Mkdir(ctx, p, name, u32arg(t, d, "mode", 0755), u32arg(t, d, "uid", 0), u32arg(t, d, "gid", 0)))
	case "create":
		p, name, err := e.parentOf(arg(0))
		if err != nil {
			return "error: " + errName(err)
		}
		in := proto.CreateIn{Parent: p, Name: name, Mode: u32arg(t, d, "mode", 0644),
			Uid: u32arg(t, d, "uid", 0), Gid: u32arg(t, d, "gid", 0), Exclusive: d.HasArg("excl"), Rdev: u32arg(t, d, "rdev", 0)}
		if a, ok := d.Arg("type"); ok {
			in.Mode |= map[string]uint32{"fifo": syscall.S_IFIFO, "sock": syscall.S_IFSOCK, "chr": syscall.S_IFCHR,
				"blk": syscall.S_IFBLK, "dir": syscall.S_IFDIR}[a.Vals[0]]
		}
		if d.HasArg("stripes") {
			in.Layout = &layout.Layout{StripeSize: layout.DefaultStripeSize, StripeCount: int32(u32arg(t, d, "stripes", 1))}
		}
		return attrOut(e.srv.Create(ctx, in))
	case "symlink":
		p, name, err := e.parentOf(arg(0))
		if err != nil {
			return "error: " + errName(err)
		}
		return attrOut(e.srv.Symlink(ctx, p, name, arg(1), 0, 0))
	case "readlink":
		ino, err := e.ino(t, d, 0)
		if err != nil {
			return "error: " + errName(err)
		}
		s, err := e.srv.Readlink(ctx, ino)
		if err != nil {
			return "error: " + errName(err)
		}
		return s
	case "link":
		src, err := e.resolve(arg(0))
		if err != nil {
			return "error: " + errName(err)
		}
		p, name, err := e.parentOf(arg(1))
		if err != nil {
			return "error: " + errName(err)
		}
		return attrOut(e.srv.Link(ctx, src.Ino, p, name))
	case "unlink", "rmdir":
		p, name, err := e.parentOf(arg(0))
		if err != nil {
			return "error: " + errName(err)
		}
		if d.Cmd == "unlink" {
			return errOut(e.srv.Unlink(ctx, p, name))
		}
		return errOut(e.srv.Rmdir(ctx, p, name))
	case "rename":
		op, on, err := e.parentOf(arg(0))
		if err != nil {
			return "error: " + errName(err)
		}
		np, nn, err := e.parentOf(arg(1))
		if err != nil {
			return "error: " + errName(err)
		}
		var flags uint32
		if d.HasArg("noreplace") {
			flags |= proto.RenameNoReplace
		}
		if d.HasArg("exchange") {
			flags |= proto.RenameExchange
		}
		return errOut(e.srv.Rename(ctx, op, on, np, nn, flags))
	case "setattr":
		ino, err := e.ino(t, d, 0)
		if err != nil {
			return "error: " + errName(err)
		}
		var in proto.SetAttrIn
		if d.HasArg("mode") {
			in.Valid |= proto.SetMode
			in.Mode = u32arg(t, d, "mode", 0)
		}
		if d.HasArg("uid") {
			in.Valid |= proto.SetUid
			in.Uid = u32arg(t, d, "uid", 0)
		}
		if d.HasArg("gid") {
			in.Valid |= proto.SetGid
			in.Gid = u32arg(t, d, "gid", 0)
		}
		if d.HasArg("size") {
			in.Valid |= proto.SetSize
			in.Size = uint64(u32arg(t, d, "size", 0))
		}
		if a, ok := d.Arg("atime"); ok {
			if a.Vals[0] == "now" {
				in.Valid |= proto.SetAtimeNow
			} else {
				in.Valid |= proto.SetAtime
				in.Atime = secs(t, a.Vals[0])
			}
		}
		if a, ok := d.Arg("mtime"); ok {
			if a.Vals[0] == "now" {
				in.Valid |= proto.SetMtimeNow
			} else {
				in.Valid |= proto.SetMtime
				in.Mtime = secs(t, a.Vals[0])
			}
		}
		if a, ok := d.Arg("ctime"); ok {
			in.Valid |= proto.SetCtime
			in.Ctime = secs(t, a.Vals[0])
		}
		return attrOut(e.srv.SetAttr(ctx, ino, in))
	case "setxattr":
		ino, err := e.ino(t, d, 0)
		if err != nil {
			return "error: " + errName(err)
		}
		var flags uint32
		if d.HasArg("create") {
			flags |= proto.XattrCreate
		}
		if d.HasArg("replace") {
			flags |= proto.XattrReplace
		}
		return errOut(e.srv.SetXattr(ctx, ino, arg(1), []byte(arg(2)), flags))
	case "getxattr":
		ino, err := e.ino(t, d, 0)
		if err != nil {
			return "error: " + errName(err)
		}
		v, err := e.srv.GetXattr(ctx, ino, arg(1))
		if err != nil {
			return "error: " + errName(err)
		}
		return fmt.Sprintf("%q", v)
	case "listxattr":
		ino, err := e.ino(t, d, 0)
		if err != nil {
			return "error: " + errName(err)
		}
		names, err := e.srv.ListXattr(ctx, ino)
		if err != nil {
			return "error: " + errName(err)
		}
		return fmt.Sprint(names)
	case "removexattr":
		ino, err := e.ino(t, d, 0)
		if err != nil {
			return "error: " + errName(err)
		}
		return errOut(e.srv.RemoveXattr(ctx, ino, arg(1)))
	case "open":
		ino, err := e.ino(t, d, 0)
		if err != nil {
			return "error: " + errName(err)
		}
		a, _, err := e.srv.Open(ctx, ino, proto.AccessReadWrite)
		return attrOut(a, err)
	case "release":
		ino, err := e.ino(t, d, 0)
		if err != nil {
			return "error: " + errName(err)
		}
		return errOut(e.srv.Release(ctx, ino))
	case "writedone":
		ino, err := e.ino(t, d, 0)
		if err != nil {
			return "error: " + errName(err)
		}
		end, err := strconv.ParseUint(arg(1), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return attrOut(e.srv.WriteDone(ctx, ino, end, 0, proto.NoBlocks))
	case "setlayout":
		ino, err := e.ino(t, d, 0)
		if err != nil {
			return "error: " + errName(err)
		}
		l := layout.Layout{StripeSize: uint64(u32arg(t, d, "size", 1024)) << 10}
		if a, ok := d.Arg("count"); ok {
			n, err := strconv.Atoi(a.Vals[0])
			if err != nil {
				t.Fatal(err)
			}
			l.StripeCount = int32(n)
		}
		if a, ok := d.Arg("targets"); ok {
			for _, v := range a.Vals {
				n, _ := strconv.Atoi(v)
				l.Targets = append(l.Targets, proto.TargetID(n))
			}
		}
		return attrOut(e.srv.SetLayout(ctx, ino, l))
	case "target":
		free := uint64(u32arg(t, d, "free", 1<<30))
		id, err := e.srv.RegisterTarget(ctx, arg(0), proto.TargetInfo{ID: proto.TargetID(u32arg(t, d, "id", 0)),
			Addr: "host:" + arg(0), Total: 1 << 31, Used: 1<<31 - free, Free: free})
		if err != nil {
			return "error: " + errName(err)
		}
		return fmt.Sprintf("id=%d", id)
	case "targets":
		ts, _ := e.srv.Targets(ctx)
		var b strings.Builder
		for _, ti := range ts {
			fmt.Fprintf(&b, "id=%d addr=%s free=%d up=%v\n", ti.ID, ti.Addr, ti.Free, ti.Up)
		}
		return b.String()
	case "statfs":
		s, err := e.srv.StatFS(ctx)
		if err != nil {
			return "error: " + errName(err)
		}
		return fmt.Sprintf("total=%d used=%d free=%d files=%d", s.Total, s.Used, s.Free, s.Files)
	case "stat":
		ino, err := e.ino(t, d, 0)
		if err != nil {
			return "error: " + errName(err)
		}
		return attrOut(e.srv.GetAttr(ctx, ino))
	case "tree":
		var b strings.Builder
		e.tree(&b, proto.RootIno, "", d.HasArg("attrs"))
		if b.Len() == 0 {
			return "(empty)"
		}
		return b.String()
	case "tick":
		s := 1.0
		if len(d.CmdArgs) > 0 {
			s, _ = strconv.ParseFloat(arg(0), 64)
		}
		e.clock.Advance(time.Duration(s * 1e9))
		return ""
	case "orphans":
		// Orphans without opens are reclaimed asynchronously: let that
		// settle so the output is deterministic.
		e.waitReclaim(t)
		o, err := e.srv.Orphans()
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(o)
	case "gc-queue":
		q, err := e.srv.GCQueue()
		if err != nil {
			t.Fatal(err)
		}
		return fmtObjs(q)
	case "removed":
		// Waits for the GC queue to drain, then lists what storage removed.
		waitFor(t, "gc", func() bool { q, _ := e.srv.GCQueue(); return len(q) == 0 })
		return fmtObjs(e.storage.Removed())
	case "down":
		id := proto.TargetID(u32arg(t, d, "id", 0))
		e.storage.setDown(id, !d.HasArg("up"))
		return ""
	case "restart":
		e.restart()
		return ""
	}
	t.Fatalf("unknown command %q", d.Cmd)
	return ""
}

// waitReclaim waits until no reclaim is pending or running.
func (e *env) waitReclaim(t testing.TB) {
	waitFor(t, "reclaim", func() bool {
		e.srv.mu.Lock()
		defer e.srv.mu.Unlock()
		return len(e.srv.pending) == 0 && len(e.srv.reclaiming) == 0
	})
}

func fmtObjs(q []GCObject) string {
	if len(q) == 0 {
		return "(none)"
	}
	s := make([]string, len(q))
	for i, o := range q {
		s[i] = fmt.Sprintf("target=%d ino=%d stripe=%d", o.Target, o.Obj.Ino, o.Obj.Stripe)
	}
	slices.Sort(s)
	return strings.Join(s, "\n")
}
