package metarpc

import (
	"fmt"
	"syscall"
	"time"

	"github.com/weft-fs/weft/layout"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/wire"
)

// Op codes of the metadata RPCs (1..99). They are part of the wire
// protocol: never renumber.
const (
	OpLookup         uint16 = 1
	OpGetAttr        uint16 = 2
	OpSetAttr        uint16 = 3
	OpCreate         uint16 = 4
	OpMkdir          uint16 = 5
	OpSymlink        uint16 = 6
	OpReadlink       uint16 = 7
	OpLink           uint16 = 8
	OpUnlink         uint16 = 9
	OpRmdir          uint16 = 10
	OpRename         uint16 = 11
	OpReadDir        uint16 = 12
	OpGetXattr       uint16 = 13
	OpSetXattr       uint16 = 14
	OpListXattr      uint16 = 15
	OpRemoveXattr    uint16 = 16
	OpOpen           uint16 = 36 // was 17 before it took an access mode and returned a capability
	OpWriteDone      uint16 = 18
	OpRelease        uint16 = 19
	OpSetLayout      uint16 = 20
	OpStatFS         uint16 = 21
	OpTargets        uint16 = 22
	OpRegisterTarget uint16 = 30

	// Combined operations (Extended): fewer round trips per file.
	OpCreateOpen  uint16 = 37 // was 31 before it took an access mode and returned a capability
	OpUnlinkAt    uint16 = 32
	OpRmdirAt     uint16 = 33
	OpReleaseMany uint16 = 34

	// OpCapability returns a capability for an inode (renewal, truncate by
	// path); part of proto.MetaService.
	OpCapability uint16 = 35

	// Sessions (SessionService): a client registers a session with a
	// lease, renews it, and ends it; open handles belong to it.
	OpSessionOpen  uint16 = 38
	OpSessionRenew uint16 = 39
	OpSessionClose uint16 = 40

	// Locks and atomic append (proto.LockService): 50..59 belong to them.
	OpLock     uint16 = 50 // take, change, release or test a lock
	OpLockWait uint16 = 51 // wait (bounded) until a lock would not conflict
	OpAppend   uint16 = 52 // reserve bytes at the end of a file (O_APPEND)
	// OpAppendReclaim tells a restarted server how far a client's append
	// reservations reached.
	OpAppendReclaim uint16 = 53
	// Data protection (issue 9; ops 70..79). OpFSID returns the file
	// system id, which storage targets record in target.json at their
	// first registration and check at every start.
	OpFSID uint16 = 70
	// OpMarkStale and OpClearStale (proto.StaleMarker) mark and clear
	// objects of a protected file that missed writes.
	OpMarkStale  uint16 = 71
	OpClearStale uint16 = 72
	// OpGroup asks any member of a replicated metadata group what it
	// knows of the group: its members' addresses and the leader
	// (GroupService). Clients ask it when a member answers EAGAIN (not
	// the leader) to learn where the leader is. 41..44 are reserved for
	// the replicated group's client operations.
	OpGroup uint16 = 41

	// Retired op codes, never to be reused: 17 (Open) and 31 (CreateOpen)
	// before capabilities changed their bodies. They are answered ENOSYS,
	// so a client and a server of different versions fail plainly (the
	// client falls back to Create and Open, which fail the same way).
)

// Decoder bounds (shape only; the server enforces the real limits).
const (
	maxList   = 1 << 20
	maxValue  = 1 << 20 // an xattr value (the server allows 64 KiB)
	attrBytes = 8 + 5*4 + 8 + 3*8 + 8 + 4 + 4 + 8 + 8
	maxCap    = 1024 // a capability (version 1 is at most 315 bytes)
)

// message is a request or response body.
type message interface {
	encode(e *wire.Encoder)
	decode(d *wire.Decoder)
}

func marshal(m message) []byte {
	n := 64
	if s, ok := m.(sized); ok {
		n = s.sizeHint()
	}
	e := wire.NewEncoder(n)
	m.encode(e)
	return e.B
}

// sized is a message that may be long (small files' copies), and says
// about how long, so that marshal allocates its buffer once instead of
// doubling it from 64 bytes.
type sized interface{ sizeHint() int }

// attrSizeHint is about the most an encoded proto.Attr takes, its layout
// listing a few targets.
const attrSizeHint = 256

// unmarshal decodes b into m; it never panics and rejects trailing bytes.
func unmarshal(b []byte, m message) error {
	d := wire.NewDecoder(b)
	m.decode(d)
	if err := d.Done(); err != nil {
		return fmt.Errorf("metarpc: decode %T: %w", m, err)
	}
	return nil
}

// --- requests ---

type inoReq struct{ Ino proto.Ino } // getattr, readlink, listxattr, release

func (m *inoReq) encode(e *wire.Encoder) { e.U64(uint64(m.Ino)) }
func (m *inoReq) decode(d *wire.Decoder) { m.Ino = proto.Ino(d.U64()) }

type nameReq struct { // lookup, unlink, rmdir, getxattr, removexattr
	Ino  proto.Ino
	Name string
}

func (m *nameReq) encode(e *wire.Encoder) { e.U64(uint64(m.Ino)); e.String(m.Name) }
func (m *nameReq) decode(d *wire.Decoder) { m.Ino = proto.Ino(d.U64()); m.Name = d.String() }

type setAttrReq struct {
	Ino proto.Ino
	In  proto.SetAttrIn
}

func (m *setAttrReq) encode(e *wire.Encoder) {
	e.U64(uint64(m.Ino))
	m.In.Encode(e)
}

func (m *setAttrReq) decode(d *wire.Decoder) {
	m.Ino = proto.Ino(d.U64())
	m.In.Decode(d)
}

type createReq struct{ In proto.CreateIn }

func (m *createReq) encode(e *wire.Encoder) {
	in := &m.In
	e.U64(uint64(in.Parent))
	e.String(in.Name)
	e.U32(in.Mode)
	e.U32(in.Rdev)
	e.U32(in.Uid)
	e.U32(in.Gid)
	e.Bool(in.Exclusive)
	e.Bool(in.Layout != nil)
	if in.Layout != nil {
		proto.EncodeLayout(e, *in.Layout)
	}
}

func (m *createReq) decode(d *wire.Decoder) {
	in := &m.In
	in.Parent = proto.Ino(d.U64())
	in.Name = d.String()
	in.Mode = d.U32()
	in.Rdev = d.U32()
	in.Uid = d.U32()
	in.Gid = d.U32()
	in.Exclusive = d.Bool()
	if d.Bool() {
		l := proto.DecodeLayout(d)
		in.Layout = &l
	}
}

// createOpenReq: Want 0 creates without opening.
type createOpenReq struct {
	createReq
	Want proto.Access
}

func (m *createOpenReq) encode(e *wire.Encoder) { m.createReq.encode(e); e.U8(uint8(m.Want)) }
func (m *createOpenReq) decode(d *wire.Decoder) { m.createReq.decode(d); m.Want = proto.Access(d.U8()) }

// openReq asks to open (or for a capability of) an inode with an access
// mode (proto.Access).
type openReq struct {
	Ino  proto.Ino
	Want proto.Access
}

func (m *openReq) encode(e *wire.Encoder) { e.U64(uint64(m.Ino)); e.U8(uint8(m.Want)) }
func (m *openReq) decode(d *wire.Decoder) { m.Ino = proto.Ino(d.U64()); m.Want = proto.Access(d.U8()) }

type inosReq struct{ Inos []proto.Ino } // release many

func (m *inosReq) encode(e *wire.Encoder) {
	e.U32(uint32(len(m.Inos)))
	for _, i := range m.Inos {
		e.U64(uint64(i))
	}
}

func (m *inosReq) decode(d *wire.Decoder) {
	n := d.Count(maxList, 8)
	m.Inos = make([]proto.Ino, n)
	for i := range m.Inos {
		m.Inos[i] = proto.Ino(d.U64())
	}
}

type mkdirReq struct {
	Parent         proto.Ino
	Name           string
	Mode, Uid, Gid uint32
}

func (m *mkdirReq) encode(e *wire.Encoder) {
	e.U64(uint64(m.Parent))
	e.String(m.Name)
	e.U32(m.Mode)
	e.U32(m.Uid)
	e.U32(m.Gid)
}

func (m *mkdirReq) decode(d *wire.Decoder) {
	m.Parent = proto.Ino(d.U64())
	m.Name = d.String()
	m.Mode = d.U32()
	m.Uid = d.U32()
	m.Gid = d.U32()
}

type symlinkReq struct {
	Parent       proto.Ino
	Name, Target string
	Uid, Gid     uint32
}

func (m *symlinkReq) encode(e *wire.Encoder) {
	e.U64(uint64(m.Parent))
	e.String(m.Name)
	e.String(m.Target)
	e.U32(m.Uid)
	e.U32(m.Gid)
}

func (m *symlinkReq) decode(d *wire.Decoder) {
	m.Parent = proto.Ino(d.U64())
	m.Name = d.String()
	m.Target = d.String()
	m.Uid = d.U32()
	m.Gid = d.U32()
}

type linkReq struct {
	Ino, NewParent proto.Ino
	NewName        string
}

func (m *linkReq) encode(e *wire.Encoder) {
	e.U64(uint64(m.Ino))
	e.U64(uint64(m.NewParent))
	e.String(m.NewName)
}

func (m *linkReq) decode(d *wire.Decoder) {
	m.Ino = proto.Ino(d.U64())
	m.NewParent = proto.Ino(d.U64())
	m.NewName = d.String()
}

type renameReq struct {
	OldParent proto.Ino
	OldName   string
	NewParent proto.Ino
	NewName   string
	Flags     uint32
}

func (m *renameReq) encode(e *wire.Encoder) {
	e.U64(uint64(m.OldParent))
	e.String(m.OldName)
	e.U64(uint64(m.NewParent))
	e.String(m.NewName)
	e.U32(m.Flags)
}

func (m *renameReq) decode(d *wire.Decoder) {
	m.OldParent = proto.Ino(d.U64())
	m.OldName = d.String()
	m.NewParent = proto.Ino(d.U64())
	m.NewName = d.String()
	m.Flags = d.U32()
}

type readDirReq struct {
	Dir   proto.Ino
	After string
	Max   uint32
}

func (m *readDirReq) encode(e *wire.Encoder) {
	e.U64(uint64(m.Dir))
	e.String(m.After)
	e.U32(m.Max)
}

func (m *readDirReq) decode(d *wire.Decoder) {
	m.Dir = proto.Ino(d.U64())
	m.After = d.String()
	m.Max = d.U32()
}

type setXattrReq struct {
	Ino   proto.Ino
	Name  string
	Value []byte
	Flags uint32
}

func (m *setXattrReq) encode(e *wire.Encoder) {
	e.U64(uint64(m.Ino))
	e.String(m.Name)
	e.Bytes(m.Value)
	e.U32(m.Flags)
}

func (m *setXattrReq) decode(d *wire.Decoder) {
	m.Ino = proto.Ino(d.U64())
	m.Name = d.String()
	m.Value = d.BytesMax(maxValue)
	m.Flags = d.U32()
}

// writeDoneReq is u64 ino, u64 end, then an optional extension: u8
// version, then i64 mtime (the time of the last write, the writer's
// clock) and, since version 2, u64 blocks (proto.NoBlocks: not reported).
// A request without the extension (from a client before it) has mtime 0,
// the server's clock; one of version 1 reports no blocks.
type writeDoneReq struct {
	Ino    proto.Ino
	End    uint64
	Mtime  int64
	Blocks uint64
}

const writeDoneVersion = 2

func (m *writeDoneReq) encode(e *wire.Encoder) {
	e.U64(uint64(m.Ino))
	e.U64(m.End)
	e.U8(writeDoneVersion)
	e.I64(m.Mtime)
	e.U64(m.Blocks)
}

func (m *writeDoneReq) decode(d *wire.Decoder) {
	m.Ino = proto.Ino(d.U64())
	m.End = d.U64()
	m.Blocks = proto.NoBlocks
	if d.Err() != nil || len(d.Remaining()) == 0 {
		return
	}
	v := d.U8()
	if v < 1 || v > writeDoneVersion {
		d.Fail(fmt.Errorf("metarpc: writedone extension version %d not supported", v))
		return
	}
	m.Mtime = d.I64()
	if v >= 2 {
		m.Blocks = d.U64()
	}
}

type setLayoutReq struct {
	Ino    proto.Ino
	Layout layout.Layout
}

func (m *setLayoutReq) encode(e *wire.Encoder) { e.U64(uint64(m.Ino)); proto.EncodeLayout(e, m.Layout) }
func (m *setLayoutReq) decode(d *wire.Decoder) {
	m.Ino = proto.Ino(d.U64())
	m.Layout = proto.DecodeLayout(d)
}

// staleReq names objects (layout slots) of one generation of a file.
type staleReq struct {
	Ino   proto.Ino
	Gen   uint64
	Slots []uint32
	Mtime int64 // OpClearStale: the file's mtime before the repair
}

func (m *staleReq) encode(e *wire.Encoder) {
	e.U64(uint64(m.Ino))
	e.U64(m.Gen)
	e.I64(m.Mtime)
	e.U32(uint32(len(m.Slots)))
	for _, s := range m.Slots {
		e.U32(s)
	}
}

func (m *staleReq) decode(d *wire.Decoder) {
	m.Ino = proto.Ino(d.U64())
	m.Gen = d.U64()
	m.Mtime = d.I64()
	if n := d.Count(layout.MaxStripeCount, 4); n > 0 {
		m.Slots = make([]uint32, n)
		for i := range m.Slots {
			m.Slots[i] = d.U32()
		}
	}
}

type registerReq struct {
	UUID string
	Info proto.TargetInfo
}

// registerReq carries, after the target, the file system id the target
// was formatted for ("" before its first registration).
func (m *registerReq) encode(e *wire.Encoder) {
	e.String(m.UUID)
	encodeTarget(e, &m.Info)
	e.String(m.Info.FSID)
}

func (m *registerReq) decode(d *wire.Decoder) {
	m.UUID = d.String()
	decodeTarget(d, &m.Info)
	m.Info.FSID = d.String()
}

func encodeTarget(e *wire.Encoder, t *proto.TargetInfo) {
	e.U32(uint32(t.ID))
	e.String(t.Addr)
	e.U64(t.Total)
	e.U64(t.Used)
	e.U64(t.Free)
	e.Bool(t.Up)
	e.U64(t.Objects)
	e.U64(t.FilesFree)
	e.String(t.Device)
	e.U64(t.IO.Reads)
	e.U64(t.IO.ReadBytes)
	e.U64(t.IO.Writes)
	e.U64(t.IO.WriteBytes)
	e.String(t.Domain)
}

func decodeTarget(d *wire.Decoder, t *proto.TargetInfo) {
	t.ID = proto.TargetID(d.U32())
	t.Addr = d.String()
	t.Total = d.U64()
	t.Used = d.U64()
	t.Free = d.U64()
	t.Up = d.Bool()
	t.Objects = d.U64()
	t.FilesFree = d.U64()
	t.Device = d.StringMax(maxDevice)
	t.IO = proto.IOCounters{Reads: d.U64(), ReadBytes: d.U64(), Writes: d.U64(), WriteBytes: d.U64()}
	t.Domain = d.StringMax(256)
}

// maxDevice bounds a target's Device name.
const maxDevice = 256

// sessionOpenReq names the handles a client re-registers with a session
// the server forgot (none for a new session).
// Version is the client's (version.String()), for `weft status`.
type sessionOpenReq struct {
	Handles []proto.OpenHandle
	Version string
}

func (m *sessionOpenReq) encode(e *wire.Encoder) {
	e.U32(uint32(len(m.Handles)))
	for _, h := range m.Handles {
		e.U64(uint64(h.Ino))
		e.U32(h.Count)
		e.Bool(h.Write)
	}
	e.String(m.Version)
}

func (m *sessionOpenReq) decode(d *wire.Decoder) {
	if n := d.Count(maxList, 13); n > 0 {
		m.Handles = make([]proto.OpenHandle, n)
		for i := range m.Handles {
			m.Handles[i] = proto.OpenHandle{Ino: proto.Ino(d.U64()), Count: d.U32(), Write: d.Bool()}
		}
	}
	m.Version = d.StringMax(256)
}

// lockReq is a lock request: the inode, the lock, and what to do with it
// (proto.LockMode: set, test for a conflict, reclaim after a restart).
type lockReq struct {
	Ino  proto.Ino
	Lock proto.Lock
	Mode proto.LockMode
}

func (m *lockReq) encode(e *wire.Encoder) {
	e.U64(uint64(m.Ino))
	encodeLock(e, &m.Lock)
	e.U8(uint8(m.Mode))
}

func (m *lockReq) decode(d *wire.Decoder) {
	m.Ino = proto.Ino(d.U64())
	decodeLock(d, &m.Lock)
	m.Mode = proto.LockMode(d.U8())
}

func encodeLock(e *wire.Encoder, l *proto.Lock) {
	e.U64(l.Owner)
	e.Bool(l.Flock)
	e.U8(uint8(l.Type))
	e.U64(l.Start)
	e.U64(l.End)
	e.U32(l.Pid)
}

func decodeLock(d *wire.Decoder, l *proto.Lock) {
	l.Owner = d.U64()
	l.Flock = d.Bool()
	l.Type = proto.LockType(d.U8())
	l.Start = d.U64()
	l.End = d.U64()
	l.Pid = d.U32()
}

// lockResp is the conflicting lock a test found (Type LockUnlock: none).
type lockResp struct{ Lock proto.Lock }

func (m *lockResp) encode(e *wire.Encoder) { encodeLock(e, &m.Lock) }
func (m *lockResp) decode(d *wire.Decoder) { decodeLock(d, &m.Lock) }

// appendReq reserves N bytes at the end of file Ino.
type appendReq struct {
	Ino proto.Ino
	N   uint64
}

func (m *appendReq) encode(e *wire.Encoder) { e.U64(uint64(m.Ino)); e.U64(m.N) }
func (m *appendReq) decode(d *wire.Decoder) { m.Ino = proto.Ino(d.U64()); m.N = d.U64() }

// appendReclaimReq names how far the caller's reservations on Ino reached.
type appendReclaimReq struct {
	Ino proto.Ino
	End uint64
}

func (m *appendReclaimReq) encode(e *wire.Encoder) { e.U64(uint64(m.Ino)); e.U64(m.End) }
func (m *appendReclaimReq) decode(d *wire.Decoder) {
	m.Ino = proto.Ino(d.U64())
	m.End = d.U64()
}

// leaseResp is a session's lease, in nanoseconds.
type leaseResp struct{ Lease time.Duration }

func (m *leaseResp) encode(e *wire.Encoder) { e.I64(int64(m.Lease)) }
func (m *leaseResp) decode(d *wire.Decoder) { m.Lease = time.Duration(d.I64()) }

type emptyMsg struct{} // statfs, targets requests; responses without a body

func (*emptyMsg) encode(*wire.Encoder) {}
func (*emptyMsg) decode(*wire.Decoder) {}

// --- responses ---

type attrResp struct{ Attr proto.Attr }

func (m *attrResp) encode(e *wire.Encoder) { m.Attr.Encode(e) }
func (m *attrResp) decode(d *wire.Decoder) { m.Attr.Decode(d) }

// capResp is a capability (package capability; opaque here). Empty: none.
type capResp struct{ Cap []byte }

func (m *capResp) encode(e *wire.Encoder) { e.Bytes(m.Cap) }
func (m *capResp) decode(d *wire.Decoder) { m.Cap = decodeCap(d) }

func decodeCap(d *wire.Decoder) []byte {
	if b := d.BytesMax(maxCap); len(b) > 0 {
		return append([]byte(nil), b...)
	}
	return nil
}

// openResp is an opened file's attributes and capability.
type openResp struct {
	Attr proto.Attr
	Cap  []byte
}

func (m *openResp) encode(e *wire.Encoder) { m.Attr.Encode(e); e.Bytes(m.Cap) }
func (m *openResp) decode(d *wire.Decoder) { m.Attr.Decode(d); m.Cap = decodeCap(d) }

// createOpenResp is the created (or opened) entry's attributes, its parent
// directory's, and the capability if it was opened.
type createOpenResp struct {
	Attr, Parent proto.Attr
	Cap          []byte
}

func (m *createOpenResp) encode(e *wire.Encoder) {
	m.Attr.Encode(e)
	m.Parent.Encode(e)
	e.Bytes(m.Cap)
}
func (m *createOpenResp) decode(d *wire.Decoder) {
	m.Attr.Decode(d)
	m.Parent.Decode(d)
	m.Cap = decodeCap(d)
}

type stringResp struct{ S string }

func (m *stringResp) encode(e *wire.Encoder) { e.String(m.S) }
func (m *stringResp) decode(d *wire.Decoder) { m.S = d.String() }

type bytesResp struct{ B []byte }

func (m *bytesResp) encode(e *wire.Encoder) { e.Bytes(m.B) }
func (m *bytesResp) decode(d *wire.Decoder) { m.B = append([]byte{}, d.BytesMax(maxValue)...) }

type dirResp struct{ Entries []proto.DirEntry }

func (m *dirResp) encode(e *wire.Encoder) {
	e.U32(uint32(len(m.Entries)))
	for i := range m.Entries {
		e.String(m.Entries[i].Name)
		m.Entries[i].Attr.Encode(e)
	}
}

func (m *dirResp) decode(d *wire.Decoder) {
	n := d.Count(maxList, 4+attrBytes)
	m.Entries = make([]proto.DirEntry, n)
	for i := range m.Entries {
		m.Entries[i].Name = d.String()
		m.Entries[i].Attr.Decode(d)
	}
}

type stringsResp struct{ S []string }

func (m *stringsResp) encode(e *wire.Encoder) {
	e.U32(uint32(len(m.S)))
	for _, s := range m.S {
		e.String(s)
	}
}

func (m *stringsResp) decode(d *wire.Decoder) {
	n := d.Count(maxList, 4)
	m.S = make([]string, n)
	for i := range m.S {
		m.S[i] = d.String()
	}
}

type statfsResp struct{ S proto.StatFS }

func (m *statfsResp) encode(e *wire.Encoder) {
	e.U64(m.S.Total)
	e.U64(m.S.Used)
	e.U64(m.S.Free)
	e.U64(m.S.Files)
	e.U64(m.S.FilesFree)
}

func (m *statfsResp) decode(d *wire.Decoder) {
	m.S.Total = d.U64()
	m.S.Used = d.U64()
	m.S.Free = d.U64()
	m.S.Files = d.U64()
	m.S.FilesFree = d.U64()
}

type targetsResp struct{ T []proto.TargetInfo }

func (m *targetsResp) encode(e *wire.Encoder) {
	e.U32(uint32(len(m.T)))
	for i := range m.T {
		encodeTarget(e, &m.T[i])
	}
}

func (m *targetsResp) decode(d *wire.Decoder) {
	n := d.Count(maxList, 4+4+3*8+1+2*8+4+4*8+4)
	m.T = make([]proto.TargetInfo, n)
	for i := range m.T {
		decodeTarget(d, &m.T[i])
	}
}

type targetIDResp struct{ ID proto.TargetID }

func (m *targetIDResp) encode(e *wire.Encoder) { e.U32(uint32(m.ID)) }
func (m *targetIDResp) decode(d *wire.Decoder) { m.ID = proto.TargetID(d.U32()) }

// messages returns fresh request and response values for op, or false for
// an unknown op. It is the single table the handler, the client tests and
// the fuzz test agree on.
func messages(op uint16) (req, resp message, ok bool) {
	switch op {
	case OpLookup:
		return &nameReq{}, &attrResp{}, true
	case OpGetAttr:
		return &inoReq{}, &attrResp{}, true
	case OpOpen:
		return &openReq{}, &openResp{}, true
	case OpCapability:
		return &openReq{}, &capResp{}, true
	case OpSetAttr:
		return &setAttrReq{}, &attrResp{}, true
	case OpCreate:
		return &createReq{}, &attrResp{}, true
	case OpMkdir:
		return &mkdirReq{}, &attrResp{}, true
	case OpSymlink:
		return &symlinkReq{}, &attrResp{}, true
	case OpReadlink:
		return &inoReq{}, &stringResp{}, true
	case OpLink:
		return &linkReq{}, &attrResp{}, true
	case OpUnlink, OpRmdir, OpRemoveXattr:
		return &nameReq{}, &emptyMsg{}, true
	case OpRename:
		return &renameReq{}, &emptyMsg{}, true
	case OpReadDir:
		return &readDirReq{}, &dirResp{}, true
	case OpGetXattr:
		return &nameReq{}, &bytesResp{}, true
	case OpSetXattr:
		return &setXattrReq{}, &emptyMsg{}, true
	case OpListXattr:
		return &inoReq{}, &stringsResp{}, true
	case OpRelease:
		return &inoReq{}, &emptyMsg{}, true
	case OpWriteDone:
		return &writeDoneReq{}, &attrResp{}, true
	case OpSetLayout:
		return &setLayoutReq{}, &attrResp{}, true
	case OpStatFS:
		return &emptyMsg{}, &statfsResp{}, true
	case OpTargets:
		return &emptyMsg{}, &targetsResp{}, true
	case OpRegisterTarget:
		return &registerReq{}, &targetIDResp{}, true
	case OpFSID:
		return &emptyMsg{}, &stringResp{}, true
	case OpMarkStale, OpClearStale:
		return &staleReq{}, &attrResp{}, true
	case OpCreateOpen:
		return &createOpenReq{}, &createOpenResp{}, true
	case OpUnlinkAt, OpRmdirAt:
		return &nameReq{}, &attrResp{}, true
	case OpReleaseMany:
		return &inosReq{}, &emptyMsg{}, true
	case OpSessionOpen:
		return &sessionOpenReq{}, &leaseResp{}, true
	case OpSessionRenew:
		return &emptyMsg{}, &leaseResp{}, true
	case OpSessionClose:
		return &emptyMsg{}, &emptyMsg{}, true
	case OpStatus:
		return &emptyMsg{}, &statusResp{}, true
	case OpMemberStatus:
		return &emptyMsg{}, &memberStatusResp{}, true
	case OpFind:
		return &findReq{}, &findResp{}, true
	case OpLock:
		return &lockReq{}, &lockResp{}, true
	case OpLockWait:
		return &lockReq{}, &emptyMsg{}, true
	case OpAppend:
		return &appendReq{}, &attrResp{}, true
	case OpAppendReclaim:
		return &appendReclaimReq{}, &emptyMsg{}, true
	case OpMembers:
		return &emptyMsg{}, &membersResp{}, true
	case OpMemberAdd, OpMemberRemove:
		return &memberReq{}, &emptyMsg{}, true
	case OpGroup:
		return &emptyMsg{}, &groupResp{}, true
	case OpSetQuota:
		return &quotaReq{}, &emptyMsg{}, true
	case OpGetQuota:
		return &quotaReq{}, &quotaResp{}, true
	case OpSetProject:
		return &projectReq{}, &countResp{}, true
	case OpCheckQuota:
		return &checkReq{}, &quotaCheckResp{}, true
	case OpJobStats:
		return &jobStatsReq{}, &jobStatsResp{}, true
	case OpParams:
		return &emptyMsg{}, &paramsResp{}, true
	case OpParamSet:
		return &paramSetReq{}, &emptyMsg{}, true
	}
	return nil, nil, false
}

// request returns an empty request message for op (what messages
// returns, without allocating the response).
func request(op uint16) (message, bool) {
	switch op {
	case OpLookup, OpUnlinkAt, OpRmdirAt:
		return &nameReq{}, true
	case OpGetAttr:
		return &inoReq{}, true
	case OpCreateOpen:
		return &createOpenReq{}, true
	}
	req, _, ok := messages(op)
	if !ok {
		req, _, ok = targetMessages(op)
	}
	if !ok {
		req, _, ok = scrubMessages(op)
	}
	if !ok {
		req, _, ok = migrateMessages(op)
	}
	if !ok {
		req, _, ok = leaseMessages(op)
	}
	if !ok {
		req, _, ok = copiesMessages(op)
	}
	return req, ok
}

func errIO(err error) error { return fmt.Errorf("%w: %w", err, syscall.EIO) }

// groupVersion is the format of an OpGroup answer:
//
//	u8      version
//	string  fsid ("" before the file system is formatted)
//	u64     the answering member's id (0: a single server)
//	u64     the leader's id (0: none known)
//	string  the leader's address ("" if not known)
//	u64     the raft term
//	u32     n, then n × (u64 id, string address)
const groupVersion = 1

// maxGroupMembers bounds the members an answer may list (raft groups are 3 or
// 5; the bound is the decoder's, not policy).
const maxGroupMembers = 64

type groupResp struct{ M Membership }

func (m *groupResp) encode(e *wire.Encoder) {
	e.U8(groupVersion)
	e.String(m.M.FSID)
	e.U64(m.M.ID)
	e.U64(m.M.Leader)
	e.String(m.M.LeaderAddr)
	e.U64(m.M.Term)
	e.U32(uint32(len(m.M.Members)))
	for _, x := range m.M.Members {
		e.U64(x.ID)
		e.String(x.Addr)
	}
}

func (m *groupResp) decode(d *wire.Decoder) {
	if v := d.U8(); d.Err() == nil && v != groupVersion {
		d.Fail(fmt.Errorf("metarpc: group answer of version %d, want %d", v, groupVersion))
		return
	}
	m.M.FSID = d.StringMax(256)
	m.M.ID = d.U64()
	m.M.Leader = d.U64()
	m.M.LeaderAddr = d.StringMax(1024)
	m.M.Term = d.U64()
	n := d.Count(maxGroupMembers, 12)
	for i := 0; i < n && d.Err() == nil; i++ {
		m.M.Members = append(m.M.Members, GroupMember{ID: d.U64(), Addr: d.StringMax(1024)})
	}
}
