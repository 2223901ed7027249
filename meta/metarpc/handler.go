package metarpc

import (
	"context"
	"fmt"
	"log/slog"
	"syscall"
	"time"

	"github.com/weft-fs/weft/jobstats"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/transport"
)

// NewHandler serves svc and reg over the transport. A request that does not
// decode is answered with EINVAL and logged; it never crashes the server.
// reg may be nil, in which case RegisterTarget answers ENOSYS.
func NewHandler(svc proto.MetaService, reg proto.TargetRegistry, log *slog.Logger) transport.Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &handler{svc: svc, reg: reg, log: log}
	h.ext, _ = svc.(Extended)
	h.sess, _ = svc.(SessionService)
	h.status, _ = svc.(StatusService)
	h.memberStatus, _ = svc.(MemberStatusService)
	h.find, _ = svc.(FindService)
	h.locks, _ = svc.(proto.LockService)
	h.admin, _ = svc.(MemberAdmin)
	h.grp, _ = svc.(GroupService)
	h.quota, _ = svc.(QuotaService)
	h.params, _ = svc.(ParamService)
	if js, ok := svc.(JobStatsService); ok {
		h.jobStats = js
		h.jobs = js.JobTable()
	}
	return h.serve
}

type handler struct {
	svc    proto.MetaService
	ext    Extended       // nil if svc does not offer it
	sess   SessionService // nil if svc does not offer it
	status StatusService  // nil if svc does not offer it
	// memberStatus: nil if svc does not offer it
	memberStatus MemberStatusService
	find         FindService       // nil if svc does not offer it
	locks        proto.LockService // nil if svc does not offer it
	admin        MemberAdmin       // nil if svc does not offer it (admin.go)
	grp          GroupService      // nil if svc does not offer it (cluster.go)
	quota        QuotaService      // nil if svc does not offer it (quota.go)
	reg          proto.TargetRegistry
	log          *slog.Logger

	jobStats JobStatsService // nil if svc does not offer it (jobstats.go)
	params   ParamService    // nil if svc does not offer it (params.go)
	jobs     *jobstats.Table // where requests naming a job are counted; nil: nowhere
}

func (h *handler) serve(ctx context.Context, op uint16, body []byte) ([]byte, error) {
	growStack()
	req, ok := request(op)
	if !ok {
		h.log.Warn("metarpc: unknown op", "op", op)
		return nil, fmt.Errorf("metarpc: unknown op %d: %w", op, syscall.ENOSYS)
	}
	n := len(body)
	hdr, body, err := decodeHeader(body)
	if err != nil {
		h.log.Warn("metarpc: malformed request header", "op", op, "len", n, "err", err)
		return nil, fmt.Errorf("%v: %w", err, syscall.EINVAL)
	}
	// The service authorizes the credentials against the peer in ctx (root
	// squash, allow-list) and checks every operation against them.
	ctx = proto.WithRequest(ctx, hdr.Cred, hdr.Session, hdr.Seq, hdr.Job)
	if err := unmarshal(body, req); err != nil {
		h.log.Warn("metarpc: malformed request", "op", op, "len", len(body), "err", err)
		return nil, fmt.Errorf("%v: %w", err, syscall.EINVAL)
	}
	if hdr.Job != "" && h.jobs != nil {
		start := time.Now()
		resp, err := h.call(ctx, op, req)
		h.jobs.Record(hdr.Job, OpName(op), 0, 0, time.Since(start), err != nil)
		if err != nil {
			return nil, err
		}
		return marshal(resp), nil
	}
	resp, err := h.call(ctx, op, req)
	if err != nil {
		return nil, err
	}
	return marshal(resp), nil
}

func attrOut(a proto.Attr, err error) (message, error) { return &attrResp{a}, err }

var errNoExt = fmt.Errorf("metarpc: the service has no combined operations: %w", syscall.ENOSYS)

func (h *handler) call(ctx context.Context, op uint16, req message) (message, error) {
	s := h.svc
	switch op {
	case OpMembers, OpMemberAdd, OpMemberRemove:
		return h.callAdmin(ctx, op, req)
	case OpSetQuota, OpGetQuota, OpSetProject, OpCheckQuota:
		return h.callQuota(ctx, op, req)
	case OpParams, OpParamSet:
		return h.callParams(ctx, op, req)
	case OpJobStats:
		if h.jobStats == nil {
			return nil, fmt.Errorf("metarpc: the service keeps no job statistics: %w", syscall.ENOSYS)
		}
		st, err := h.jobStats.JobStats(ctx, req.(*jobStatsReq).Job)
		return &jobStatsResp{st}, err
	case OpTargetList, OpTargetState, OpRebuildRate:
		return h.callTarget(ctx, op, req)
	case OpScrubReport, OpScrubStart, OpScrubStatus:
		return h.callScrub(ctx, op, req)
	case OpMigrateBegin, OpMigrateCommit, OpMigrateAbort, OpMigrateFollow, OpMigrateRenew:
		return h.callMigrate(ctx, op, req)
	case OpLeasePoll, OpLeasePin:
		return h.callLease(ctx, req)
	case OpOpenCopy, OpWriteDoneCopy, OpLookupCopy, OpCopiesAfter:
		return h.callCopies(ctx, op, req)
	case OpCreateOpen, OpUnlinkAt, OpRmdirAt, OpReleaseMany:
		if h.ext == nil {
			return nil, errNoExt
		}
		return h.callExt(ctx, op, req)
	case OpGroup:
		if h.grp == nil {
			return nil, fmt.Errorf("metarpc: the service has no group: %w", syscall.ENOSYS)
		}
		m, err := h.grp.Group(ctx)
		return &groupResp{m}, err
	case OpSessionOpen, OpSessionRenew, OpSessionClose:
		if h.sess == nil {
			return nil, fmt.Errorf("metarpc: the service has no sessions: %w", syscall.ENOSYS)
		}
		switch op {
		case OpSessionOpen:
			r := req.(*sessionOpenReq)
			l, err := h.sess.OpenSession(proto.WithClientVersion(ctx, r.Version), r.Handles)
			return &leaseResp{l}, err
		case OpSessionRenew:
			l, err := h.sess.RenewSession(ctx)
			return &leaseResp{l}, err
		default:
			return &emptyMsg{}, h.sess.CloseSession(ctx)
		}
	}
	if op == OpFind {
		if h.find == nil {
			return nil, fmt.Errorf("metarpc: the service has no find: %w", syscall.ENOSYS)
		}
		r := req.(*findReq)
		found, cursor, err := h.find.Find(ctx, r.Start, r.Filter, r.Cursor, int(r.Max))
		return &findResp{found, cursor}, err
	}
	if op == OpMemberStatus {
		if h.memberStatus == nil {
			return nil, fmt.Errorf("metarpc: the service has no member status: %w", syscall.ENOSYS)
		}
		r, err := h.memberStatus.MemberStatus(ctx)
		return &memberStatusResp{r}, err
	}
	if op == OpStatus {
		if h.status == nil {
			return nil, fmt.Errorf("metarpc: the service has no status: %w", syscall.ENOSYS)
		}
		st, err := h.status.Status(ctx)
		return &statusResp{st}, err
	}
	switch r := req.(type) {
	case *lockReq, *appendReq, *appendReclaimReq:
		if h.locks == nil {
			return nil, fmt.Errorf("metarpc: the service has no locks: %w", syscall.ENOSYS)
		}
		return h.callLocks(ctx, op, req)
	case *nameReq:
		switch op {
		case OpLookup:
			return attrOut(s.Lookup(ctx, r.Ino, r.Name))
		case OpUnlink:
			return &emptyMsg{}, s.Unlink(ctx, r.Ino, r.Name)
		case OpRmdir:
			return &emptyMsg{}, s.Rmdir(ctx, r.Ino, r.Name)
		case OpRemoveXattr:
			return &emptyMsg{}, s.RemoveXattr(ctx, r.Ino, r.Name)
		case OpGetXattr:
			v, err := s.GetXattr(ctx, r.Ino, r.Name)
			return &bytesResp{v}, err
		}
	case *inoReq:
		switch op {
		case OpGetAttr:
			return attrOut(s.GetAttr(ctx, r.Ino))
		case OpRelease:
			return &emptyMsg{}, s.Release(ctx, r.Ino)
		case OpReadlink:
			t, err := s.Readlink(ctx, r.Ino)
			return &stringResp{t}, err
		case OpListXattr:
			n, err := s.ListXattr(ctx, r.Ino)
			return &stringsResp{n}, err
		}
	case *openReq:
		switch op {
		case OpOpen:
			a, cap, err := s.Open(ctx, r.Ino, r.Want)
			return &openResp{a, cap}, err
		case OpCapability:
			cap, err := s.Capability(ctx, r.Ino, r.Want)
			return &capResp{cap}, err
		}
	case *setAttrReq:
		return attrOut(s.SetAttr(ctx, r.Ino, r.In))
	case *createReq:
		return attrOut(s.Create(ctx, r.In))
	case *mkdirReq:
		return attrOut(s.Mkdir(ctx, r.Parent, r.Name, r.Mode, r.Uid, r.Gid))
	case *symlinkReq:
		return attrOut(s.Symlink(ctx, r.Parent, r.Name, r.Target, r.Uid, r.Gid))
	case *linkReq:
		return attrOut(s.Link(ctx, r.Ino, r.NewParent, r.NewName))
	case *renameReq:
		return &emptyMsg{}, s.Rename(ctx, r.OldParent, r.OldName, r.NewParent, r.NewName, r.Flags)
	case *readDirReq:
		ents, err := s.ReadDir(ctx, r.Dir, r.After, int(min(r.Max, 1<<20)))
		return &dirResp{ents}, err
	case *setXattrReq:
		return &emptyMsg{}, s.SetXattr(ctx, r.Ino, r.Name, r.Value, r.Flags)
	case *writeDoneReq:
		return attrOut(s.WriteDone(ctx, r.Ino, r.End, r.Mtime, r.Blocks))
	case *setLayoutReq:
		return attrOut(s.SetLayout(ctx, r.Ino, r.Layout))
	case *emptyMsg:
		switch op {
		case OpStatFS:
			st, err := s.StatFS(ctx)
			return &statfsResp{st}, err
		case OpTargets:
			ts, err := s.Targets(ctx)
			return &targetsResp{ts}, err
		case OpFSID:
			f, ok := h.reg.(interface{ FSID() string })
			if !ok {
				return nil, fmt.Errorf("metarpc: no file system id here: %w", syscall.ENOSYS)
			}
			return &stringResp{f.FSID()}, nil
		}
	case *staleReq:
		sm, ok := s.(proto.StaleMarker)
		if !ok {
			return nil, fmt.Errorf("metarpc: no stale marks here: %w", syscall.ENOSYS)
		}
		if op == OpClearStale {
			return attrOut(sm.ClearStale(ctx, r.Ino, r.Gen, r.Slots, r.Mtime))
		}
		return attrOut(sm.MarkStale(ctx, r.Ino, r.Gen, r.Slots))
	case *registerReq:
		if h.reg == nil {
			return nil, fmt.Errorf("metarpc: no target registry here: %w", syscall.ENOSYS)
		}
		id, err := h.reg.RegisterTarget(ctx, r.UUID, r.Info)
		return &targetIDResp{id}, err
	}
	return nil, fmt.Errorf("metarpc: op %d has no handler: %w", op, syscall.ENOSYS)
}

func (h *handler) callLocks(ctx context.Context, op uint16, req message) (message, error) {
	switch r := req.(type) {
	case *lockReq:
		switch op {
		case OpLock:
			l, err := h.locks.Lock(ctx, r.Ino, r.Lock, r.Mode)
			return &lockResp{l}, err
		case OpLockWait:
			return &emptyMsg{}, h.locks.LockWait(ctx, r.Ino, r.Lock)
		}
	case *appendReq:
		return attrOut(h.locks.Append(ctx, r.Ino, r.N))
	case *appendReclaimReq:
		return &emptyMsg{}, h.locks.ReclaimAppend(ctx, r.Ino, r.End)
	}
	return nil, fmt.Errorf("metarpc: op %d has no handler: %w", op, syscall.ENOSYS)
}

func (h *handler) callExt(ctx context.Context, op uint16, req message) (message, error) {
	x := h.ext
	switch r := req.(type) {
	case *createOpenReq:
		a, p, cap, err := x.CreateOpen(ctx, r.In, r.Want)
		return &createOpenResp{a, p, cap}, err
	case *nameReq:
		switch op {
		case OpUnlinkAt:
			return attrOut(x.UnlinkAt(ctx, r.Ino, r.Name))
		case OpRmdirAt:
			return attrOut(x.RmdirAt(ctx, r.Ino, r.Name))
		}
	case *inosReq:
		return &emptyMsg{}, x.ReleaseMany(ctx, r.Inos)
	}
	return nil, fmt.Errorf("metarpc: op %d has no handler: %w", op, syscall.ENOSYS)
}

// stackReserve is how much stack growStack makes room for: enough for a
// request's deepest path (a pebble read under a group commit).
const stackReserve = 24 << 10

// growStack grows the goroutine's stack to fit stackReserve more bytes.
// The transport runs every request on a new goroutine, which starts with a
// small stack; a pebble read then grows it step by step, each step copying
// (and adjusting pointers in) an ever deeper stack, which cost about a
// sixth of the metadata server's CPU under a create load. Growing once at
// the top, while the stack is shallow, is one cheap copy.
//
//go:noinline
func growStack() byte {
	var b [stackReserve]byte
	return touch(b[:])
}

//go:noinline
func touch(b []byte) byte { return b[len(b)-1] }
