package meta

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"syscall"

	"github.com/weft-fs/weft/meta/metarpc"
	"github.com/weft-fs/weft/meta/store"
	"github.com/weft-fs/weft/proto"
	"github.com/weft-fs/weft/wire"
)

// Quotas (see docs/quotas.md).
//
// Every inode counts against three accounts: its owner's (user uid), its
// group's (gid) and its project's (Project, 0 for none). It counts one
// inode, and a regular file also its size in bytes (the apparent size,
// not allocated blocks: see below). An account's record (store key "q")
// holds its usage and its limits in one value.
//
// Usage is exact because it is never counted by hand in the commands: the
// transaction remembers each inode's charge as it was read from the store
// (txn.get) and, before the command's batch is written, adds the
// difference between what every changed or deleted inode counts now and
// what it counted then (txn.chargeQuota). Create, link, unlink, reclaim,
// WriteDone, truncate, chown and a project change are all covered, and the
// usage changes in the same batch as the inodes that cause it, so a crash
// or a replay cannot make them disagree.
//
// Limits are enforced at apply time, against the state: a command that
// would raise an account's inodes or bytes above a non-zero limit fails
// with EDQUOT and changes nothing. Root is exempt from inode limits and
// from the byte limits of a chown, not from byte limits of writes and
// truncates (see chargeQuota); trusted in-process callers from all. A command that lowers usage, or leaves it
// unchanged, is never refused, even over a limit (one lowered below the
// usage). Since commands apply one at a time, concurrent clients can
// never take an account past its limit together.
//
// Bytes are the sizes recorded by WriteDone and SetAttr, not the blocks
// the objects hold: the size is what the metadata service decides itself
// (a client reports blocks, and mirrored or erasure-coded copies would
// count several times); holes count as if written.

// charge is what one inode counts against its accounts.
type charge struct {
	uid, gid, project uint32
	bytes             uint64
	counted           bool // false: the inode does not exist (counts nothing)
}

func chargeOf(n *inode) charge {
	c := charge{uid: n.Uid, gid: n.Gid, project: n.Project, counted: true}
	if n.IsRegular() {
		c.bytes = n.Size
	}
	return c
}

type quotaKey struct {
	kind uint8
	id   uint32
}

// quotaRecord is the stored value of one account.
type quotaRecord struct {
	usage, limits metarpc.QuotaAmounts
}

// quotaRecordVersion is the format of a quota record (its first byte).
const quotaRecordVersion = 1

func (r quotaRecord) encode() []byte { return r.appendTo(make([]byte, 0, 33)) }

// appendTo appends the record (encode) to b.
func (r quotaRecord) appendTo(b []byte) []byte {
	e := &wire.Encoder{B: b}
	e.U8(quotaRecordVersion)
	e.U64(r.usage.Inodes)
	e.U64(r.usage.Bytes)
	e.U64(r.limits.Inodes)
	e.U64(r.limits.Bytes)
	return e.B
}

func decodeQuotaRecord(b []byte) (quotaRecord, error) {
	d := wire.NewDecoder(b)
	if v := d.U8(); d.Err() == nil && v != quotaRecordVersion {
		return quotaRecord{}, fmt.Errorf("meta: quota record version %d not supported", v)
	}
	var r quotaRecord
	r.usage.Inodes, r.usage.Bytes = d.U64(), d.U64()
	r.limits.Inodes, r.limits.Bytes = d.U64(), d.U64()
	if err := d.Done(); err != nil {
		return quotaRecord{}, fmt.Errorf("meta: decode quota record: %w", err)
	}
	return r, nil
}

func loadQuota(st store.Reader, k quotaKey) (quotaRecord, error) {
	v, err := st.Get(store.QuotaKey(k.kind, k.id))
	if errors.Is(err, store.ErrNotFound) {
		return quotaRecord{}, nil
	}
	if err != nil {
		return quotaRecord{}, errnof(syscall.EIO, "read quota %s %d: %v", metarpc.QuotaKind(k.kind), k.id, err)
	}
	r, err := decodeQuotaRecord(v)
	if err != nil {
		return quotaRecord{}, errnof(syscall.EIO, "quota %s %d: %v", metarpc.QuotaKind(k.kind), k.id, err)
	}
	return r, nil
}

// quota returns account k as this command sees it: as it wrote it, or as
// committed (the state machine's cache, else the store, then cached).
func (t *txn) quota(k quotaKey) (quotaRecord, error) {
	if r, ok := t.quotaW[k]; ok {
		return r, nil
	}
	if r, ok := t.sm.quotas[k]; ok {
		return r, nil
	}
	r, err := loadQuota(t.sm.st, k)
	if err == nil {
		t.sm.quotas[k] = r // committed state: safe to keep whatever this command does
	}
	return r, err
}

// setQuotaRecord writes account k in the command's batch; the state
// machine's cache takes it when the batch is committed.
func (t *txn) setQuotaRecord(k quotaKey, r quotaRecord) {
	if t.quotaW == nil {
		t.quotaW = map[quotaKey]quotaRecord{}
	}
	t.quotaW[k] = r
	t.setScratch(store.AppendQuotaKey(t.sm.kb, k.kind, k.id), r.appendTo(t.sm.vb))
}

// delta is a signed change of an account's usage.
type delta struct{ inodes, bytes int64 }

// deltas are the usage changes of one command, by account: a few (three
// per inode changed, most of them shared), so a list searched in place
// costs less than a map made for each command.
type deltas []accountDelta

type accountDelta struct {
	k quotaKey
	d delta
}

// add returns ds with account k's usage changed by inodes and bytes.
func (ds deltas) add(k quotaKey, inodes, bytes int64) deltas {
	for i := range ds {
		if ds[i].k == k {
			ds[i].d.inodes += inodes
			ds[i].d.bytes += bytes
			return ds
		}
	}
	return append(ds, accountDelta{k, delta{inodes, bytes}})
}

// accounts are the accounts an inode's charge counts against.
func (c charge) accounts() [3]quotaKey {
	return [...]quotaKey{{uint8(metarpc.QuotaUser), c.uid}, {uint8(metarpc.QuotaGroup), c.gid}, {uint8(metarpc.QuotaProject), c.project}}
}

// addTo returns ds with c's charge added (sign 1) or taken off (-1).
func (c charge) addTo(ds deltas, sign int64) deltas {
	if !c.counted {
		return ds
	}
	for _, k := range c.accounts() {
		ds = ds.add(k, sign, sign*int64(c.bytes))
	}
	return ds
}

// chargeQuota adds the usage changes of the command's inode changes to the
// batch, refusing with EDQUOT a change that takes an account over a limit
// when the caller is subject to quotas (not root, not trusted).
func (t *txn) chargeQuota(c *Command) error {
	var room [12]accountDelta
	ds := deltas(room[:0])
	for ino := range t.dirty {
		ds = t.orig[ino].addTo(ds, -1)
		ds = chargeOf(t.cache[ino]).addTo(ds, 1)
	}
	for ino := range t.deleted {
		ds = t.orig[ino].addTo(ds, -1)
	}
	ds = slices.DeleteFunc(ds, func(a accountDelta) bool { return a.d == (delta{}) })
	slices.SortFunc(ds, func(a, b accountDelta) int {
		return cmp.Or(cmp.Compare(a.k.kind, b.k.kind), cmp.Compare(a.k.id, b.k.id))
	})
	// Inode limits and ownership changes bind callers other than root;
	// byte limits bind every size growth of a file, root's too (only a
	// trusted in-process caller is exempt): a mount records the size a
	// user wrote at the file's release, which the kernel sends without
	// the writer's credentials.
	enforce := !isRootCred(c.Cred)
	enforceBytes := enforce || (c.Cred != nil && (c.Op == OpWriteDone || (c.Op == OpSetAttr && c.SetAttr.Valid&proto.SetSize != 0)))
	for _, kd := range ds {
		k, d := kd.k, kd.d
		r, err := t.quota(k)
		if err != nil {
			return err
		}
		u := &r.usage
		newInodes, newBytes := addDelta(u.Inodes, d.inodes), addDelta(u.Bytes, d.bytes)
		if enforce {
			if d.inodes > 0 && r.limits.Inodes != 0 && newInodes > r.limits.Inodes {
				return errnof(syscall.EDQUOT, "%s %d: inode quota of %d exceeded", metarpc.QuotaKind(k.kind), k.id, r.limits.Inodes)
			}
		}
		if enforceBytes {
			if d.bytes > 0 && r.limits.Bytes != 0 && newBytes > r.limits.Bytes {
				return errnof(syscall.EDQUOT, "%s %d: byte quota of %d exceeded (%d in use, %d more asked)", metarpc.QuotaKind(k.kind), k.id, r.limits.Bytes, u.Bytes, d.bytes)
			}
		}
		u.Inodes, u.Bytes = newInodes, newBytes
		t.setQuotaRecord(k, r)
	}
	return nil
}

// addDelta adds d to u; usage never goes below 0 (a record that was
// wrong already stays at 0 rather than wrap; quota check finds it).
func addDelta(u uint64, d int64) uint64 {
	if d < 0 && uint64(-d) > u {
		return 0
	}
	return uint64(int64(u) + d)
}

// isRootCred reports whether a command's caller may administer quotas:
// root or a trusted caller.
func isRootCred(c *proto.Cred) bool { return c == nil || c.Uid == 0 }

// setQuota sets an account's limits, keeping its usage.
func (t *txn) setQuota(c *Command) error {
	if !isRootCred(c.Cred) {
		return errnof(syscall.EPERM, "only root may set quotas")
	}
	q := c.Quota
	if q == nil || !metarpc.QuotaKind(q.Kind).Valid() {
		return errnof(syscall.EINVAL, "set-quota without a valid account")
	}
	k := quotaKey{q.Kind, q.ID}
	r, err := t.quota(k)
	if err != nil {
		return err
	}
	r.limits = metarpc.QuotaAmounts{Inodes: q.Inodes, Bytes: q.Bytes}
	t.setQuotaRecord(k, r)
	return nil
}

// setProject tags the inodes c.Inos with project c.Quota.ID; their usage
// moves to it (chargeQuota). Inodes that are gone are skipped.
func (t *txn) setProject(c *Command) error {
	if !isRootCred(c.Cred) {
		return errnof(syscall.EPERM, "only root may set project ids")
	}
	if c.Quota == nil {
		return errnof(syscall.EINVAL, "set-project without a project id")
	}
	for _, ino := range c.Inos {
		n, err := t.get(ino)
		if err != nil {
			if len(c.Inos) > 1 && isErrno(err, syscall.ENOENT) {
				continue // removed while the tree was walked
			}
			return err
		}
		if n.Project == c.Quota.ID {
			continue
		}
		n.Project = c.Quota.ID
		n.Ctime = c.Now
		t.put(n)
	}
	return nil
}

// recount sets every account's usage to a recount from the inodes,
// keeping the limits, and marks the store's usage complete (counter
// quotas). A store formatted before quotas gets it once at start; weft
// quota check --repair proposes it. It scans every inode, in one batch.
func (t *txn) recount(c *Command) error {
	if !isRootCred(c.Cred) {
		return errnof(syscall.EPERM, "only root may recount quotas")
	}
	cs, err := checkQuota(t.sm.st)
	if err != nil {
		return err
	}
	for _, x := range cs {
		// From the store, not the cache: a repair is for records that
		// disagree with the inodes, whatever the cause.
		k := quotaKey{uint8(x.Kind), x.ID}
		r, err := loadQuota(t.sm.st, k)
		if err != nil {
			return err
		}
		if r.usage == x.Counted {
			t.sm.quotas[k] = r
			continue
		}
		r.usage = x.Counted
		t.setQuotaRecord(k, r)
	}
	t.b.Set(store.CounterKey(store.CounterQuotas), u64(1))
	return nil
}

// quotasCounted reports whether the store's usage counts every inode.
func quotasCounted(st store.Reader) (bool, error) {
	_, err := st.Get(store.CounterKey(store.CounterQuotas))
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// recountIfNeeded recounts the usage of a store formatted before quotas
// (once: the recount sets counter quotas).
func (s *Server) recountIfNeeded(ctx context.Context) error {
	ok, err := quotasCounted(s.st)
	if err != nil || ok {
		return err
	}
	s.log.Info("meta: counting quota usage of a store formatted before quotas")
	_, err = s.propose(ctx, &Command{Op: OpRecount, Now: s.now()})
	return err
}

func isErrno(err error, e syscall.Errno) bool { return errors.Is(err, e) }

// --- Server: metarpc.QuotaService ---

var _ metarpc.QuotaService = (*Server)(nil)

// SetQuota implements metarpc.QuotaService: root only (EPERM otherwise),
// checked when applied.
func (s *Server) SetQuota(ctx context.Context, kind metarpc.QuotaKind, id uint32, limits metarpc.QuotaAmounts) error {
	cl, err := s.caller(ctx)
	if err != nil {
		return err
	}
	if !kind.Valid() {
		return errnof(syscall.EINVAL, "quota kind %d", kind)
	}
	_, err = s.proposeAs(ctx, cl, &Command{Op: OpSetQuota, Now: s.now(), Cred: cl.cred,
		Quota: &QuotaSpec{Kind: uint8(kind), ID: id, Inodes: limits.Inodes, Bytes: limits.Bytes}})
	return err
}

// GetQuota implements metarpc.QuotaService. Root may read every account;
// others their own user's, their groups' and any project's (EPERM
// otherwise).
func (s *Server) GetQuota(ctx context.Context, kind metarpc.QuotaKind, id uint32) (metarpc.Quota, error) {
	cl, err := s.reader(ctx)
	if err != nil {
		return metarpc.Quota{}, err
	}
	if !kind.Valid() {
		return metarpc.Quota{}, errnof(syscall.EINVAL, "quota kind %d", kind)
	}
	if cr := cl.cred; !isRootCred(cr) {
		ok := kind == metarpc.QuotaProject ||
			(kind == metarpc.QuotaUser && cr.Uid == id) ||
			(kind == metarpc.QuotaGroup && (cr.Gid == id || slices.Contains(cr.Groups, id)))
		if !ok {
			return metarpc.Quota{}, errnof(syscall.EPERM, "uid %d may not read the quota of %s %d", cr.Uid, kind, id)
		}
	}
	r, err := loadQuota(s.st, quotaKey{uint8(kind), id})
	if err != nil {
		return metarpc.Quota{}, err
	}
	return metarpc.Quota{Kind: kind, ID: id, Usage: r.usage, Limits: r.limits}, nil
}

// setProjectBatch is how many inodes one set-project command tags.
const setProjectBatch = 512

// SetProject implements metarpc.QuotaService: root only. With recursive it
// walks the tree below ino breadth first, tagging each directory before
// listing it, in commands of up to setProjectBatch inodes: not atomic, but
// an inode created in a directory after the directory was tagged inherits
// the project, so when it returns the whole tree is tagged (except what
// was renamed into it meanwhile; run it again).
func (s *Server) SetProject(ctx context.Context, ino proto.Ino, id uint32, recursive bool) (uint64, error) {
	cl, err := s.caller(ctx)
	if err != nil {
		return 0, err
	}
	if !cl.isRoot() {
		return 0, errnof(syscall.EPERM, "only root may set project ids")
	}
	a, err := s.readInode(ino)
	if err != nil {
		return 0, err
	}
	var tagged uint64
	tag := func(inos []proto.Ino) error {
		if len(inos) == 0 {
			return nil
		}
		_, err := s.propose(ctx, &Command{Op: OpSetProject, Now: s.now(), Cred: cl.cred, Inos: inos, Quota: &QuotaSpec{Kind: uint8(metarpc.QuotaProject), ID: id}})
		if err == nil {
			tagged += uint64(len(inos))
		}
		return err
	}
	if err := tag([]proto.Ino{ino}); err != nil || !recursive || !a.IsDir() {
		return tagged, err
	}
	dirs := []proto.Ino{ino}
	var batch []proto.Ino
	for len(dirs) > 0 {
		dir := dirs[0]
		dirs = dirs[1:]
		after := ""
		for {
			ents, err := s.ReadDir(ctx, dir, after, MaxReadDir)
			if isErrno(err, syscall.ENOENT) || isErrno(err, syscall.ENOTDIR) {
				break // removed or replaced meanwhile
			}
			if err != nil {
				return tagged, err
			}
			for _, e := range ents {
				if e.Attr.IsDir() {
					// A directory is tagged before it is listed (at once).
					if err := tag([]proto.Ino{e.Attr.Ino}); err != nil {
						return tagged, err
					}
					dirs = append(dirs, e.Attr.Ino)
					continue
				}
				batch = append(batch, e.Attr.Ino)
				if len(batch) == setProjectBatch {
					if err := tag(batch); err != nil {
						return tagged, err
					}
					batch = batch[:0]
				}
			}
			if len(ents) < MaxReadDir {
				break
			}
			after = ents[len(ents)-1].Name
		}
	}
	return tagged, tag(batch)
}

// CheckQuota implements metarpc.QuotaService: root only. With repair it
// first sets every account's usage to a recount (one command; see
// recount), then checks. Without, it counts every
// account's usage from the inodes and returns it beside the recorded
// usage, for every account that has a record or a use. It reads one
// consistent snapshot of the store (inode and quota records are scanned
// together), so it is exact under load; it costs a scan of all inodes.
func (s *Server) CheckQuota(ctx context.Context, repair bool) ([]metarpc.QuotaCheck, error) {
	if repair {
		cl, err := s.caller(ctx)
		if err != nil {
			return nil, err
		}
		if _, err := s.proposeAs(ctx, cl, &Command{Op: OpRecount, Now: s.now(), Cred: cl.cred}); err != nil {
			return nil, err
		}
	}
	cl, err := s.reader(ctx)
	if err != nil {
		return nil, err
	}
	if !cl.isRoot() {
		return nil, errnof(syscall.EPERM, "only root may check quotas")
	}
	return checkQuota(s.st)
}

func checkQuota(st store.Reader) ([]metarpc.QuotaCheck, error) {
	counted := map[quotaKey]delta{}
	recorded := map[quotaKey]quotaRecord{}
	var bad error
	// 'i' (inodes) < 'q' (quota): one scan is one snapshot of both.
	err := st.Scan([]byte{store.PrefixInode}, []byte{store.PrefixQuota + 1}, func(k, v []byte) bool {
		switch k[0] {
		case store.PrefixInode:
			n, err := decodeInode(v)
			if err != nil {
				bad = err
				return false
			}
			c := chargeOf(n)
			for _, k := range c.accounts() {
				d := counted[k]
				d.inodes++
				d.bytes += int64(c.bytes)
				counted[k] = d
			}
		case store.PrefixQuota:
			kind, id, ok := store.ParseQuotaKey(k)
			if !ok {
				bad = fmt.Errorf("meta: bad quota key %q", k)
				return false
			}
			r, err := decodeQuotaRecord(v)
			if err != nil {
				bad = err
				return false
			}
			recorded[quotaKey{kind, id}] = r
		}
		return true
	})
	if err == nil {
		err = bad
	}
	if err != nil {
		return nil, errnof(syscall.EIO, "quota check: %v", err)
	}
	keys := map[quotaKey]bool{}
	for k := range counted {
		keys[k] = true
	}
	for k := range recorded {
		keys[k] = true
	}
	out := make([]metarpc.QuotaCheck, 0, len(keys))
	for k := range keys {
		d := counted[k]
		out = append(out, metarpc.QuotaCheck{Kind: metarpc.QuotaKind(k.kind), ID: k.id,
			Recorded: recorded[k].usage,
			Counted:  metarpc.QuotaAmounts{Inodes: uint64(d.inodes), Bytes: uint64(d.bytes)}})
	}
	slices.SortFunc(out, func(a, b metarpc.QuotaCheck) int { return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.ID, b.ID)) })
	return out, nil
}
