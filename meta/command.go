package meta

import (
	"encoding/binary"
	"fmt"

	"github.com/weft-fs/weft/layout"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/wire"
)

// Op says what a Command does.
type Op uint8

// Command ops. The numbers are part of the log format: never renumber.
const (
	OpInit           Op = 1  // format an empty store: root directory, counters
	OpCreate         Op = 2  // regular file, fifo, socket, device
	OpMkdir          Op = 3  //
	OpSymlink        Op = 4  //
	OpLink           Op = 5  //
	OpUnlink         Op = 6  //
	OpRmdir          Op = 7  //
	OpRename         Op = 8  //
	OpSetAttr        Op = 9  //
	OpSetXattr       Op = 10 //
	OpRemoveXattr    Op = 11 //
	OpWriteDone      Op = 12 //
	OpSetLayout      Op = 13 //
	OpRegisterTarget Op = 14 //
	OpReclaim        Op = 15 // delete an orphan with no opens, queue its objects
	OpGCDone         Op = 16 // drop removed objects from the GC queue
	OpSessionDrop    Op = 17 // forget the remembered replies of a session that ended
	OpStale          Op = 18 // mark (or, with staleClear, clear) stale slots of a protected file

	// Target lifecycle and rebuild (targetstate.go, rebuild.go; 19..22).
	OpTargetState Op = 19 // set a target's state (TargetID; Flags: the state, targetAuto)
	OpMoveSlot    Op = 20 // a slot's object was rebuilt or moved: point it at its new target

	opMax Op = 21
)

// Quota commands (quota.go): 23..26 are the quotas'.
const (
	OpSetQuota   Op = 23 // set an account's limits (root only)
	OpSetProject Op = 24 // tag inodes (Inos) with a project id (root only)
	OpRecount    Op = 25 // recount every account's usage from the inodes (root only)
	opQuotaMax   Op = 26
)

// Scrub commands (scrub.go): 35 and 40 are the scrub's.
const (
	OpCorrupt  Op = 35 // a slot's object was found corrupt by its storage server: mark it stale (Ino, Gen, Slots, TargetID)
	opScrubMax Op = 36
	OpLost     Op = 40 // a corrupt object nothing can repair: record it (Ino, Gen, Slots, TargetID)
)

// OpDropCopy deletes the copy of a small file's bytes (copies.go): an open
// for writing is about to return.
const OpDropCopy Op = 41

var opNames = [...]string{
	OpInit: "init", OpCreate: "create", OpMkdir: "mkdir", OpSymlink: "symlink", OpLink: "link",
	OpUnlink: "unlink", OpRmdir: "rmdir", OpRename: "rename", OpSetAttr: "setattr",
	OpSetXattr: "setxattr", OpRemoveXattr: "removexattr", OpWriteDone: "writedone",
	OpSetLayout: "setlayout", OpRegisterTarget: "register-target", OpReclaim: "reclaim",
	OpGCDone: "gc-done", OpSessionDrop: "session-drop", OpStale: "stale",
	OpSetQuota: "set-quota", OpSetProject: "set-project", OpRecount: "quota-recount",
	OpSetParam:    "set-param",
	OpTargetState: "target-state", OpMoveSlot: "move-slot",
	OpCorrupt:      "corrupt",
	OpLost:         "lost",
	OpMigrateBegin: "migrate-begin", OpMigrateCommit: "migrate-commit", OpMigrateAbort: "migrate-abort",
	OpMigrateRenew: "migrate-renew",
	OpDropCopy:     "drop-copy",
}

// validOp reports whether o is a known command op.
func validOp(o Op) bool {
	return (o > 0 && o < opMax) || (o >= OpSetQuota && o < opQuotaMax) || o == OpSetParam ||
		(o >= OpCorrupt && o < opScrubMax) || o == OpLost || o == OpDropCopy || (o >= OpMigrateBegin && o < opMigrateMax) ||
		(o >= OpMigrateRenew && o < opMigrateRenMax)
}

func (o Op) String() string {
	if validOp(o) {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// GCObject is one entry of the object-GC queue.
type GCObject struct {
	Target proto.TargetID
	Obj    proto.ObjectID
}

// Command is one deterministic metadata mutation. Everything that is not a
// function of the current state (new inode numbers, the clock, the caller's
// credentials, the ranked placement candidates) is decided by the proposer
// and carried here, so that applying the same command to the same state on
// any replica gives the same result. Fields an op does not use are zero.
type Command struct {
	Op  Op
	Now int64 // proposer's clock, ns since the epoch

	Ino       proto.Ino // the inode acted on, or the number for a new inode
	Gen       uint64    // create of a regular file: its generation (random, never 0)
	Parent    proto.Ino
	Name      string
	NewParent proto.Ino // rename, link
	NewName   string

	Mode, Rdev, Uid, Gid uint32
	Flags                uint32 // rename / xattr flags; create: 1 = exclusive
	Size                 uint64 // writedone end
	Text                 string // symlink target; target uuid; target address in Addr
	Addr                 string
	Value                []byte // xattr value
	SetAttr              proto.SetAttrIn
	Layout               *layout.Layout // explicit layout (create, setlayout)

	// Candidates are the up, non-full targets ranked best first at proposal
	// time. A new file's layout takes its first StripeCount entries. When
	// empty, PlaceErr (EIO: no target up, ENOSPC: all full) is what a
	// placement fails with.
	Candidates []proto.TargetID
	PlaceErr   uint32
	// Domains names the failure domain of each candidate (equal numbers:
	// the same server or domain), so apply places the copies or shards of
	// a stripe in distinct domains. Empty: every candidate is its own.
	Domains []uint32

	// Slots are the objects (layout slots) an OpStale marks or clears.
	Slots []uint32

	TargetID proto.TargetID // register-target: the id the target claims (0 = new)
	Objects  []GCObject     // gc-done
	Inos     []proto.Ino    // reclaim

	// Cred is the caller the command acts for; apply checks permissions
	// against it (see enforce.go). Nil: a trusted caller (the server
	// itself, an in-process caller without credentials): nothing is
	// checked.
	Cred *proto.Cred

	// Session, SessionName and Seq identify the client request the
	// command carries out, for the request dedupe (dedupe.go): the
	// session id and certificate name of the client and the request's
	// sequence number in its session (0: no dedupe). OpSessionDrop
	// forgets the replies of Session and SessionName.
	Session     proto.SessionID
	SessionName string
	Seq         uint64

	// Blocks is a write-done's report of what the file's objects hold
	// (proto.Attr.Blocks); nil: not reported (command version 5).
	Blocks *uint64

	// Quota is what OpSetQuota sets (an account and its limits) and, for
	// OpSetProject, the project id (Quota.ID) (command version 6).
	Quota *QuotaSpec

	// NewGen and Until are an online restripe's (migrate.go; command
	// version 7): the generation of the new objects, and a time bound
	// (unix ns): begin and renew, when its new objects are removed unless
	// committed; commit, when the old objects are removed. A commit or
	// renew also carries in Size the margin (ns) before the new objects'
	// removal within which it is refused (0: migrateCommitMargin, what
	// commits logged before the margin was carried used).
	NewGen uint64
	Until  int64
}

// QuotaSpec names a quota account and its limits (0 = none).
type QuotaSpec struct {
	Kind          uint8
	ID            uint32
	Inodes, Bytes uint64
}

// Command encoding limits: bounds for the decoder, not policy.
const (
	maxCmdString = 64 << 10
	maxCmdValue  = 1 << 20
	maxCmdList   = 1 << 16
	// cmdVersion 2 appended Cred; version 1 commands decode with Cred nil.
	// Version 3 appended Gen and the generation of each of Objects;
	// earlier commands decode with generation 0. Version 4 appended
	// Session, SessionName and Seq; earlier commands decode with Seq 0 (no
	// dedupe). Version 5 holds Layout in layout format 2 (kinds, stale
	// slots) and appends Domains, Slots and Blocks; earlier commands hold
	// format 1 and report no blocks. Version 6 appends Quota. Version 7
	// appends NewGen and Until.
	cmdVersion = 7
)

// Encode returns the command's binary form (the raft log entry format).
func (c *Command) Encode() []byte {
	e := wire.NewEncoder(64 + len(c.Name) + len(c.NewName) + len(c.Text) + len(c.Value))
	e.U8(cmdVersion)
	e.U8(uint8(c.Op))
	e.I64(c.Now)
	e.U64(uint64(c.Ino))
	e.U64(uint64(c.Parent))
	e.String(c.Name)
	e.U64(uint64(c.NewParent))
	e.String(c.NewName)
	e.U32(c.Mode)
	e.U32(c.Rdev)
	e.U32(c.Uid)
	e.U32(c.Gid)
	e.U32(c.Flags)
	e.U64(c.Size)
	e.String(c.Text)
	e.String(c.Addr)
	e.Bytes(c.Value)
	c.SetAttr.Encode(e)
	e.Bool(c.Layout != nil)
	if c.Layout != nil {
		encodeLayoutDisk(e, *c.Layout)
	}
	e.U32(uint32(len(c.Candidates)))
	for _, t := range c.Candidates {
		e.U32(uint32(t))
	}
	e.U32(c.PlaceErr)
	e.U32(uint32(c.TargetID))
	e.U32(uint32(len(c.Objects)))
	for _, o := range c.Objects {
		e.U32(uint32(o.Target))
		e.U64(uint64(o.Obj.Ino))
		e.U32(o.Obj.Stripe)
	}
	e.U32(uint32(len(c.Inos)))
	for _, i := range c.Inos {
		e.U64(uint64(i))
	}
	e.Bool(c.Cred != nil)
	if c.Cred != nil {
		e.U32(c.Cred.Uid)
		e.U32(c.Cred.Gid)
		e.U32(uint32(len(c.Cred.Groups)))
		for _, g := range c.Cred.Groups {
			e.U32(g)
		}
	}
	e.U64(c.Gen)
	for _, o := range c.Objects {
		e.U64(o.Obj.Gen)
	}
	e.U64(binary.LittleEndian.Uint64(c.Session[:8]))
	e.U64(binary.LittleEndian.Uint64(c.Session[8:]))
	e.String(c.SessionName)
	e.U64(c.Seq)
	e.U32(uint32(len(c.Domains)))
	for _, d := range c.Domains {
		e.U32(d)
	}
	e.U32(uint32(len(c.Slots)))
	for _, s := range c.Slots {
		e.U32(s)
	}
	e.Bool(c.Blocks != nil)
	if c.Blocks != nil {
		e.U64(*c.Blocks)
	}
	e.Bool(c.Quota != nil)
	if q := c.Quota; q != nil {
		e.U8(q.Kind)
		e.U32(q.ID)
		e.U64(q.Inodes)
		e.U64(q.Bytes)
	}
	e.U64(c.NewGen)
	e.I64(c.Until)
	return e.B
}

// DecodeCommand parses a command written by Encode. It never panics; any
// malformed input is an error.
func DecodeCommand(b []byte) (*Command, error) {
	d := wire.NewDecoder(b)
	v := d.U8()
	if d.Err() == nil && (v < 1 || v > cmdVersion) {
		return nil, fmt.Errorf("meta: command version %d not supported", v)
	}
	c := &Command{}
	c.Op = Op(d.U8())
	c.Now = d.I64()
	c.Ino = proto.Ino(d.U64())
	c.Parent = proto.Ino(d.U64())
	c.Name = d.StringMax(maxCmdString)
	c.NewParent = proto.Ino(d.U64())
	c.NewName = d.StringMax(maxCmdString)
	c.Mode = d.U32()
	c.Rdev = d.U32()
	c.Uid = d.U32()
	c.Gid = d.U32()
	c.Flags = d.U32()
	c.Size = d.U64()
	c.Text = d.StringMax(maxCmdString)
	c.Addr = d.StringMax(maxCmdString)
	if v := d.BytesMax(maxCmdValue); len(v) > 0 {
		c.Value = append([]byte(nil), v...)
	}
	c.SetAttr.Decode(d)
	if d.Bool() {
		lf := diskLayoutFormat
		if v < 5 {
			lf = 1
		}
		l := layoutDecoder(lf)(d)
		c.Layout = &l
	}
	if n := d.Count(maxCmdList, 4); n > 0 {
		c.Candidates = make([]proto.TargetID, n)
		for i := range c.Candidates {
			c.Candidates[i] = proto.TargetID(d.U32())
		}
	}
	c.PlaceErr = d.U32()
	c.TargetID = proto.TargetID(d.U32())
	if n := d.Count(maxCmdList, 16); n > 0 {
		c.Objects = make([]GCObject, n)
		for i := range c.Objects {
			c.Objects[i].Target = proto.TargetID(d.U32())
			c.Objects[i].Obj.Ino = proto.Ino(d.U64())
			c.Objects[i].Obj.Stripe = d.U32()
		}
	}
	if n := d.Count(maxCmdList, 8); n > 0 {
		c.Inos = make([]proto.Ino, n)
		for i := range c.Inos {
			c.Inos[i] = proto.Ino(d.U64())
		}
	}
	if v >= 2 && d.Bool() {
		cr := &proto.Cred{Uid: d.U32(), Gid: d.U32()}
		if n := d.Count(proto.MaxGroups, 4); n > 0 {
			cr.Groups = make([]uint32, n)
			for i := range cr.Groups {
				cr.Groups[i] = d.U32()
			}
		}
		c.Cred = cr
	}
	if v >= 3 {
		c.Gen = d.U64()
		for i := range c.Objects {
			c.Objects[i].Obj.Gen = d.U64()
		}
	}
	if v >= 4 {
		binary.LittleEndian.PutUint64(c.Session[:8], d.U64())
		binary.LittleEndian.PutUint64(c.Session[8:], d.U64())
		c.SessionName = d.StringMax(maxCmdString)
		c.Seq = d.U64()
	}
	if v >= 5 {
		if n := d.Count(maxCmdList, 4); n > 0 {
			c.Domains = make([]uint32, n)
			for i := range c.Domains {
				c.Domains[i] = d.U32()
			}
		}
		if n := d.Count(maxCmdList, 4); n > 0 {
			c.Slots = make([]uint32, n)
			for i := range c.Slots {
				c.Slots[i] = d.U32()
			}
		}
		if d.Bool() {
			b := d.U64()
			c.Blocks = &b
		}
	}
	if v >= 6 && d.Bool() {
		c.Quota = &QuotaSpec{Kind: d.U8(), ID: d.U32(), Inodes: d.U64(), Bytes: d.U64()}
	}
	if v >= 7 {
		c.NewGen = d.U64()
		c.Until = d.I64()
	}
	if err := d.Done(); err != nil {
		return nil, fmt.Errorf("meta: decode command: %w", err)
	}
	if !validOp(c.Op) {
		return nil, fmt.Errorf("meta: decode command: unknown op %d", c.Op)
	}
	return c, nil
}

// Command ops of run-time parameters (27..28, a block of their own).
const (
	// OpSetParam stores parameter Name = Text (meta/params.go; --persist).
	OpSetParam Op = 27
)

// Command ops of the online restripe (migrate.go; 30..32, a block of their
// own).
const (
	OpMigrateBegin  Op = 30 // place a new layout for a file, its objects named by NewGen
	OpMigrateCommit Op = 31 // swap a file's layout and generation for the new ones
	OpMigrateAbort  Op = 32 // drop a restripe: its new objects are removed at once
	opMigrateMax    Op = 33
)

// Command ops of a restripe's renewal (migrate.go; 36..37, a block of
// their own).
const (
	OpMigrateRenew  Op = 36 // a restripe's new objects are kept until a later time
	opMigrateRenMax Op = 37
)
