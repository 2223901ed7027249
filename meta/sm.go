package meta

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/weft-fs/weft/layout"
	"github.com/weft-fs/weft/meta/store"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/wire"
)

// Limits the state machine enforces.
const (
	MaxNameLen    = 255
	MaxSymlinkLen = 4095
	MaxLinks      = 65000
	MaxXattrName  = 255
	MaxXattrValue = 64 << 10
	// formatVersion 2: the store has an fsid, the applied counter, and
	// inodes with generations; a version 1 store is upgraded at open (it
	// adopts an fsid; its inodes keep generation 0).
	formatVersion   = 2
	initAdoptFSID   = 1 // Command.Flags bit of OpInit: only give a formatted store its fsid
	createExclusive = 1 // Command.Flags bit of OpCreate
	// registerTrusted is the Command.Flags bit of OpRegisterTarget for an
	// in-process registrant: it may register any uuid and does not change
	// its owner. Otherwise Command.Name is the registrant's certificate
	// name, which must be the uuid's owner (if it has one).
	registerTrusted = 1
	// setAttrViaHandle (OpSetAttr) and writeViaHandle (OpWriteDone): the
	// proposer found an open handle of the caller's session on the inode,
	// which stands in for write permission (ftruncate, O_TRUNC, writes
	// through a handle opened when writing was permitted).
	setAttrViaHandle = 1
	writeViaHandle   = 1
)

// stateMachine applies commands to the store. It is driven by one goroutine
// (the applier); its in-memory fields are a cache of counters and registry
// records that are also in the store, so a replica that opens the same store
// has the same state machine.
type stateMachine struct {
	st         store.Store
	nextIno    uint64 // every stored inode number is below this
	inodes     uint64
	nextTarget uint32
	// applied is the log index recorded by the last batch written: every
	// batch records the index of the command it applies (applyAt), so the
	// store says how far into the log its state is (counter applied). On a
	// single server the log holds only commands that wrote (localLog), so
	// applied counts the batches committed, as the durable mark
	// (store.Mark) expects; on a replica it is the raft index.
	applied uint64
	fsid    string // the file system's uuid ("" before format)
	// newestSeq is, per session seen since this state machine was made,
	// the highest sequence number with a stored reply (dedupe.go). A
	// state machine whose store is replaced (a snapshot restored) must be
	// made anew or have this map cleared.
	newestSeq map[replySession]uint64
	// fsidPub is fsid for readers on other goroutines than the applier's
	// (Members, while a replica applies its first entries).
	fsidPub  atomic.Pointer[string]
	uuidToID map[string]proto.TargetID
	idToUUID map[proto.TargetID]string
	// quotas caches the quota records read or written (quota.go), so a
	// command's accounts cost no store reads; a function of the store.
	quotas map[quotaKey]quotaRecord
	// staleMarks counts the stale marks applied since this state machine
	// was made (in memory, on every member): the leader's rebuild scans
	// the files for stale objects when it moved (rebuild.go).
	staleMarks atomic.Uint64
	// kb and vb are scratch buffers for the keys and values a command
	// writes (txn.set: store.Batch copies them), and spare a txn whose
	// maps the next command reuses (newTxn, release): every member applies
	// every entry, and what the apply path allocates, each member pays
	// in garbage collection.
	kb, vb []byte
	// dirs caches directory inodes as committed (at most maxCachedDirs):
	// a create, unlink or rename reads its directories on every member,
	// and a pebble read costs more than a copy. txn.get hands out copies
	// (a command changes its inodes in place, and may fail); commit
	// stores copies of the directories it wrote and drops what it
	// deleted. The state machine is the store's only writer, so the
	// cache is what the store holds; it is dropped with the store
	// (replaceWith).
	dirs map[proto.Ino]*inode
	// files and names cache, the same way and for the same reason, the
	// other inodes (at most maxCachedFiles, with at least one link) and
	// the directory entries (at most maxCachedNames, and names known
	// absent) that commands committed or read: an unlink reads the entry
	// and the inode a create wrote, on every member. A command's own
	// writes reach them only when it commits (txn.names), as they reach
	// the store.
	files map[proto.Ino]*inode
	names map[nameKey]dirent
	// inodesMu lets the server's read path (cachedInode, cachedLookup:
	// any goroutine) read dirs, files and names while commands apply: the
	// applier changes them only under it, a command's all at once, and
	// reads them without it (it is their only writer). Their inodes are
	// never changed once stored.
	inodesMu sync.RWMutex
	rk       []byte       // the key of a read (txn.get, lookup): room for any
	enc      wire.Encoder // for records encoded by function (encodeAttrDisk)
	spare    *txn
}

// maxCachedDirs bounds stateMachine.dirs: about 300 bytes each.
const maxCachedDirs = 4096

// maxCachedFiles and maxCachedNames bound stateMachine.files and names
// (about 300 and 100 bytes each): the files of a benchmark's phase or an
// application's recent output. Past the bound a cache starts over, as
// dirs does: a miss costs the pebble read it saves.
const (
	maxCachedFiles = 1 << 16
	maxCachedNames = 1 << 16
)

// nameKey is a directory entry's key in stateMachine.names.
type nameKey struct {
	parent proto.Ino
	name   string
}

// Keys of the counters a command writes (store.Batch copies its
// arguments: these are never changed).
var (
	keyNextIno    = store.CounterKey(store.CounterNextIno)
	keyInodes     = store.CounterKey(store.CounterInodes)
	keyNextTarget = store.CounterKey(store.CounterNextTarget)
	keyApplied    = store.CounterKey(store.CounterApplied)
)

// applyResult is what a command did, for the proposer's in-memory work.
type applyResult struct {
	attr      proto.Attr
	orphans   []proto.Ino // inodes whose nlink dropped to 0
	gcQueued  int         // objects put on the GC queue
	target    proto.TargetID
	targetRec targetRecord // register-target: what was stored
	wrote     bool
	synced    bool       // the batch was committed synced (see applyAt)
	parent    proto.Attr // the parent directory after the change (create, unlink, rmdir)
	// reclaimed: an unlink removed the inode's last name and reclaimed
	// it in the same command (nobody had it open).
	reclaimed bool
	// dup: the command's request was applied before; this is its stored
	// reply (attr, parent, and the error), and nothing was applied now.
	dup  bool
	fsid string // init: the file system id stored
	// newLayout is a migrate begin's placed layout (migrate.go).
	newLayout layout.Layout
}

// fsidNow returns the file system id; safe on any goroutine.
func (sm *stateMachine) fsidNow() string {
	if p := sm.fsidPub.Load(); p != nil {
		return *p
	}
	return ""
}

func errnof(errno syscall.Errno, format string, args ...any) error {
	return fmt.Errorf("meta: "+format+": %w", append(args, errno)...)
}

func openStateMachine(st store.Store) (*stateMachine, error) {
	sm := &stateMachine{st: st, newestSeq: map[replySession]uint64{}, uuidToID: map[string]proto.TargetID{}, idToUUID: map[proto.TargetID]string{},
		quotas: map[quotaKey]quotaRecord{}, rk: make([]byte, 0, 1+8+MaxNameLen), dirs: map[proto.Ino]*inode{},
		files: map[proto.Ino]*inode{}, names: map[nameKey]dirent{}}
	var err error
	if sm.nextIno, err = getCounter(st, store.CounterNextIno); err != nil {
		return nil, err
	}
	if sm.inodes, err = getCounter(st, store.CounterInodes); err != nil {
		return nil, err
	}
	if sm.applied, err = getCounter(st, store.CounterApplied); err != nil {
		return nil, err
	}
	if v, err := st.Get(store.CounterKey(store.CounterFSID)); err == nil {
		sm.fsid = string(v)
		sm.fsidPub.Store(&sm.fsid)
	} else if !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	if _, err := st.Get(store.CounterKey(store.CounterFormat)); errors.Is(err, store.ErrNotFound) {
		// Unformatted: it must be empty, or it is someone else's data.
		var first []byte
		if err := st.Scan(nil, nil, func(k, _ []byte) bool { first = bytes.Clone(k); return false }); err != nil {
			return nil, err
		}
		if first != nil {
			return nil, fmt.Errorf("meta: the database holds data (key %q) but no weft format record: %w", first, store.ErrNotStore)
		}
	} else if err != nil {
		return nil, err
	}
	nt, err := getCounter(st, store.CounterNextTarget)
	if err != nil {
		return nil, err
	}
	sm.nextTarget = uint32(nt)
	var bad error
	err = st.Scan([]byte{store.PrefixTargetUID}, []byte{store.PrefixTargetUID + 1}, func(k, v []byte) bool {
		if len(v) != 4 {
			bad = fmt.Errorf("meta: bad target record %q", k)
			return false
		}
		id := proto.TargetID(binary.BigEndian.Uint32(v))
		sm.uuidToID[string(k[1:])] = id
		sm.idToUUID[id] = string(k[1:])
		return true
	})
	if err == nil {
		err = bad
	}
	return sm, err
}

func getCounter(r store.Reader, name string) (uint64, error) {
	v, err := r.Get(store.CounterKey(name))
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("meta: counter %s: bad length %d", name, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

func u64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// txn collects one command's changes: inodes are read once and written back
// at commit, so several changes to one inode (a parent that is both the old
// and new parent of a rename) compose.
type txn struct {
	sm      *stateMachine
	b       store.Batch
	cache   map[proto.Ino]*inode
	dirty   map[proto.Ino]bool
	deleted map[proto.Ino]bool
	// orig is each inode's quota charge as read from the store (absent:
	// new in this command), for chargeQuota (quota.go).
	orig map[proto.Ino]charge
	// quotaW are the quota records this command writes (quota.go).
	quotaW map[quotaKey]quotaRecord
	// names are the directory entries this command writes (Ino 0:
	// deletes), for stateMachine.names once it commits.
	names map[nameKey]dirent
	res   applyResult

	nextIno, inodes uint64
	nextTarget      uint32
	index           uint64 // the command's log index, recorded with its changes
	sync            bool   // commit the batch synced
}

func (t *txn) get(ino proto.Ino) (*inode, error) {
	if n, ok := t.cache[ino]; ok {
		return n, nil
	}
	if t.deleted[ino] || ino == 0 {
		return nil, errnof(syscall.ENOENT, "no inode %d", ino)
	}
	n := t.sm.committed(ino)
	if n != nil {
		n = n.clone()
	} else {
		var err error
		if n, err = loadInodeBuf(t.sm.st, ino, t.sm.rk); err != nil {
			return nil, err
		}
	}
	t.cache[ino] = n
	t.orig[ino] = chargeOf(n)
	return n, nil
}

func (t *txn) getDir(ino proto.Ino) (*inode, error) {
	n, err := t.get(ino)
	if err != nil {
		return nil, err
	}
	if !n.IsDir() {
		return nil, errnof(syscall.ENOTDIR, "inode %d is not a directory", ino)
	}
	return n, nil
}

func (t *txn) put(n *inode) {
	t.cache[n.Ino] = n
	t.dirty[n.Ino] = true
	delete(t.deleted, n.Ino)
}

// lookup returns the committed entry name in parent (not one this
// command wrote: as the store, the cache has only what was committed).
func (t *txn) lookup(parent proto.Ino, name string) (dirent, bool, error) {
	if de, ok := t.sm.names[nameKey{parent, name}]; ok {
		return de, de.Ino != 0, nil
	}
	de, ok, err := loadDirentBuf(t.sm.st, parent, name, t.sm.rk) // de is zero when !ok
	if err == nil {
		t.sm.inodesMu.Lock()
		t.sm.cacheName(nameKey{parent, name}, de)
		t.sm.inodesMu.Unlock()
	}
	return de, ok, err
}

func (t *txn) setDirent(parent proto.Ino, name string, child *inode) {
	de := dirent{Ino: child.Ino, Type: child.Mode & syscall.S_IFMT}
	t.setScratch(store.AppendDirentKey(t.sm.kb, uint64(parent), name), de.appendTo(t.sm.vb))
	t.noteName(parent, name, de)
}

// deleteDirent deletes the entry name in parent.
func (t *txn) deleteDirent(parent proto.Ino, name string) {
	t.deleteScratch(store.AppendDirentKey(t.sm.kb, uint64(parent), name))
	t.noteName(parent, name, dirent{})
}

// noteName records an entry the command writes (Ino 0: deletes), for the
// cache once it commits.
func (t *txn) noteName(parent proto.Ino, name string, de dirent) {
	if t.names == nil {
		t.names = map[nameKey]dirent{}
	}
	t.names[nameKey{parent, name}] = de
}

// cacheName puts a committed entry (Ino 0: none) in sm.names, with a
// name of its own (a command's may share its decoded entry's memory).
func (sm *stateMachine) cacheName(k nameKey, de dirent) {
	k.name = strings.Clone(k.name)
	putBounded(sm.names, k, de, maxCachedNames)
}

// putBounded sets m[k] = v, first emptying m if k is new and m holds max
// already: simple, and rare; what is hot comes back at once.
func putBounded[K comparable, V any](m map[K]V, k K, v V, max int) {
	if _, ok := m[k]; !ok && len(m) >= max {
		clear(m)
	}
	m[k] = v
}

// setScratch writes key → value in the batch, key built by appending to
// t.sm.kb and value to t.sm.vb (both empty: the state machine's scratch
// buffers; value nil for a record that is its key): the batch copies them, and the buffers keep what they grew
// to for the next write. Nothing else may be passed: the next write
// would append over it.
func (t *txn) setScratch(key, value []byte) {
	t.b.Set(key, value)
	t.sm.kb = key[:0]
	if value != nil { // a key-only record leaves the value buffer as it was
		t.sm.vb = value[:0]
	}
}

// deleteScratch deletes key, built by appending to t.sm.kb (empty), in
// the batch, and keeps the buffer for the next key.
func (t *txn) deleteScratch(key []byte) {
	t.b.Delete(key)
	t.sm.kb = key[:0]
}

// encoder returns the state machine's encoder on its value buffer
// (empty): an encoder of its own on the heap for each record would be
// garbage (encodeAttrDisk passes it on to a function value, so escape
// analysis cannot keep it on the stack).
func (t *txn) encoder() *wire.Encoder {
	t.sm.enc.B = t.sm.vb
	return &t.sm.enc
}

// setU64 writes key (not a scratch buffer) → v, big-endian.
func (t *txn) setU64(key []byte, v uint64) {
	val := binary.BigEndian.AppendUint64(t.sm.vb, v)
	t.b.Set(key, val)
	t.sm.vb = val[:0]
}

// dropLink decrements n's link count; at 0 the inode becomes an orphan.
func (t *txn) dropLink(n *inode, now int64) {
	if n.IsDir() {
		n.Nlink = 0
	} else if n.Nlink > 0 {
		n.Nlink--
	}
	n.Ctime = now
	t.put(n)
	if n.Nlink == 0 {
		t.b.Set(store.OrphanKey(uint64(n.Ino)), u64(uint64(now)))
		t.res.orphans = append(t.res.orphans, n.Ino)
	}
}

func (t *txn) commit() error {
	for ino := range t.dirty {
		t.setScratch(store.AppendInodeKey(t.sm.kb, uint64(ino)), t.cache[ino].appendTo(t.encoder()))
	}
	for ino := range t.deleted {
		t.b.Delete(store.AppendInodeKey(t.sm.kb, uint64(ino)))
	}
	if t.nextIno != t.sm.nextIno {
		t.setU64(keyNextIno, t.nextIno)
	}
	if t.inodes != t.sm.inodes {
		t.setU64(keyInodes, t.inodes)
	}
	if t.nextTarget != t.sm.nextTarget {
		t.setU64(keyNextTarget, uint64(t.nextTarget))
	}
	if t.b.Len() == 0 {
		return nil
	}
	// Every batch records its log index: on a single server one more than
	// the last, so that a store which lost batches at the end of its log
	// knows less than its durable mark (store.Mark).
	t.setU64(keyApplied, t.index)
	if err := t.b.Commit(t.sync); err != nil {
		return errnof(syscall.EIO, "commit: %v", err)
	}
	t.sm.nextIno, t.sm.inodes, t.sm.nextTarget = t.nextIno, t.inodes, t.nextTarget
	for k, r := range t.quotaW {
		t.sm.quotas[k] = r
	}
	t.sm.inodesMu.Lock()
	for ino := range t.dirty {
		n := t.cache[ino]
		switch {
		case n.Nlink == 0:
			delete(t.sm.dirs, ino)
			delete(t.sm.files, ino)
		case n.IsDir():
			putBounded(t.sm.dirs, ino, n.clone(), maxCachedDirs)
		default:
			putBounded(t.sm.files, ino, n.clone(), maxCachedFiles)
		}
	}
	for ino := range t.deleted {
		delete(t.sm.dirs, ino)
		delete(t.sm.files, ino)
	}
	for k, de := range t.names {
		t.sm.cacheName(k, de)
	}
	t.sm.inodesMu.Unlock()
	t.sm.applied = t.index
	t.res.wrote = true
	t.res.synced = t.sync
	return nil
}

// apply is applyAt at the index after the last one recorded, unsynced
// (tests that drive the state machine without a log).
// replaceWith makes sm the state machine fresh is (opened on the store
// sm's was replaced with): every field, and the published fsid.
func (sm *stateMachine) replaceWith(fresh *stateMachine) {
	sm.st, sm.nextIno, sm.inodes, sm.nextTarget = fresh.st, fresh.nextIno, fresh.inodes, fresh.nextTarget
	sm.applied, sm.fsid, sm.newestSeq = fresh.applied, fresh.fsid, fresh.newestSeq
	sm.uuidToID, sm.idToUUID = fresh.uuidToID, fresh.idToUUID
	sm.inodesMu.Lock()
	sm.quotas, sm.dirs, sm.files, sm.names = fresh.quotas, fresh.dirs, fresh.files, fresh.names
	sm.inodesMu.Unlock()
	if fresh.fsid != "" {
		sm.fsidPub.Store(&fresh.fsid)
	}
}

// cachedInode returns a copy of inode ino as last committed, if dirs or
// files holds it, else nil. Unlike the rest of the state machine it may be
// called on any goroutine: the server's reads (readInode) take it before
// the store, where an inode a command wrote moments ago, or one flushed to
// tables whose blocks no read has brought in yet (a file read once, long
// after it was written), costs a pebble read, often from the disk.
func (sm *stateMachine) cachedInode(ino proto.Ino) *inode {
	sm.inodesMu.RLock()
	n := sm.committed(ino)
	sm.inodesMu.RUnlock()
	if n == nil {
		return nil
	}
	return n.clone()
}

// committed returns inode ino as dirs or files caches it (nil if neither
// does): the cache's own inode, for the caller to copy. The applier calls
// it as is; any other goroutine under inodesMu.
func (sm *stateMachine) committed(ino proto.Ino) *inode {
	if n := sm.dirs[ino]; n != nil {
		return n
	}
	return sm.files[ino]
}

// cachedLookup answers a lookup of name in parent from the caches when
// they hold all it takes: parent, a directory; the entry, or that there is
// none; and the inode it names. It returns copies of parent and of that
// inode (nil: no such entry); ok is false when something is missing (the
// caller reads the store). The three come from one moment of the
// committed state (a command's changes reach the caches at once, under
// inodesMu), as a store view's do. Any goroutine.
func (sm *stateMachine) cachedLookup(parent proto.Ino, name string) (p, n *inode, ok bool) {
	sm.inodesMu.RLock()
	defer sm.inodesMu.RUnlock()
	p = sm.dirs[parent]
	if p == nil {
		return nil, nil, false
	}
	de, known := sm.names[nameKey{parent, name}]
	if !known {
		return nil, nil, false
	}
	if de.Ino == 0 {
		return p.clone(), nil, true
	}
	if n = sm.committed(de.Ino); n == nil {
		return nil, nil, false
	}
	return p.clone(), n.clone(), true
}

func (sm *stateMachine) apply(c *Command) (applyResult, error) {
	return sm.applyAt(c, sm.applied+1, false)
}

// applyAt validates c, the command at log index index, against the current
// state and either commits all its changes, and the index (counter
// applied_index), as one batch, or returns an error and changes nothing
// (a command that fails or changes nothing records no index: applying it
// again to the same state does nothing again; but a failed command with a
// request id records its reply, and so the index, for dedupe). Indexes
// must grow from call to call; the log (log.go) owns them.
//
// With sync the batch is committed synced: a synced commit also makes
// every earlier unsynced batch durable, so the local log syncs the last
// command of a group this way instead of writing a separate sync record
// (res.synced says whether it happened: not when the command failed or
// changed nothing). A replicated log applies unsynced: its own log is
// what is durable.
func (sm *stateMachine) applyAt(c *Command, index uint64, sync bool) (applyResult, error) {
	dedupe := c.Seq > 0 && c.Op != OpSessionDrop
	if dedupe {
		if res, found, err := sm.remembered(c); found {
			return res, err
		}
	}
	t := sm.newTxn(sync, index)
	defer sm.release(t)
	var err error
	switch c.Op {
	case OpInit:
		err = t.init(c)
	case OpCreate, OpMkdir, OpSymlink:
		err = t.create(c)
	case OpLink:
		err = t.link(c)
	case OpUnlink, OpRmdir:
		err = t.remove(c)
	case OpRename:
		err = t.rename(c)
	case OpSetAttr:
		err = t.setAttr(c)
	case OpSetXattr, OpRemoveXattr:
		err = t.xattr(c)
	case OpWriteDone:
		err = t.writeDone(c)
	case OpSetLayout:
		err = t.setLayout(c)
	case OpDropCopy:
		err = t.dropCopyOp(c)
	case OpStale:
		err = t.stale(c)
	case OpRegisterTarget:
		err = t.registerTarget(c)
	case OpTargetState:
		err = t.targetState(c)
	case OpMoveSlot:
		err = t.moveSlot(c)
	case OpReclaim:
		err = t.reclaim(c)
	case OpGCDone:
		for _, o := range c.Objects {
			t.deleteScratch(store.AppendGCKey(t.sm.kb, uint32(o.Target), uint64(o.Obj.Ino), o.Obj.Stripe, o.Obj.Gen))
		}
	case OpSessionDrop:
		t.b.DeletePrefix(store.ReplyPrefix(c.Session, c.SessionName))
	case OpSetQuota:
		err = t.setQuota(c)
	case OpSetProject:
		err = t.setProject(c)
	case OpRecount:
		err = t.recount(c)
	case OpSetParam:
		err = t.setParam(c)
	case OpCorrupt:
		err = t.corruptSlot(c)
	case OpLost:
		err = t.lostObject(c)
	case OpMigrateBegin:
		err = t.migrateBegin(c)
	case OpMigrateCommit:
		err = t.migrateCommit(c)
	case OpMigrateAbort:
		err = t.migrateAbort(c)
	case OpMigrateRenew:
		err = t.migrateRenew(c)
	default:
		err = errnof(syscall.EINVAL, "unknown command op %d", c.Op)
	}
	if err == nil {
		// Usage follows the inode changes, in the same batch.
		err = t.chargeQuota(c)
	}
	if err != nil {
		if dedupe {
			return sm.rememberFailure(c, err, index, sync)
		}
		return applyResult{}, err
	}
	if dedupe {
		t.remember(c, 0)
	}
	if err := t.commit(); err != nil {
		return applyResult{}, err
	}
	switch {
	case c.Op == OpSessionDrop:
		sm.forgetSession(c)
	case dedupe:
		sm.noteReply(c)
	}
	if fsid := t.res.fsid; fsid != "" {
		sm.fsid = fsid
		sm.fsidPub.Store(&fsid) // not &t.res.fsid: t is reused (release)
	}
	if c.Op == OpRegisterTarget {
		sm.uuidToID[c.Text] = t.res.target
		sm.idToUUID[t.res.target] = c.Text
	}
	return t.res, nil
}

// newTxn starts a command's transaction: the spare one's maps, emptied,
// if there is one (a txn made while another is open, rememberFailure's,
// gets maps of its own). release gives it back.
func (sm *stateMachine) newTxn(sync bool, index uint64) *txn {
	t := sm.spare
	sm.spare = nil
	if t == nil {
		t = &txn{cache: map[proto.Ino]*inode{}, dirty: map[proto.Ino]bool{}, deleted: map[proto.Ino]bool{},
			orig: map[proto.Ino]charge{}}
	}
	t.sm, t.b, t.sync, t.index = sm, sm.st.NewBatch(), sync, index
	t.nextIno, t.inodes, t.nextTarget = sm.nextIno, sm.inodes, sm.nextTarget
	return t
}

// release closes t's batch (a no-op after its commit) and keeps t, its
// maps emptied, for the next command. Nothing of t may be used after it:
// the result the command returns is a copy of t.res, whose slices are not
// reused.
func (sm *stateMachine) release(t *txn) {
	t.b.Close()
	t.b = nil
	clear(t.cache)
	clear(t.dirty)
	clear(t.deleted)
	clear(t.orig)
	clear(t.quotaW)
	clear(t.names)
	t.res = applyResult{}
	sm.spare = t
}

func (t *txn) init(c *Command) error {
	if c.Text == "" || len(c.Text) > 64 {
		return errnof(syscall.EINVAL, "bad file system id %q", c.Text)
	}
	if _, err := t.sm.st.Get(store.CounterKey(store.CounterFormat)); err == nil {
		if c.Flags&initAdoptFSID == 0 || t.sm.fsid != "" {
			return errnof(syscall.EEXIST, "store already formatted")
		}
		// A store formatted before file system ids: it adopts one.
		t.b.Set(store.CounterKey(store.CounterFSID), []byte(c.Text))
		t.b.Set(store.CounterKey(store.CounterFormat), u64(formatVersion))
		t.res.fsid = c.Text
		return nil
	}
	t.b.Set(store.CounterKey(store.CounterFSID), []byte(c.Text))
	t.res.fsid = c.Text
	root := &inode{
		Attr: proto.Attr{
			Ino: proto.RootIno, Mode: syscall.S_IFDIR | (c.Mode & 07777), Nlink: 2,
			Uid: c.Uid, Gid: c.Gid, Atime: c.Now, Mtime: c.Now, Ctime: c.Now,
			Layout: layout.Default(),
		},
		Parent: proto.RootIno,
	}
	t.put(root)
	t.b.Set(store.CounterKey(store.CounterFormat), u64(formatVersion))
	t.b.Set(store.CounterKey(store.CounterQuotas), u64(1)) // every inode is counted from the first
	t.nextIno = uint64(proto.RootIno) + 1
	t.inodes = 1
	t.nextTarget = 1
	t.res.attr = root.Attr
	return nil
}

func checkName(name string) error {
	switch {
	case name == "" || name == "." || name == "..":
		return errnof(syscall.EINVAL, "invalid name %q", name)
	case len(name) > MaxNameLen:
		return errnof(syscall.ENAMETOOLONG, "name of %d bytes", len(name))
	case strings.ContainsAny(name, "/\x00"):
		return errnof(syscall.EINVAL, "invalid name %q", name)
	}
	return nil
}

// newIno checks a proposer-allocated inode number and raises the
// high-water mark past it.
func (t *txn) newIno(ino proto.Ino) error {
	if ino <= proto.RootIno {
		return errnof(syscall.EINVAL, "bad new inode number %d", ino)
	}
	// Every stored inode number is below the high-water mark, so only a
	// number below it can be in use (and needs a read to tell).
	if uint64(ino) < t.nextIno {
		if _, err := t.sm.st.Get(store.InodeKey(uint64(ino))); err == nil {
			return errnof(syscall.EIO, "inode number %d already in use", ino)
		}
	}
	t.nextIno = max(t.nextIno, uint64(ino)+1)
	t.inodes++
	return nil
}

func (t *txn) create(c *Command) error {
	if err := checkName(c.Name); err != nil {
		return err
	}
	parent, err := t.getDir(c.Parent)
	if err != nil {
		return err
	}
	if err := maySearch(c.Cred, &parent.Attr); err != nil {
		return err
	}
	if parent.Nlink == 0 {
		return errnof(syscall.ENOENT, "directory %d was removed", c.Parent)
	}
	de, exists, err := t.lookup(c.Parent, c.Name)
	if err != nil {
		return err
	}
	if exists {
		if c.Op != OpCreate || c.Flags&createExclusive != 0 {
			return errnof(syscall.EEXIST, "%q exists", c.Name)
		}
		n, err := t.get(de.Ino)
		if err != nil {
			return err
		}
		if n.IsDir() {
			return errnof(syscall.EISDIR, "%q is a directory", c.Name)
		}
		t.res.attr = n.Attr
		t.res.parent = parent.Attr
		return nil
	}
	if err := mayCreate(c.Cred, &parent.Attr); err != nil {
		return err
	}
	n := &inode{Attr: proto.Attr{
		Ino: c.Ino, Nlink: 1, Uid: c.Uid, Gid: c.Gid,
		Atime: c.Now, Mtime: c.Now, Ctime: c.Now,
	}, Project: parent.Project}
	perm := c.Mode & 07777
	sgidDir := parent.Mode&syscall.S_ISGID != 0
	if sgidDir {
		n.Gid = parent.Gid
	}
	switch c.Op {
	case OpCreate:
		typ := c.Mode & syscall.S_IFMT
		switch typ {
		case 0:
			typ = syscall.S_IFREG
		case syscall.S_IFREG, syscall.S_IFIFO, syscall.S_IFSOCK, syscall.S_IFCHR, syscall.S_IFBLK:
		default:
			return errnof(syscall.EINVAL, "cannot create file type %#o", typ)
		}
		// A caller outside the inherited group may not keep setgid-exec.
		if sgidDir && !creatorInGroup(c, parent.Gid) && perm&(syscall.S_ISGID|syscall.S_IXGRP) == syscall.S_ISGID|syscall.S_IXGRP {
			perm &^= syscall.S_ISGID
		}
		n.Mode = typ | perm
		if typ == syscall.S_IFCHR || typ == syscall.S_IFBLK {
			n.Rdev = c.Rdev
		}
		if typ == syscall.S_IFREG {
			n.Gen = c.Gen
			pol := parent.Layout
			if c.Layout != nil {
				pol = *c.Layout
			}
			if n.Layout, err = t.placeFile(pol, c); err != nil {
				return err
			}
		}
	case OpMkdir:
		if parent.Nlink >= MaxLinks {
			return errnof(syscall.EMLINK, "directory %d has too many subdirectories", parent.Ino)
		}
		if sgidDir {
			perm |= syscall.S_ISGID
		}
		n.Mode = syscall.S_IFDIR | perm
		n.Nlink = 2
		n.Layout = parent.Layout.Clone()
		n.Parent = parent.Ino
		parent.Nlink++
	case OpSymlink:
		if c.Text == "" {
			return errnof(syscall.ENOENT, "empty symlink target")
		}
		if len(c.Text) > MaxSymlinkLen {
			return errnof(syscall.ENAMETOOLONG, "symlink target of %d bytes", len(c.Text))
		}
		n.Mode = syscall.S_IFLNK | 0777
		n.Size = uint64(len(c.Text))
		n.Symlink = c.Text
	}
	if err := t.newIno(c.Ino); err != nil {
		return err
	}
	parent.Mtime, parent.Ctime = c.Now, c.Now
	t.put(parent)
	t.put(n)
	t.setDirent(parent.Ino, c.Name, n)
	t.res.attr = n.Attr
	t.res.parent = parent.Attr
	return nil
}

// placeFile resolves a file's layout from a policy (the parent's default or
// an explicit setstripe) and the proposer's ranked candidates. The copies
// or shards of one stripe go to distinct failure domains (Command.Domains);
// when not even one stripe can be placed so, the create fails with ENOSPC:
// a file is never less protected than its policy asks.
func (t *txn) placeFile(pol layout.Layout, c *Command) (layout.Layout, error) {
	if err := pol.ValidatePolicy(); err != nil {
		return layout.Layout{}, errnof(syscall.EINVAL, "%v", err)
	}
	l := pol.Clone()
	l.Stale = nil
	l.ObjectsSized = true // clients of this version keep objects as long as their share
	w := l.Width()
	if len(l.Targets) > 0 {
		if l.StripeCount == layout.AllTargets {
			l.StripeCount = int32(len(l.Targets) / w)
		}
		if err := l.ValidateFile(); err != nil {
			return layout.Layout{}, errnof(syscall.EINVAL, "%v", err)
		}
		for _, id := range l.Targets {
			if _, ok := t.targetUUID(id); !ok {
				return layout.Layout{}, errnof(syscall.EINVAL, "target %d is not registered", id)
			}
		}
		if w > 1 {
			if err := checkDomains(l, c); err != nil {
				return layout.Layout{}, err
			}
		}
		return l, nil
	}
	if len(c.Candidates) == 0 {
		errno := syscall.Errno(c.PlaceErr)
		if errno == 0 {
			errno = syscall.EIO
		}
		return layout.Layout{}, errnof(errno, "no storage target available for a new file")
	}
	want := int(l.StripeCount)
	if want == layout.AllTargets {
		want = len(c.Candidates)
	}
	groups := placeGroups(c.Candidates, c.Domains, w, want)
	if len(groups) == 0 {
		return layout.Layout{}, errnof(syscall.ENOSPC, "%s needs %d storage servers (failure domains) with free space; %d are up and not full",
			kindName(l), w, countDomains(c.Candidates, c.Domains))
	}
	l.StripeCount = int32(len(groups))
	l.Targets = make([]proto.TargetID, 0, len(groups)*w)
	for _, g := range groups {
		l.Targets = append(l.Targets, g...)
	}
	if err := l.ValidateFile(); err != nil {
		return layout.Layout{}, errnof(syscall.EINVAL, "%v", err)
	}
	return l, nil
}

// checkPolicyDomains refuses a protected directory default that the up
// failure domains cannot satisfy, so setstripe fails at once rather than
// every create in the directory afterwards.
func checkPolicyDomains(l layout.Layout, c *Command) error {
	w := l.Width()
	if w == 1 {
		return nil
	}
	if n := countDomains(c.Candidates, c.Domains); n < w {
		return errnof(syscall.ENOSPC, "%s needs %d storage servers (failure domains) with free space; %d are up and not full", kindName(l), w, n)
	}
	return nil
}

func kindName(l layout.Layout) string {
	switch l.Kind {
	case layout.Mirror:
		return fmt.Sprintf("mirror %d", l.Mirror)
	case layout.EC:
		return fmt.Sprintf("ec %d+%d", l.ECData, l.ECParity)
	}
	return "raid0"
}

// domainOf returns candidate i's failure domain: from domains when the
// command carries them, else the candidate's own (commands before version
// 5, and tests).
func domainOf(cands []proto.TargetID, domains []uint32, i int) uint64 {
	if len(domains) == len(cands) {
		return uint64(domains[i])
	}
	return 1<<32 | uint64(cands[i])
}

func countDomains(cands []proto.TargetID, domains []uint32) int {
	seen := map[uint64]bool{}
	for i := range cands {
		seen[domainOf(cands, domains, i)] = true
	}
	return len(seen)
}

// placeGroups takes, in rank order, up to want groups of w candidates,
// each group's members in distinct domains, no candidate twice.
func placeGroups(cands []proto.TargetID, domains []uint32, w, want int) [][]proto.TargetID {
	used := make([]bool, len(cands))
	var groups [][]proto.TargetID
	for len(groups) < want {
		g := make([]proto.TargetID, 0, w)
		var picked []int
		inGroup := map[uint64]bool{}
		for i := range cands {
			d := domainOf(cands, domains, i)
			if used[i] || inGroup[d] {
				continue
			}
			inGroup[d] = true
			picked = append(picked, i)
			g = append(g, cands[i])
			if len(g) == w {
				break
			}
		}
		if len(g) < w {
			break
		}
		for _, i := range picked {
			used[i] = true
		}
		groups = append(groups, g)
	}
	return groups
}

// checkDomains checks explicitly chosen targets of a protected layout: each
// is up (a candidate) and the objects of each stripe are in distinct
// failure domains.
func checkDomains(l layout.Layout, c *Command) error {
	idx := make(map[proto.TargetID]int, len(c.Candidates))
	for i, id := range c.Candidates {
		idx[id] = i
	}
	w := l.Width()
	for s := 0; s < int(l.StripeCount); s++ {
		seen := map[uint64]proto.TargetID{}
		for j := range w {
			id := l.Targets[l.Slot(s, j)]
			i, ok := idx[id]
			if !ok {
				return errnof(syscall.EINVAL, "target %d is not up with free space", id)
			}
			d := domainOf(c.Candidates, c.Domains, i)
			if other, dup := seen[d]; dup {
				return errnof(syscall.EINVAL, "targets %d and %d of stripe %d are in one failure domain", other, id, s)
			}
			seen[d] = id
		}
	}
	return nil
}

func (t *txn) targetUUID(id proto.TargetID) (string, bool) {
	u, ok := t.sm.idToUUID[id]
	return u, ok
}

func (t *txn) link(c *Command) error {
	if err := checkName(c.NewName); err != nil {
		return err
	}
	n, err := t.get(c.Ino)
	if err != nil {
		return err
	}
	if n.IsDir() {
		return errnof(syscall.EPERM, "hard link to directory %d", c.Ino)
	}
	if n.Nlink == 0 {
		return errnof(syscall.ENOENT, "inode %d was removed", c.Ino)
	}
	if n.Nlink >= MaxLinks {
		return errnof(syscall.EMLINK, "inode %d has %d links", c.Ino, n.Nlink)
	}
	parent, err := t.getDir(c.NewParent)
	if err != nil {
		return err
	}
	if err := maySearch(c.Cred, &parent.Attr); err != nil {
		return err
	}
	if parent.Nlink == 0 {
		return errnof(syscall.ENOENT, "directory %d was removed", c.NewParent)
	}
	if _, exists, err := t.lookup(c.NewParent, c.NewName); err != nil {
		return err
	} else if exists {
		return errnof(syscall.EEXIST, "%q exists", c.NewName)
	}
	if err := mayCreate(c.Cred, &parent.Attr); err != nil {
		return err
	}
	n.Nlink++
	n.Ctime = c.Now
	parent.Mtime, parent.Ctime = c.Now, c.Now
	t.put(n)
	t.put(parent)
	t.setDirent(parent.Ino, c.NewName, n)
	t.res.attr = n.Attr
	return nil
}

func (t *txn) isEmptyDir(ino proto.Ino) (bool, error) {
	empty := true
	p := store.DirPrefix(uint64(ino))
	err := t.sm.st.Scan(p, store.PrefixEnd(p), func(k, v []byte) bool {
		empty = false
		return false
	})
	if err != nil {
		return false, errnof(syscall.EIO, "scan directory %d: %v", ino, err)
	}
	return empty, nil
}

func (t *txn) remove(c *Command) error {
	if c.Op == OpRmdir && c.Name == "." {
		return errnof(syscall.EINVAL, "rmdir of \".\"")
	}
	if c.Op == OpRmdir && c.Name == ".." {
		return errnof(syscall.ENOTEMPTY, "rmdir of \"..\"")
	}
	if err := checkName(c.Name); err != nil {
		return err
	}
	parent, err := t.getDir(c.Parent)
	if err != nil {
		return err
	}
	if err := maySearch(c.Cred, &parent.Attr); err != nil {
		return err
	}
	de, exists, err := t.lookup(c.Parent, c.Name)
	if err != nil {
		return err
	}
	if !exists {
		return errnof(syscall.ENOENT, "no entry %q in %d", c.Name, c.Parent)
	}
	n, err := t.get(de.Ino)
	if err != nil {
		return err
	}
	if err := mayDelete(c.Cred, &parent.Attr, &n.Attr); err != nil {
		return err
	}
	if c.Op == OpUnlink && n.IsDir() {
		return errnof(syscall.EISDIR, "unlink of directory %q", c.Name)
	}
	if c.Op == OpRmdir {
		if !n.IsDir() {
			return errnof(syscall.ENOTDIR, "rmdir of non-directory %q", c.Name)
		}
		if empty, err := t.isEmptyDir(n.Ino); err != nil {
			return err
		} else if !empty {
			return errnof(syscall.ENOTEMPTY, "directory %q not empty", c.Name)
		}
		parent.Nlink--
	}
	t.deleteDirent(c.Parent, c.Name)
	if c.Op == OpUnlink && n.Nlink == 1 && slices.Contains(c.Inos, n.Ino) {
		// The last link, and the proposer found no open handle and blocks
		// new ones until this command is applied: reclaim at once instead
		// of by a later command. The inode goes in this batch, so it is
		// never marked an orphan (two writes fewer per unlink).
		if err := t.reclaimInode(n, false); err != nil {
			return err
		}
		t.res.reclaimed = true
	} else {
		t.dropLink(n, c.Now)
	}
	parent.Mtime, parent.Ctime = c.Now, c.Now
	t.put(parent)
	t.res.parent = parent.Attr
	return nil
}

// isAncestor reports whether dir a is d or one of d's ancestors.
func (t *txn) isAncestor(a, d proto.Ino) (bool, error) {
	for i := 0; i < 1<<20; i++ {
		if d == a {
			return true, nil
		}
		if d == proto.RootIno {
			return false, nil
		}
		n, err := t.get(d)
		if err != nil {
			return false, err
		}
		d = n.Parent
	}
	return false, errnof(syscall.EIO, "directory parent chain too long")
}

func (t *txn) rename(c *Command) error {
	if c.Flags&^(proto.RenameNoReplace|proto.RenameExchange) != 0 ||
		c.Flags == proto.RenameNoReplace|proto.RenameExchange {
		return errnof(syscall.EINVAL, "rename flags %#x", c.Flags)
	}
	if err := checkName(c.Name); err != nil {
		return err
	}
	if err := checkName(c.NewName); err != nil {
		return err
	}
	op, err := t.getDir(c.Parent)
	if err != nil {
		return err
	}
	np, err := t.getDir(c.NewParent)
	if err != nil {
		return err
	}
	if err := maySearch(c.Cred, &op.Attr); err != nil {
		return err
	}
	if err := maySearch(c.Cred, &np.Attr); err != nil {
		return err
	}
	sde, ok, err := t.lookup(c.Parent, c.Name)
	if err != nil {
		return err
	}
	if !ok {
		return errnof(syscall.ENOENT, "no entry %q in %d", c.Name, c.Parent)
	}
	dde, dstExists, err := t.lookup(c.NewParent, c.NewName)
	if err != nil {
		return err
	}
	exchange := c.Flags&proto.RenameExchange != 0
	if exchange && !dstExists {
		return errnof(syscall.ENOENT, "no entry %q in %d", c.NewName, c.NewParent)
	}
	if c.Flags&proto.RenameNoReplace != 0 && dstExists {
		return errnof(syscall.EEXIST, "%q exists", c.NewName)
	}
	if np.Nlink == 0 {
		return errnof(syscall.ENOENT, "directory %d was removed", c.NewParent)
	}
	src, err := t.get(sde.Ino)
	if err != nil {
		return err
	}
	if dstExists && dde.Ino == sde.Ino {
		return nil // both names are links to one inode: POSIX says do nothing
	}
	if src.IsDir() && c.Parent != c.NewParent {
		if in, err := t.isAncestor(src.Ino, np.Ino); err != nil {
			return err
		} else if in {
			return errnof(syscall.EINVAL, "cannot move directory %q into itself", c.Name)
		}
	}
	var dst *inode
	if dstExists {
		if dst, err = t.get(dde.Ino); err != nil {
			return err
		}
	}
	now := c.Now
	crossDir := c.Parent != c.NewParent
	if err := mayRename(c.Cred, op, np, src, dst, exchange, crossDir); err != nil {
		return err
	}
	if exchange {
		if dst.IsDir() && crossDir {
			if in, err := t.isAncestor(dst.Ino, op.Ino); err != nil {
				return err
			} else if in {
				return errnof(syscall.EINVAL, "cannot move directory %q into itself", c.NewName)
			}
		}
		if crossDir {
			if src.IsDir() {
				src.Parent = np.Ino
				op.Nlink--
				np.Nlink++
			}
			if dst.IsDir() {
				dst.Parent = op.Ino
				np.Nlink--
				op.Nlink++
			}
		}
		t.setDirent(op.Ino, c.Name, dst)
		t.setDirent(np.Ino, c.NewName, src)
		src.Ctime, dst.Ctime = now, now
		t.put(src)
		t.put(dst)
	} else {
		if dst != nil {
			if src.IsDir() && !dst.IsDir() {
				return errnof(syscall.ENOTDIR, "%q is not a directory", c.NewName)
			}
			if !src.IsDir() && dst.IsDir() {
				return errnof(syscall.EISDIR, "%q is a directory", c.NewName)
			}
			if dst.IsDir() {
				if empty, err := t.isEmptyDir(dst.Ino); err != nil {
					return err
				} else if !empty {
					return errnof(syscall.ENOTEMPTY, "directory %q not empty", c.NewName)
				}
				np.Nlink--
			}
			t.dropLink(dst, now)
		}
		if src.IsDir() && crossDir {
			if np.Nlink >= MaxLinks {
				return errnof(syscall.EMLINK, "directory %d has too many subdirectories", np.Ino)
			}
			src.Parent = np.Ino
			op.Nlink--
			np.Nlink++
		}
		t.deleteDirent(op.Ino, c.Name)
		t.setDirent(np.Ino, c.NewName, src)
		src.Ctime = now
		t.put(src)
	}
	op.Mtime, op.Ctime = now, now
	np.Mtime, np.Ctime = now, now
	t.put(op)
	t.put(np)
	return nil
}

func (t *txn) setAttr(c *Command) error {
	n, err := t.get(c.Ino)
	if err != nil {
		return err
	}
	in := c.SetAttr
	if in.Valid&proto.SetSize != 0 {
		if n.IsDir() {
			return errnof(syscall.EISDIR, "truncate of directory %d", c.Ino)
		}
		if !n.IsRegular() {
			return errnof(syscall.EINVAL, "truncate of non-regular inode %d", c.Ino)
		}
	}
	mode, err := checkSetAttr(c.Cred, &n.Attr, &in, c.Flags&setAttrViaHandle != 0)
	if err != nil {
		return err
	}
	if in.Valid&proto.SetMode != 0 {
		n.Mode = n.Mode&syscall.S_IFMT | mode
	}
	if in.Valid&(proto.SetUid|proto.SetGid) != 0 && c.Cred != nil && !n.IsDir() {
		// chown clears setuid, and a real setgid, as Linux's chown does
		// (for root too).
		n.Mode &^= syscall.S_ISUID
		if n.Mode&(syscall.S_ISGID|syscall.S_IXGRP) == syscall.S_ISGID|syscall.S_IXGRP {
			n.Mode &^= syscall.S_ISGID
		}
	}
	if in.Valid&proto.SetUid != 0 {
		n.Uid = in.Uid
	}
	if in.Valid&proto.SetGid != 0 {
		n.Gid = in.Gid
	}
	if in.Valid&proto.SetSize != 0 {
		killSuid(c.Cred, &n.Attr)
		n.Flags |= inodeTruncated
		t.dropCopy(n)
		n.Size = in.Size
		n.Mtime = c.Now
		// The client truncates the objects to their shares of the new
		// size before it sends this, so they hold at most its blocks
		// (exactly 0 for 0); the next WriteDone reports the real count.
		n.Blocks = min(n.Blocks, (in.Size+4095)/4096*8)
	}
	switch {
	case in.Valid&proto.SetAtimeNow != 0:
		n.Atime = c.Now
	case in.Valid&proto.SetAtime != 0:
		n.Atime = in.Atime
	}
	switch {
	case in.Valid&proto.SetMtimeNow != 0:
		n.Mtime = c.Now
	case in.Valid&proto.SetMtime != 0:
		n.Mtime = in.Mtime
	}
	if in.Valid&proto.SetCtime != 0 {
		n.Ctime = in.Ctime
	} else {
		n.Ctime = c.Now
	}
	t.put(n)
	t.res.attr = n.Attr
	return nil
}

func checkXattrName(name string) error {
	if name == "" {
		return errnof(syscall.EINVAL, "empty xattr name")
	}
	if len(name) > MaxXattrName {
		return errnof(syscall.ERANGE, "xattr name of %d bytes", len(name))
	}
	for _, ns := range []string{"user.", "trusted.", "security."} {
		if strings.HasPrefix(name, ns) && len(name) > len(ns) {
			return nil
		}
	}
	return errnof(syscall.EOPNOTSUPP, "xattr namespace of %q", name)
}

func (t *txn) xattr(c *Command) error {
	if err := checkXattrName(c.Name); err != nil {
		return err
	}
	n, err := t.get(c.Ino)
	if err != nil {
		return err
	}
	if err := mayWriteXattr(c.Cred, &n.Attr, c.Name); err != nil {
		return err
	}
	key := store.XattrKey(uint64(c.Ino), c.Name)
	_, err = t.sm.st.Get(key)
	exists := err == nil
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return errnof(syscall.EIO, "read xattr: %v", err)
	}
	if c.Op == OpRemoveXattr {
		if !exists {
			return errnof(syscall.ENODATA, "no xattr %q", c.Name)
		}
		t.b.Delete(key)
	} else {
		if len(c.Value) > MaxXattrValue {
			return errnof(syscall.E2BIG, "xattr value of %d bytes", len(c.Value))
		}
		if c.Flags&^(proto.XattrCreate|proto.XattrReplace) != 0 {
			return errnof(syscall.EINVAL, "xattr flags %#x", c.Flags)
		}
		if c.Flags&proto.XattrCreate != 0 && exists {
			return errnof(syscall.EEXIST, "xattr %q exists", c.Name)
		}
		if c.Flags&proto.XattrReplace != 0 && !exists {
			return errnof(syscall.ENODATA, "no xattr %q", c.Name)
		}
		t.b.Set(key, c.Value)
		n.Keyed |= inodeHasXattrs
	}
	n.Ctime = c.Now
	t.put(n)
	t.res.attr = n.Attr
	return nil
}

func (t *txn) writeDone(c *Command) error {
	n, err := t.get(c.Ino)
	if err != nil {
		return err
	}
	if n.IsDir() {
		return errnof(syscall.EISDIR, "write to directory %d", c.Ino)
	}
	if !n.IsRegular() {
		return errnof(syscall.EINVAL, "write to non-regular inode %d", c.Ino)
	}
	if c.Flags&writeViaHandle == 0 {
		if err := may(c.Cred, &n.Attr, accessWrite, "write"); err != nil {
			return err
		}
	}
	killSuid(c.Cred, &n.Attr)
	t.takeCopy(n, c) // before Written changes: it says whether the file is new
	n.Size = max(n.Size, c.Size)
	n.Mtime = writeMtime(n.Mtime, c)
	n.Ctime = c.Now
	if c.Blocks != nil {
		n.Blocks = *c.Blocks
	}
	n.Written = true
	t.put(n)
	t.res.attr = n.Attr
	return nil
}

// writeMtime is a file's mtime after the WriteDone c: the time of the
// writer's last write (c.SetAttr.Mtime with SetMtime; without it, c.Now),
// unless the file's mtime cur is later and not in the future, which means
// something changed the file after that write (a write recorded by another
// client, a truncate). An explicit set to a future time does not outlast a
// later write, as on ext4.
func writeMtime(cur int64, c *Command) int64 {
	if c.SetAttr.Valid&proto.SetMtime == 0 {
		return c.Now
	}
	if m := c.SetAttr.Mtime; cur <= m || cur > c.Now {
		return m
	}
	return cur
}

func (t *txn) setLayout(c *Command) error {
	if c.Layout == nil {
		return errnof(syscall.EINVAL, "setlayout without a layout")
	}
	n, err := t.get(c.Ino)
	if err != nil {
		return err
	}
	if n.IsDir() && !ownerOrRoot(c.Cred, &n.Attr) {
		return errnof(syscall.EPERM, "only the owner may set the default layout of directory %d", c.Ino)
	}
	if !n.IsDir() {
		if err := may(c.Cred, &n.Attr, accessWrite, "set the layout of"); err != nil {
			return err
		}
	}
	l := c.Layout.Clone()
	l.Stale = nil // stale marks are the state of a file's objects, never asked for
	l.ObjectsSized = false
	if err := l.ValidatePolicy(); err != nil {
		return errnof(syscall.EINVAL, "%v", err)
	}
	switch {
	case n.IsDir():
		if err := checkPolicyDomains(l, c); err != nil {
			return err
		}
		if len(l.Targets) > 0 {
			probe := l.Clone()
			if probe.StripeCount == layout.AllTargets {
				probe.StripeCount = int32(len(probe.Targets) / probe.Width())
			}
			if err := probe.ValidateFile(); err != nil {
				return errnof(syscall.EINVAL, "%v", err)
			}
			for _, id := range l.Targets {
				if _, ok := t.targetUUID(id); !ok {
					return errnof(syscall.EINVAL, "target %d is not registered", id)
				}
			}
		}
		n.Layout = l
	case n.IsRegular():
		if n.Size > 0 || n.Written {
			return errnof(syscall.EBUSY, "layout of inode %d cannot change: the file has data", c.Ino)
		}
		if n.Layout, err = t.placeFile(l, c); err != nil {
			return err
		}
	default:
		return errnof(syscall.EINVAL, "inode %d has no layout", c.Ino)
	}
	n.Ctime = c.Now
	t.put(n)
	t.res.attr = n.Attr
	return nil
}

func (t *txn) registerTarget(c *Command) error {
	uuid := c.Text
	if uuid == "" || len(uuid) > 256 {
		return errnof(syscall.EINVAL, "bad target uuid %q", uuid)
	}
	id, known := t.sm.uuidToID[uuid]
	rec := targetRecord{uuid: uuid, addr: c.Addr}
	if c.Flags&registerTrusted == 0 {
		rec.owner = c.Name
	}
	if known {
		v, err := t.sm.st.Get(store.TargetIDKey(uint32(id)))
		if err != nil {
			return errnof(syscall.EIO, "target %s: read record: %v", uuid, err)
		}
		old, err := decodeTargetRecord(v)
		if err != nil {
			return errnof(syscall.EIO, "target %s: %v", uuid, err)
		}
		if old.state == TargetRemoved {
			return errnof(syscall.EPERM, "target %s (id %d) was removed from the file system: format its directory again to use it", uuid, id)
		}
		rec.state, rec.auto = old.state, old.auto
		switch {
		case c.Flags&registerTrusted != 0 || old.owner == "":
			// keep the owner, or the first named registrant takes it
			rec.owner = cmp.Or(old.owner, rec.owner)
		case old.owner != c.Name:
			return errnof(syscall.EPERM, "target %s belongs to %q, not %q", uuid, old.owner, c.Name)
		}
	}
	switch {
	case known && c.TargetID != 0 && c.TargetID != id:
		return errnof(syscall.EINVAL, "target %s has id %d, not %d", uuid, id, c.TargetID)
	case known:
	case c.TargetID != 0:
		if other, taken := t.sm.idToUUID[c.TargetID]; taken {
			return errnof(syscall.EINVAL, "target id %d belongs to %s, not %s", c.TargetID, other, uuid)
		}
		id = c.TargetID
		t.nextTarget = max(t.nextTarget, uint32(id)+1)
	default:
		id = proto.TargetID(max(t.nextTarget, 1))
		t.nextTarget = uint32(id) + 1
	}
	t.b.Set(store.TargetUUIDKey(uuid), binary.BigEndian.AppendUint32(nil, uint32(id)))
	t.b.Set(store.TargetIDKey(uint32(id)), encodeTargetRecord(rec))
	t.res.target = id
	t.res.targetRec = rec
	return nil
}

func (t *txn) reclaim(c *Command) error {
	for _, ino := range c.Inos {
		n, err := t.get(ino)
		if errors.Is(err, syscall.ENOENT) {
			continue // already reclaimed
		}
		if err != nil {
			return err
		}
		if n.Nlink != 0 {
			continue // linked again or never orphaned: not ours to delete
		}
		if err := t.reclaimInode(n, true); err != nil {
			return err
		}
	}
	return nil
}

// reclaimInode deletes n, an orphan (marked in the store) or an inode
// losing its last link in this command (never marked), with its xattrs,
// and queues its objects for GC.
func (t *txn) reclaimInode(n *inode, marked bool) error {
	ino := n.Ino
	// Point deletes of the keys there are (almost always none), not a
	// range deletion: every range tombstone in pebble's memtable is
	// fragmented again by each later read until the memtable is flushed,
	// so one per reclaimed inode made a burst of unlinks quadratic
	// (docs/performance.md, "One process's creates and deletes"). And
	// only where the inode says there may be some (inode.Keyed).
	if n.Keyed&inodeHasXattrs != 0 {
		if err := t.deleteKeysWithPrefix(store.XattrPrefix(uint64(ino))); err != nil {
			return errnof(syscall.EIO, "scan xattrs: %v", err)
		}
	}
	if n.Keyed&inodeHasLost != 0 {
		if err := t.deleteKeysWithPrefix(store.LostPrefix(uint64(ino))); err != nil {
			return errnof(syscall.EIO, "scan lost objects: %v", err)
		}
	}
	if n.IsRegular() {
		for i, tg := range n.Layout.Targets {
			t.setScratch(store.AppendGCKey(t.sm.kb, uint32(tg), uint64(ino), uint32(i), n.Gen), nil)
			t.res.gcQueued++
		}
	}
	if marked {
		t.b.Delete(store.OrphanKey(uint64(ino)))
	}
	t.dropCopy(n)
	delete(t.cache, ino)
	delete(t.dirty, ino)
	t.deleted[ino] = true
	t.inodes--
	t.res.orphans = slices.DeleteFunc(t.res.orphans, func(o proto.Ino) bool { return o == ino })
	return nil
}

// deleteKeysWithPrefix deletes, in the txn's batch, every key of the
// store that starts with p. The batch copies each key (store.Batch), so
// the scan's keys are deleted as they come.
func (t *txn) deleteKeysWithPrefix(p []byte) error {
	return t.sm.st.Scan(p, store.PrefixEnd(p), func(k, _ []byte) bool {
		t.b.Delete(k)
		return true
	})
}

// fileOfGen returns the regular file ino of generation gen: EINVAL for
// another kind of inode, ESTALE for another file that had the number
// (commands about a file's objects name the generation they were made for).
func (t *txn) fileOfGen(ino proto.Ino, gen uint64) (*inode, error) {
	n, err := t.get(ino)
	if err != nil {
		return nil, err
	}
	if !n.IsRegular() {
		return nil, errnof(syscall.EINVAL, "inode %d is not a regular file", ino)
	}
	if n.Gen != gen {
		return nil, errnof(syscall.ESTALE, "inode %d is generation %#x, not %#x", ino, n.Gen, gen)
	}
	return n, nil
}

// staleClear in an OpStale's Flags clears the slots instead of marking them.
const staleClear = 2

// stale marks slots of a protected file stale (a copy or shard that missed
// a write: never read until repaired) or clears them (repaired). Marking
// the last readable copies of a stripe is refused with EIO: the writer
// then fails its write rather than acknowledge bytes no copy holds. The
// caller must be allowed to write the file (or hold a write handle).
func (t *txn) stale(c *Command) error {
	n, err := t.fileOfGen(c.Ino, c.Gen)
	if err != nil {
		return err
	}
	if c.Flags&writeViaHandle == 0 {
		if err := may(c.Cred, &n.Attr, accessWrite, "mark objects of"); err != nil {
			return err
		}
	}
	if n.Layout.Kind == layout.RAID0 {
		return errnof(syscall.EINVAL, "inode %d is not protected: nothing can be stale", c.Ino)
	}
	for _, s := range c.Slots {
		if int(s) >= len(n.Layout.Targets) {
			return errnof(syscall.EINVAL, "inode %d has no slot %d", c.Ino, s)
		}
	}
	var l layout.Layout
	if c.Flags&staleClear != 0 {
		if n.Mtime != c.SetAttr.Mtime {
			return errnof(syscall.EBUSY, "inode %d was written during its repair (mtime %d, repair began at %d): repair again", c.Ino, n.Mtime, c.SetAttr.Mtime)
		}
		l = n.Layout.WithoutStale(c.Slots...)
	} else {
		l = n.Layout.WithStale(c.Slots...)
		t.sm.staleMarks.Add(1)
	}
	if err := l.ValidateFile(); err != nil {
		return errnof(syscall.EIO, "inode %d: marking slots %v stale leaves a stripe unreadable: %v", c.Ino, c.Slots, err)
	}
	n.Layout = l
	t.put(n)
	t.res.attr = n.Attr
	return nil
}
