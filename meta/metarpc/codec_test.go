package metarpc

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weft-fs/weft/layout"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/wire"
)

func allOps() []uint16 {
	return []uint16{
		OpLookup, OpGetAttr, OpSetAttr, OpCreate, OpMkdir, OpSymlink, OpReadlink, OpLink,
		OpUnlink, OpRmdir, OpRename, OpReadDir, OpGetXattr, OpSetXattr, OpListXattr,
		OpRemoveXattr, OpOpen, OpWriteDone, OpRelease, OpSetLayout, OpStatFS, OpTargets,
		OpRegisterTarget, OpCreateOpen, OpUnlinkAt, OpRmdirAt, OpReleaseMany, OpCapability,
		OpSessionOpen, OpSessionRenew, OpSessionClose, OpStatus, OpMemberStatus, OpFind, OpLock, OpLockWait, OpAppend, OpAppendReclaim, OpMembers, OpMemberAdd, OpMemberRemove, OpGroup, OpSetQuota, OpGetQuota, OpSetProject, OpCheckQuota, OpJobStats, OpParams, OpParamSet,
	}
}

var sampleAttr = proto.Attr{Ino: 7, Mode: 0100644, Nlink: 2, Uid: 1, Gid: 2, Rdev: 3, Size: 4,
	Atime: -5, Mtime: 6, Ctime: 7, Layout: layout.Layout{StripeSize: 1 << 20, StripeCount: 2, Targets: []proto.TargetID{1, 2}}}

// samples gives a filled request and response for every message type.
func samples() []message {
	l := layout.Layout{StripeSize: 64 << 10, StripeCount: -1}
	return []message{
		&memberReq{4, "h4:7400"},
		&openCopyReq{9, proto.AccessRead},
		&openCopyResp{sampleAttr, []byte("cap"), []byte("bytes of a small file")},
		&openCopyResp{Attr: sampleAttr},
		&openCopyResp{Attr: sampleAttr, Data: []byte{}},
		&writeDoneCopyReq{9, 21, 5, 8, []byte("bytes of a small file")},
		&quotaReq{QuotaGroup, 7, QuotaAmounts{10, 1 << 30}},
		&quotaResp{Quota{QuotaProject, 9, QuotaAmounts{3, 4096}, QuotaAmounts{10, 0}}},
		&projectReq{12, 9, true},
		&countResp{77},
		&checkReq{true},
		&quotaCheckResp{[]QuotaCheck{{QuotaUser, 1000, QuotaAmounts{1, 2}, QuotaAmounts{1, 3}}}},
		&jobStatsReq{"1234"},
		&paramSetReq{"log.level.meta", "debug", true},
		&paramsResp{[]Param{{Name: "a", Scope: "b", Default: "c", Doc: "d", Value: "e", Source: "set"}}},
		&jobStatsResp{[]proto.JobStat{{Job: "dd.1000", Service: "storage", Server: "h:1", Ops: []proto.JobOp{{Name: "write", Count: 3, Errors: 1}},
			ReadBytes: 1, WriteBytes: 2, Requests: 3, Latency: 4, FirstSeen: time.Unix(0, 5), LastSeen: time.Unix(0, 6)}}},
		&membersResp{[]Member{{ID: 1, Addr: "h1:7400", Leader: true, Active: true, Match: 9}, {ID: 4, Learner: true, Snapshot: true}}},
		&inoReq{5},
		&nameReq{5, "name"},
		&setAttrReq{5, proto.SetAttrIn{Valid: 3, Mode: 4, Uid: 5, Gid: 6, Size: 7, Atime: 8, Mtime: 9, Ctime: 10}},
		&createReq{proto.CreateIn{Parent: 1, Name: "f", Mode: 0100600, Rdev: 2, Uid: 3, Gid: 4, Exclusive: true, Layout: &l}},
		&createReq{proto.CreateIn{Parent: 1, Name: "g"}},
		&createOpenReq{createReq{proto.CreateIn{Parent: 1, Name: "h", Exclusive: true}}, proto.AccessReadWrite},
		&createOpenReq{createReq{proto.CreateIn{Parent: 1, Name: "h"}}, 0},
		&openReq{5, proto.AccessRead},
		&inosReq{[]proto.Ino{1, 2, 3}},
		&mkdirReq{1, "d", 0755, 1, 2},
		&symlinkReq{1, "s", "target", 1, 2},
		&linkReq{3, 1, "l"},
		&renameReq{1, "a", 2, "b", 2},
		&readDirReq{1, "after", 100},
		&setXattrReq{1, "user.x", []byte("v"), 1},
		&writeDoneReq{1, 1 << 40, 0, proto.NoBlocks},
		&writeDoneReq{1, 1 << 40, 1_700_000_000_123_456_789, 4096},
		&setLayoutReq{1, l},
		&registerReq{"uuid", proto.TargetInfo{ID: 1, Addr: "h:1", Total: 3, Used: 2, Free: 1, Up: true}},
		&emptyMsg{},
		&sessionOpenReq{[]proto.OpenHandle{{Ino: 5, Count: 2, Write: true}, {Ino: 6, Count: 1}}, "0.4.0 (abc, go1.26)"},
		&sessionOpenReq{nil, ""},
		&statusResp{proto.ClusterStatus{FSID: "fs", Version: "v", Uptime: 3e9, Files: 7,
			Replica: &proto.ReplicaStatus{ID: 1, Leader: 2, Term: 3, Commit: 4, Applied: 5, LastIndex: 6, Snapshot: 7},
			Targets: []proto.TargetInfo{{ID: 1, Addr: "h:1", Total: 3, Used: 2, Free: 1, Up: true}},
			Clients: []proto.ClientStatus{{Name: "c", Session: proto.SessionID{1, 2}, Addr: "10.0.0.1:5", Version: "v", Age: 1e9, LeaseLeft: 2e9, Handles: 4}}}},
		&statusResp{proto.ClusterStatus{FSID: "fs"}},
		&memberStatusResp{proto.ReplicaStatus{ID: 1, Leader: 2, Term: 3, Commit: 4, Applied: 5, LastIndex: 6, Snapshot: 7}},
		&statusResp{proto.ClusterStatus{FSID: "fs", Replica: &proto.ReplicaStatus{ID: 2, Leader: 2, Term: 9, Commit: 40, Applied: 40, LastIndex: 41,
			Members: []proto.ReplicaMember{{ID: 1, Addr: "h1:7400", Match: 38, Active: true}, {ID: 2, Addr: "h2:7400", Leader: true, Match: 41, Active: true},
				{ID: 4, Learner: true, Snapshot: true}}}}},
		&findReq{Start: 1, Filter: proto.FindFilter{MaxDepth: -1}},
		&findReq{Start: 9, Filter: proto.FindFilter{Name: "*.h5", Type: 'f', Size: proto.Cmp{Op: '>', Value: 1 << 20},
			Mtime: proto.Cmp{Op: '<', Value: -5}, Uid: new(uint32), Gid: new(uint32), StripeCount: proto.Cmp{Op: '=', Value: 4},
			Target: new(proto.TargetID), MaxDepth: 3}, Cursor: []byte("cursor"), Max: 100},
		&findResp{},
		&findResp{[]proto.Found{{Path: "a/b", Attr: sampleAttr}, {Path: ".", Attr: proto.Attr{Ino: 1}}}, []byte("next")},
		&leaseResp{30e9},
		&lockReq{5, proto.Lock{Owner: 1 << 60, Flock: true, Type: proto.LockWrite, Start: 3, End: proto.LockEOF, Pid: 42}, proto.LockReclaim},
		&lockResp{proto.Lock{Owner: 9, Type: proto.LockRead, Start: 0, End: 99, Pid: 7}},
		&appendReq{5, 4096},
		&appendReclaimReq{5, 1 << 40},
		&attrResp{sampleAttr},
		&createOpenResp{sampleAttr, proto.Attr{Ino: 1, Mode: 040755, Nlink: 3}, []byte("capability")},
		&createOpenResp{sampleAttr, proto.Attr{Ino: 1, Mode: 040755, Nlink: 3}, nil},
		&openResp{sampleAttr, []byte("capability")},
		&capResp{[]byte("capability")},
		&capResp{},
		&stringResp{"link"},
		&bytesResp{[]byte{0, 1, 2}},
		&dirResp{[]proto.DirEntry{{Name: "a", Attr: sampleAttr}, {Name: "b"}}},
		&stringsResp{[]string{"user.a", "user.b"}},
		&statfsResp{proto.StatFS{Total: 1, Used: 2, Free: 3, Files: 4, FilesFree: 5}},
		&targetsResp{[]proto.TargetInfo{{ID: 1, Addr: "x", Up: true}, {ID: 2}}},
		&targetsResp{[]proto.TargetInfo{{ID: 3, Addr: "y", Total: 9, Used: 1, Free: 8, Up: true, Objects: 4, FilesFree: 5, Device: "m:1",
			IO: proto.IOCounters{Reads: 1, ReadBytes: 2, Writes: 3, WriteBytes: 4}}}},
		&targetIDResp{9},
		&migrateBeginReq{5, layout.Layout{Kind: layout.EC, ECData: 2, ECParity: 1, StripeSize: 1 << 20, StripeCount: 1}},
		&ticketMsg{proto.MigrateTicket{Ino: 5, Gen: 1, NewGen: 2, Layout: sampleAttr.Layout, Mtime: -3, Ctime: 4, Size: 5, Until: 6, Cap: []byte("cap"), Blocks: 7}},
		&ticketMsg{proto.MigrateTicket{Ino: 5}},
		&leasePollReq{Ack: 7},
		&lookupCopyReq{Parent: 3, Name: "f"},
		&lookupCopyResp{Attr: sampleAttr, Openable: true, Data: []byte("copy")},
		&lookupCopyResp{Attr: sampleAttr},
		&copiesAfterReq{Ino: 3, Window: 64},
		&copiesAfterResp{Through: 70, Copies: []proto.FileCopy{{Attr: sampleAttr, Data: []byte("copy")}, {Attr: sampleAttr, Data: []byte("another")}}},
		&copiesAfterResp{},
		&leasePollResp{P: proto.LeasePoll{Epoch: 1 << 40, Term: 5e9, Valid: 4e8, Invals: []proto.LeaseInval{{Seq: 1, Ino: 2, Name: "n"}, {Seq: 2, Ino: 3}}}},
	}
}

// migrateOps are the restripe's ops, the leases' and the copies' (not in
// allOps).
func migrateOps() []uint16 {
	return []uint16{OpMigrateBegin, OpMigrateCommit, OpMigrateAbort, OpMigrateFollow, OpMigrateRenew, OpLeasePoll,
		OpOpenCopy, OpWriteDoneCopy, OpLookupCopy, OpCopiesAfter}
}

// anyMessages is messages, or copiesMessages, migrateMessages or
// leaseMessages for the copies', the restripe's and the leases' ops.
func anyMessages(op uint16) (req, resp message, ok bool) {
	if req, resp, ok = messages(op); ok {
		return req, resp, ok
	}
	if req, resp, ok = copiesMessages(op); ok {
		return req, resp, ok
	}
	if req, resp, ok = migrateMessages(op); ok {
		return req, resp, ok
	}
	return leaseMessages(op)
}

func TestRoundTrip(t *testing.T) {
	for _, m := range samples() {
		b := marshal(m)
		got := reflect.New(reflect.TypeOf(m).Elem()).Interface().(message)
		if err := unmarshal(b, got); err != nil {
			t.Fatalf("%T: %v", m, err)
		}
		if !bytes.Equal(marshal(got), b) {
			t.Fatalf("%T: round trip changed the bytes", m)
		}
		// Every truncation fails cleanly, and so does a trailing byte.
		for i := range len(b) {
			if _, ok := m.(*writeDoneReq); ok && i == 16 {
				continue // a write-done without its extension (an older client's) is valid
			}
			if err := unmarshal(b[:i], reflect.New(reflect.TypeOf(m).Elem()).Interface().(message)); err == nil {
				t.Fatalf("%T: truncated to %d bytes decoded", m, i)
			}
		}
		if err := unmarshal(append(b, 0), got); err == nil {
			t.Fatalf("%T: trailing byte accepted", m)
		}
	}
}

func TestEveryOpHasMessages(t *testing.T) {
	seen := map[uint16]bool{}
	for _, op := range allOps() {
		if op == 0 || op >= 100 {
			t.Errorf("op %d outside 1..99", op)
		}
		if seen[op] {
			t.Errorf("op %d twice", op)
		}
		seen[op] = true
		if _, _, ok := messages(op); !ok {
			t.Errorf("op %d has no messages", op)
		}
	}
	if _, _, ok := messages(99); ok {
		t.Error("op 99 has messages")
	}
}

// nopService fails every call; the handler must never reach it with a
// malformed request.
type nopService struct{ proto.MetaService }

func TestHandlerMalformed(t *testing.T) {
	h := NewHandler(nopService{}, nil, slog.New(slog.DiscardHandler))
	for _, op := range append(allOps(), migrateOps()...) {
		_, err := h(context.Background(), op, []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11})
		if op == OpStatFS || op == OpTargets {
			continue // no body: everything is trailing garbage, still EINVAL below
		}
		if !errors.Is(err, syscall.EINVAL) {
			t.Errorf("op %d with garbage: %v", op, err)
		}
	}
	if _, err := h(context.Background(), OpStatFS, []byte{1}); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("statfs with a body: %v", err)
	}
	if _, err := h(context.Background(), 77, nil); !errors.Is(err, syscall.ENOSYS) {
		t.Errorf("unknown op: %v", err)
	}
	if _, err := h(context.Background(), OpRegisterTarget, withHeader(marshal(&registerReq{UUID: "u"}))); !errors.Is(err, syscall.ENOSYS) {
		t.Errorf("register without registry: %v", err)
	}
}

// FuzzDecode feeds arbitrary bytes to the request and response decoder of
// every op: no panic, and whatever decodes re-encodes stably.
func FuzzDecode(f *testing.F) {
	for _, m := range samples() {
		for _, op := range append(allOps(), migrateOps()...) {
			req, resp, _ := anyMessages(op)
			if reflect.TypeOf(req) == reflect.TypeOf(m) || reflect.TypeOf(resp) == reflect.TypeOf(m) {
				f.Add(op, marshal(m))
			}
		}
	}
	f.Fuzz(func(t *testing.T, op uint16, b []byte) {
		req, resp, ok := anyMessages(op)
		if !ok {
			return
		}
		for _, m := range []message{req, resp} {
			if err := unmarshal(b, m); err != nil {
				continue
			}
			// Re-encoding is canonical (a bool byte 7 becomes 1) and stable.
			b2 := marshal(m)
			m2 := reflect.New(reflect.TypeOf(m).Elem()).Interface().(message)
			if err := unmarshal(b2, m2); err != nil || !bytes.Equal(marshal(m2), b2) {
				t.Fatalf("op %d %T: re-encoding is not stable: %v", op, m, err)
			}
		}
		h := NewHandler(nopService{}, nil, nil)
		for _, body := range [][]byte{b, withHeader(b)} {
			func() {
				defer func() {
					// nopService panics on a valid request (nil interface):
					// only the decode path is under test here.
					recover()
				}()
				h(context.Background(), op, body)
			}()
		}
	})
}

// withHeader prefixes a request message with a request header.
func withHeader(msg []byte) []byte {
	e := wire.NewEncoder(64)
	(&header{Cred: proto.Cred{Uid: 1000, Gid: 100, Groups: []uint32{100, 10}}, Session: proto.SessionID{1, 2, 3}}).encode(e)
	return append(e.B, msg...)
}

// TestHeaderVectors pins the header's wire format.
func TestHeaderVectors(t *testing.T) {
	for _, tc := range []struct {
		h    header
		want string
	}{
		{header{}, "03" + "00000000" + "00000000" + "00000000" + "00000000000000000000000000000000" + "0000000000000000" + "00000000"},
		{header{Cred: proto.Cred{Uid: 1000, Gid: 100, Groups: []uint32{100, 65534}}, Session: proto.SessionID{0: 0xaa, 15: 0xbb}, Seq: 0x102, Job: "42"},
			"03" + "e8030000" + "64000000" + "02000000" + "64000000" + "feff0000" + "aa0000000000000000000000000000bb" + "0201000000000000" + "02000000" + "3432"},
	} {
		e := wire.NewEncoder(0)
		tc.h.encode(e)
		if got := hex.EncodeToString(e.B); got != tc.want {
			t.Errorf("encode %+v = %s, want %s", tc.h, got, tc.want)
		}
		got, rest, err := decodeHeader(append(e.B, 7))
		if err != nil || !reflect.DeepEqual(got, tc.h) && !(len(tc.h.Cred.Groups) == 0 && got.Cred.Groups == nil) || !bytes.Equal(rest, []byte{7}) {
			t.Errorf("decode: %+v %x %v", got, rest, err)
		}
		for i := range len(e.B) {
			if _, _, err := decodeHeader(e.B[:i]); err == nil {
				t.Errorf("header truncated to %d bytes decoded", i)
			}
		}
	}
	// Version 1 (no sequence numbers) is still read: no dedupe.
	v1, _ := hex.DecodeString("01" + "e8030000" + "64000000" + "00000000" + "aa0000000000000000000000000000bb" + "07")
	if h, rest, err := decodeHeader(v1); err != nil || h.Cred.Uid != 1000 || h.Session[0] != 0xaa || h.Seq != 0 || !bytes.Equal(rest, []byte{7}) {
		t.Errorf("version 1 header: %+v %x %v", h, rest, err)
	}
	// Version 2 (no job id) is still read: no job.
	v2, _ := hex.DecodeString("02" + "e8030000" + "64000000" + "00000000" + "aa0000000000000000000000000000bb" + "0500000000000000" + "07")
	if h, rest, err := decodeHeader(v2); err != nil || h.Cred.Uid != 1000 || h.Seq != 5 || h.Job != "" || !bytes.Equal(rest, []byte{7}) {
		t.Errorf("version 2 header: %+v %x %v", h, rest, err)
	}
	bad := []byte{4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	if _, _, err := decodeHeader(append(bad, make([]byte, 28)...)); err == nil || !strings.Contains(err.Error(), "version 4 not supported") {
		t.Errorf("header version 4: %v", err)
	}
	// A job id that is not a valid label is refused.
	for _, job := range []string{"a b", "x\n", strings.Repeat("j", proto.MaxJobID+1)} {
		e := wire.NewEncoder(0)
		(&header{Job: job}).encode(e)
		if _, _, err := decodeHeader(e.B); err == nil {
			t.Errorf("job id %q accepted", job)
		}
	}
	huge := []byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}
	if _, _, err := decodeHeader(huge); err == nil {
		t.Error("2^32-1 groups accepted")
	}
}

// FuzzHeader: the header decoder never panics, and what decodes
// re-encodes to the same bytes.
func FuzzHeader(f *testing.F) {
	f.Add(withHeader(nil))
	f.Add([]byte{1})
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, rest, err := decodeHeader(b)
		if err != nil {
			return
		}
		if len(h.Cred.Groups) > proto.MaxGroups {
			t.Fatalf("%d groups decoded", len(h.Cred.Groups))
		}
		e := wire.NewEncoder(0)
		h.encode(e)
		if b[0] < HeaderVersion {
			// Versions 1 and 2 are re-encoded as the current version.
			h2, _, err := decodeHeader(e.B)
			if err != nil || h2.Session != h.Session || h2.Cred.Uid != h.Cred.Uid || h2.Seq != h.Seq {
				t.Fatalf("version 1 header re-encoded differs: %+v %v", h2, err)
			}
			return
		}
		if !bytes.Equal(append(e.B, rest...), b) {
			t.Fatalf("re-encoding differs")
		}
	})
}

// The op codes Open and CreateOpen had before capabilities are retired: a
// server answers them ENOSYS instead of misreading an old client's body.
func TestRetiredOps(t *testing.T) {
	for _, op := range []uint16{17, 31} {
		if _, ok := request(op); ok {
			t.Fatalf("retired op %d is served", op)
		}
		if OpName(op) != "" {
			t.Fatalf("retired op %d has a name", op)
		}
	}
}

// TestStatusVersion1: a status in the format before members (version 1,
// an older server's) still decodes, with no members.
func TestStatusVersion1(t *testing.T) {
	e := wire.NewEncoder(64)
	e.U8(1)
	e.String("fs")
	e.String("v")
	e.I64(3e9)
	e.U64(7)
	e.U64(8)
	e.Bool(true)
	for v := range uint64(7) {
		e.U64(v + 1)
	}
	e.U32(0)
	e.U32(0)
	var got statusResp
	if err := unmarshal(e.B, &got); err != nil {
		t.Fatal(err)
	}
	want := proto.ReplicaStatus{ID: 1, Leader: 2, Term: 3, Commit: 4, Applied: 5, LastIndex: 6, Snapshot: 7}
	if got.S.FSID != "fs" || got.S.Replica == nil || !reflect.DeepEqual(*got.S.Replica, want) {
		t.Fatalf("version 1 status decoded as %+v %+v", got.S, got.S.Replica)
	}
	e.B[0] = 3
	if err := unmarshal(e.B, &got); err == nil {
		t.Fatal("a status of an unknown version decoded")
	}
}

// TestLeasePollVersion1: a poll of an older client (version 1) is
// answered in version 1, without Valid; a version-1 answer decodes with
// Valid = Term; an unknown version is refused.
func TestLeasePollVersion1(t *testing.T) {
	e := wire.NewEncoder(16)
	e.U8(1)
	e.U64(9)
	var req leasePollReq
	if err := unmarshal(e.B, &req); err != nil || req.Ack != 9 || req.v != 1 {
		t.Fatalf("version 1 poll decoded as %+v, %v", req, err)
	}
	answer := marshal(&leasePollResp{P: proto.LeasePoll{Epoch: 3, Term: 2e9, Valid: 1e8}, v: req.v})
	if answer[0] != 1 {
		t.Fatalf("answer to a version 1 poll in version %d", answer[0])
	}
	var got leasePollResp
	if err := unmarshal(answer, &got); err != nil {
		t.Fatal(err)
	}
	if got.P.Epoch != 3 || got.P.Term != 2e9 || got.P.Valid != 2e9 {
		t.Fatalf("version 1 answer decoded as %+v, want Valid = Term", got.P)
	}
	e.B[0] = 3
	if err := unmarshal(e.B, &req); err == nil {
		t.Fatal("a poll of an unknown version decoded")
	}
}
