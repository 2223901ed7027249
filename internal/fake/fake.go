// Package fake is an in-memory implementation of proto.MetaService and
// proto.StorageService for the client's and the FUSE adapter's unit tests.
//
// It is deliberately simple: one mutex per service, no persistence, no
// permission checks (the kernel does those with default_permissions). It
// keeps the parts of the contracts the client depends on: orphaned inodes live
// until their last Release, WriteDone extends the size and sets mtime, reads
// past the end of an object are short, and layouts are assigned round-robin
// over the configured targets. Faults can be injected into storage calls.
//
// Nothing outside tests may import it.
package fake

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/weft-fs/weft/capability"
	"github.com/weft-fs/weft/layout"
	"github.com/weft-fs/weft/proto"
)

type inode struct {
	attr     proto.Attr
	children map[string]proto.Ino // directories
	sorted   []string             // children's names in order; nil = rebuild
	target   string               // symlinks
	xattrs   map[string][]byte
	opens    int
}

// Meta is an in-memory proto.MetaService.
type Meta struct {
	mu      sync.Mutex
	next    proto.Ino
	inodes  map[proto.Ino]*inode
	targets []proto.TargetInfo
	rr      int
	store   *Storage // objects removed when a file's last link and handle go
	def     layout.Layout

	capKey      *capability.Key // nil: no capabilities issued
	capLifetime time.Duration
	capNow      func() time.Time
	capCalls    int
	capLast     proto.Access
}

// LastCapabilityAccess is the access the last Capability call asked for.
func (m *Meta) LastCapabilityAccess() proto.Access {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.capLast
}

// IssueCapabilities makes Open and Capability return capabilities signed
// with key, issued at the time now gives and valid for lifetime. The fake
// checks no permissions.
func (m *Meta) IssueCapabilities(key *capability.Key, lifetime time.Duration, now func() time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.capKey, m.capLifetime, m.capNow = key, lifetime, now
}

// CapabilityCalls reports how many times Capability was called.
func (m *Meta) CapabilityCalls() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.capCalls
}

func (m *Meta) issue(n *inode, want proto.Access) ([]byte, error) {
	if m.capKey == nil || !n.attr.IsRegular() || want == 0 {
		return nil, nil
	}
	now := m.capNow()
	return m.capKey.Sign(capability.Capability{Ino: n.attr.Ino, Rights: want.Grants(), Issued: now, Expiry: now.Add(m.capLifetime)})
}

// Capability implements proto.MetaService.
func (m *Meta) Capability(_ context.Context, ino proto.Ino, want proto.Access) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.capCalls++
	m.capLast = want
	n, err := m.get(ino)
	if err != nil {
		return nil, err
	}
	if !n.attr.IsRegular() {
		return nil, syscall.EINVAL
	}
	return m.issue(n, want)
}

// NewMeta returns a namespace with an empty root directory and the given
// targets (all up, 1 TiB each). store, if non-nil, has objects removed when
// files die.
func NewMeta(targets []proto.TargetID, store *Storage) *Meta {
	m := &Meta{next: proto.RootIno + 1, inodes: map[proto.Ino]*inode{}, store: store, def: layout.Default()}
	for _, t := range targets {
		m.targets = append(m.targets, proto.TargetInfo{ID: t, Addr: fmt.Sprintf("fake:%d", t), Total: 1 << 40, Free: 1 << 40, Up: true})
	}
	now := time.Now().UnixNano()
	m.inodes[proto.RootIno] = &inode{
		attr:     proto.Attr{Ino: proto.RootIno, Mode: syscall.S_IFDIR | 0o777, Nlink: 2, Atime: now, Mtime: now, Ctime: now},
		children: map[string]proto.Ino{}, xattrs: map[string][]byte{},
	}
	return m
}

// SetDefaultLayout changes the filesystem-wide default layout (stripe size
// and count; the count is capped at the number of targets).
func (m *Meta) SetDefaultLayout(l layout.Layout) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.def = l
}

func (m *Meta) get(ino proto.Ino) (*inode, error) {
	n := m.inodes[ino]
	if n == nil {
		return nil, syscall.ENOENT
	}
	return n, nil
}

func (m *Meta) dir(ino proto.Ino) (*inode, error) {
	n, err := m.get(ino)
	if err != nil {
		return nil, err
	}
	if !n.attr.IsDir() {
		return nil, syscall.ENOTDIR
	}
	return n, nil
}

func checkName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return syscall.EINVAL
	}
	if len(name) > 255 {
		return syscall.ENAMETOOLONG
	}
	return nil
}

func (m *Meta) newInode(mode, uid, gid uint32) *inode {
	now := time.Now().UnixNano()
	n := &inode{attr: proto.Attr{Ino: m.next, Mode: mode, Nlink: 1, Uid: uid, Gid: gid, Atime: now, Mtime: now, Ctime: now}, xattrs: map[string][]byte{}}
	m.next++
	m.inodes[n.attr.Ino] = n
	return n
}

func (m *Meta) touch(n *inode) {
	now := time.Now().UnixNano()
	n.attr.Mtime, n.attr.Ctime = now, now
}

// resolveLayout picks the targets of a new file from the parent's default,
// the explicit request or the filesystem default.
func (m *Meta) resolveLayout(parent *inode, explicit *layout.Layout) layout.Layout {
	l := m.def
	if parent.attr.Layout.StripeSize != 0 {
		l = parent.attr.Layout
	}
	if explicit != nil {
		l = *explicit
	}
	l = l.Clone()
	if len(l.Targets) > 0 {
		l.StripeCount = int32(len(l.Targets))
		return l
	}
	count := int(l.StripeCount)
	if count <= 0 || count > len(m.targets) {
		count = len(m.targets)
	}
	l.StripeCount = int32(count)
	l.Targets = nil
	for i := 0; i < count; i++ {
		l.Targets = append(l.Targets, m.targets[(m.rr+i)%len(m.targets)].ID)
	}
	m.rr++
	return l
}

// Lookup implements proto.MetaService.
func (m *Meta) Lookup(_ context.Context, parent proto.Ino, name string) (proto.Attr, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, err := m.dir(parent)
	if err != nil {
		return proto.Attr{}, err
	}
	ino, ok := d.children[name]
	if !ok {
		return proto.Attr{}, syscall.ENOENT
	}
	return m.attr(ino), nil
}

func (m *Meta) attr(ino proto.Ino) proto.Attr {
	a := m.inodes[ino].attr
	a.Layout = a.Layout.Clone()
	return a
}

// GetAttr implements proto.MetaService.
func (m *Meta) GetAttr(_ context.Context, ino proto.Ino) (proto.Attr, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, err := m.get(ino); err != nil {
		return proto.Attr{}, err
	}
	return m.attr(ino), nil
}

// SetAttr implements proto.MetaService. Object truncation is the client's job.
func (m *Meta) SetAttr(_ context.Context, ino proto.Ino, in proto.SetAttrIn) (proto.Attr, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.get(ino)
	if err != nil {
		return proto.Attr{}, err
	}
	now := time.Now().UnixNano()
	a := &n.attr
	if in.Valid&proto.SetMode != 0 {
		a.Mode = a.Mode&syscall.S_IFMT | in.Mode&0o7777
	}
	if in.Valid&proto.SetUid != 0 {
		a.Uid = in.Uid
	}
	if in.Valid&proto.SetGid != 0 {
		a.Gid = in.Gid
	}
	if in.Valid&proto.SetSize != 0 {
		if a.IsDir() {
			return proto.Attr{}, syscall.EISDIR
		}
		a.Size = in.Size
		a.Mtime = now
	}
	if in.Valid&proto.SetAtime != 0 {
		a.Atime = in.Atime
	}
	if in.Valid&proto.SetMtime != 0 {
		a.Mtime = in.Mtime
	}
	if in.Valid&proto.SetAtimeNow != 0 {
		a.Atime = now
	}
	if in.Valid&proto.SetMtimeNow != 0 {
		a.Mtime = now
	}
	a.Ctime = now
	if in.Valid&proto.SetCtime != 0 {
		a.Ctime = in.Ctime
	}
	return m.attr(ino), nil
}

// Create implements proto.MetaService.
func (m *Meta) Create(_ context.Context, in proto.CreateIn) (proto.Attr, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := checkName(in.Name); err != nil {
		return proto.Attr{}, err
	}
	d, err := m.dir(in.Parent)
	if err != nil {
		return proto.Attr{}, err
	}
	if ino, ok := d.children[in.Name]; ok {
		if in.Exclusive {
			return proto.Attr{}, syscall.EEXIST
		}
		return m.attr(ino), nil
	}
	if in.Mode&syscall.S_IFMT == 0 {
		in.Mode |= syscall.S_IFREG
	}
	n := m.newInode(in.Mode, in.Uid, in.Gid)
	n.attr.Rdev = in.Rdev
	if n.attr.IsRegular() {
		n.attr.Layout = m.resolveLayout(d, in.Layout)
	}
	d.children[in.Name] = n.attr.Ino
	d.sorted = nil
	m.touch(d)
	return m.attr(n.attr.Ino), nil
}

// Mkdir implements proto.MetaService.
func (m *Meta) Mkdir(_ context.Context, parent proto.Ino, name string, mode, uid, gid uint32) (proto.Attr, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := checkName(name); err != nil {
		return proto.Attr{}, err
	}
	d, err := m.dir(parent)
	if err != nil {
		return proto.Attr{}, err
	}
	if _, ok := d.children[name]; ok {
		return proto.Attr{}, syscall.EEXIST
	}
	n := m.newInode(syscall.S_IFDIR|mode&0o7777, uid, gid)
	n.attr.Nlink = 2
	n.children = map[string]proto.Ino{}
	d.children[name] = n.attr.Ino
	d.sorted = nil
	d.attr.Nlink++
	m.touch(d)
	return m.attr(n.attr.Ino), nil
}

// Symlink implements proto.MetaService.
func (m *Meta) Symlink(_ context.Context, parent proto.Ino, name, target string, uid, gid uint32) (proto.Attr, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := checkName(name); err != nil {
		return proto.Attr{}, err
	}
	d, err := m.dir(parent)
	if err != nil {
		return proto.Attr{}, err
	}
	if _, ok := d.children[name]; ok {
		return proto.Attr{}, syscall.EEXIST
	}
	n := m.newInode(syscall.S_IFLNK|0o777, uid, gid)
	n.target = target
	n.attr.Size = uint64(len(target))
	d.children[name] = n.attr.Ino
	d.sorted = nil
	m.touch(d)
	return m.attr(n.attr.Ino), nil
}

// Readlink implements proto.MetaService.
func (m *Meta) Readlink(_ context.Context, ino proto.Ino) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.get(ino)
	if err != nil {
		return "", err
	}
	if !n.attr.IsSymlink() {
		return "", syscall.EINVAL
	}
	return n.target, nil
}

// Link implements proto.MetaService.
func (m *Meta) Link(_ context.Context, ino, newParent proto.Ino, newName string) (proto.Attr, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := checkName(newName); err != nil {
		return proto.Attr{}, err
	}
	n, err := m.get(ino)
	if err != nil {
		return proto.Attr{}, err
	}
	if n.attr.IsDir() {
		return proto.Attr{}, syscall.EPERM
	}
	d, err := m.dir(newParent)
	if err != nil {
		return proto.Attr{}, err
	}
	if _, ok := d.children[newName]; ok {
		return proto.Attr{}, syscall.EEXIST
	}
	d.children[newName] = ino
	d.sorted = nil
	n.attr.Nlink++
	n.attr.Ctime = time.Now().UnixNano()
	m.touch(d)
	return m.attr(ino), nil
}

// drop decrements a link and frees the inode when nothing refers to it.
func (m *Meta) drop(n *inode) {
	if n.attr.IsDir() {
		n.attr.Nlink = 0
	} else {
		n.attr.Nlink--
	}
	n.attr.Ctime = time.Now().UnixNano()
	m.maybeFree(n)
}

func (m *Meta) maybeFree(n *inode) {
	if n.attr.Nlink > 0 || n.opens > 0 {
		return
	}
	delete(m.inodes, n.attr.Ino)
	if m.store != nil && n.attr.IsRegular() {
		for i, t := range n.attr.Layout.Targets {
			_ = m.store.Remove(context.Background(), t, proto.ObjectID{Ino: n.attr.Ino, Stripe: uint32(i)})
		}
	}
}

// Unlink implements proto.MetaService.
func (m *Meta) Unlink(_ context.Context, parent proto.Ino, name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, err := m.dir(parent)
	if err != nil {
		return err
	}
	ino, ok := d.children[name]
	if !ok {
		return syscall.ENOENT
	}
	n := m.inodes[ino]
	if n.attr.IsDir() {
		return syscall.EISDIR
	}
	delete(d.children, name)
	d.sorted = nil
	m.touch(d)
	m.drop(n)
	return nil
}

// Rmdir implements proto.MetaService.
func (m *Meta) Rmdir(_ context.Context, parent proto.Ino, name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, err := m.dir(parent)
	if err != nil {
		return err
	}
	ino, ok := d.children[name]
	if !ok {
		return syscall.ENOENT
	}
	n := m.inodes[ino]
	if !n.attr.IsDir() {
		return syscall.ENOTDIR
	}
	if len(n.children) > 0 {
		return syscall.ENOTEMPTY
	}
	delete(d.children, name)
	d.sorted = nil
	d.attr.Nlink--
	m.touch(d)
	m.drop(n)
	return nil
}

// Rename implements proto.MetaService (without the loop check a real server
// needs: tests do not move a directory under itself).
func (m *Meta) Rename(_ context.Context, oldParent proto.Ino, oldName string, newParent proto.Ino, newName string, flags uint32) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := checkName(newName); err != nil {
		return err
	}
	od, err := m.dir(oldParent)
	if err != nil {
		return err
	}
	nd, err := m.dir(newParent)
	if err != nil {
		return err
	}
	src, ok := od.children[oldName]
	if !ok {
		return syscall.ENOENT
	}
	dst, exists := nd.children[newName]
	switch {
	case flags&proto.RenameExchange != 0:
		if !exists {
			return syscall.ENOENT
		}
		od.children[oldName], nd.children[newName] = dst, src
		return nil
	case flags&proto.RenameNoReplace != 0 && exists:
		return syscall.EEXIST
	}
	if exists {
		if dst == src {
			return nil
		}
		dn := m.inodes[dst]
		sn := m.inodes[src]
		if dn.attr.IsDir() {
			if !sn.attr.IsDir() {
				return syscall.EISDIR
			}
			if len(dn.children) > 0 {
				return syscall.ENOTEMPTY
			}
			nd.attr.Nlink--
		} else if sn.attr.IsDir() {
			return syscall.ENOTDIR
		}
		m.drop(dn)
	}
	delete(od.children, oldName)
	od.sorted = nil
	nd.children[newName] = src
	nd.sorted = nil
	if m.inodes[src].attr.IsDir() && od != nd {
		od.attr.Nlink--
		nd.attr.Nlink++
	}
	m.touch(od)
	m.touch(nd)
	return nil
}

// ReadDir implements proto.MetaService.
func (m *Meta) ReadDir(_ context.Context, dir proto.Ino, after string, max int) ([]proto.DirEntry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, err := m.dir(dir)
	if err != nil {
		return nil, err
	}
	if d.sorted == nil {
		d.sorted = make([]string, 0, len(d.children))
		for name := range d.children {
			d.sorted = append(d.sorted, name)
		}
		sort.Strings(d.sorted)
	}
	i := sort.SearchStrings(d.sorted, after)
	if i < len(d.sorted) && d.sorted[i] == after {
		i++
	}
	names := d.sorted[i:min(len(d.sorted), i+max)]
	out := make([]proto.DirEntry, len(names))
	for i, name := range names {
		out[i] = proto.DirEntry{Name: name, Attr: m.attr(d.children[name])}
	}
	return out, nil
}

// GetXattr implements proto.MetaService.
func (m *Meta) GetXattr(_ context.Context, ino proto.Ino, name string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.get(ino)
	if err != nil {
		return nil, err
	}
	v, ok := n.xattrs[name]
	if !ok {
		return nil, syscall.ENODATA
	}
	return slices.Clone(v), nil
}

// SetXattr implements proto.MetaService.
func (m *Meta) SetXattr(_ context.Context, ino proto.Ino, name string, value []byte, flags uint32) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.get(ino)
	if err != nil {
		return err
	}
	_, ok := n.xattrs[name]
	if flags&proto.XattrCreate != 0 && ok {
		return syscall.EEXIST
	}
	if flags&proto.XattrReplace != 0 && !ok {
		return syscall.ENODATA
	}
	n.xattrs[name] = slices.Clone(value)
	n.attr.Ctime = time.Now().UnixNano()
	return nil
}

// ListXattr implements proto.MetaService.
func (m *Meta) ListXattr(_ context.Context, ino proto.Ino) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.get(ino)
	if err != nil {
		return nil, err
	}
	var names []string
	for k := range n.xattrs {
		names = append(names, k)
	}
	sort.Strings(names)
	return names, nil
}

// RemoveXattr implements proto.MetaService.
func (m *Meta) RemoveXattr(_ context.Context, ino proto.Ino, name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.get(ino)
	if err != nil {
		return err
	}
	if _, ok := n.xattrs[name]; !ok {
		return syscall.ENODATA
	}
	delete(n.xattrs, name)
	return nil
}

// Open implements proto.MetaService.
func (m *Meta) Open(_ context.Context, ino proto.Ino, want proto.Access) (proto.Attr, []byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.get(ino)
	if err != nil {
		return proto.Attr{}, nil, err
	}
	cap, err := m.issue(n, want)
	if err != nil {
		return proto.Attr{}, nil, err
	}
	n.opens++
	return m.attr(ino), cap, nil
}

// WriteDone implements proto.MetaService.
func (m *Meta) WriteDone(_ context.Context, ino proto.Ino, end uint64, mtime int64, blocks uint64) (proto.Attr, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.get(ino)
	if err != nil {
		return proto.Attr{}, err
	}
	n.attr.Size = max(n.attr.Size, end)
	if blocks != proto.NoBlocks {
		n.attr.Blocks = blocks
	}
	old := n.attr.Mtime
	m.touch(n)
	if mtime != 0 {
		n.attr.Mtime = mtime
		if old > mtime && old <= n.attr.Ctime {
			n.attr.Mtime = old
		}
	}
	return m.attr(ino), nil
}

// Release implements proto.MetaService.
func (m *Meta) Release(_ context.Context, ino proto.Ino) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.get(ino)
	if err != nil {
		return err
	}
	if n.opens > 0 {
		n.opens--
	}
	m.maybeFree(n)
	return nil
}

// OpenCount reports how many handles are open on ino (for tests).
func (m *Meta) OpenCount(ino proto.Ino) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n := m.inodes[ino]; n != nil {
		return n.opens
	}
	return 0
}

// SetLayout implements proto.MetaService.
func (m *Meta) SetLayout(_ context.Context, ino proto.Ino, l layout.Layout) (proto.Attr, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.get(ino)
	if err != nil {
		return proto.Attr{}, err
	}
	if err := l.ValidatePolicy(); err != nil {
		return proto.Attr{}, syscall.EINVAL
	}
	switch {
	case n.attr.IsDir():
		n.attr.Layout = l.Clone()
	case n.attr.IsRegular():
		if n.attr.Size != 0 {
			return proto.Attr{}, syscall.EBUSY
		}
		n.attr.Layout = m.resolveLayout(&inode{}, &l)
	default:
		return proto.Attr{}, syscall.EINVAL
	}
	n.attr.Ctime = time.Now().UnixNano()
	return m.attr(ino), nil
}

// StatFS implements proto.MetaService.
func (m *Meta) StatFS(context.Context) (proto.StatFS, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var s proto.StatFS
	for _, t := range m.targets {
		s.Total += t.Total
		s.Used += t.Used
		s.Free += t.Free
	}
	s.Files = uint64(len(m.inodes))
	s.FilesFree = 1 << 30
	return s, nil
}

// Targets implements proto.MetaService.
func (m *Meta) Targets(context.Context) ([]proto.TargetInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.targets), nil
}

// Op names a storage operation for fault injection.
type Op string

const (
	OpRead     Op = "read"
	OpWrite    Op = "write"
	OpTruncate Op = "truncate"
	OpSync     Op = "sync"
	OpSpace    Op = "space"
	OpSeek     Op = "seek"
)

// Storage is an in-memory proto.StorageService holding objects per target.
type Storage struct {
	mu       sync.Mutex
	objects  map[proto.TargetID]map[proto.ObjectID][]byte
	versions map[proto.ObjectID]uint64
	syncs    map[proto.ObjectID]int
	calls    map[Op]int
	// Fault, if set, is called before every operation; a non-nil error is
	// returned instead of doing it. It may sleep to simulate latency.
	fault func(op Op, t proto.TargetID, obj proto.ObjectID, off uint64, n int) error

	capKey  *capability.Key // nil: capabilities are not checked
	capNow  func() time.Time
	refused int
}

// RequireCapabilities makes every Read, Write, Truncate and Sync check the
// capability in its ctx (proto.CapabilityFrom) with key at the time now
// gives, as a storage server checks a client's: EACCES if it is missing,
// does not verify, or does not grant the access.
func (s *Storage) RequireCapabilities(key *capability.Key, now func() time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.capKey, s.capNow = key, now
}

// Refused reports how many operations were refused for their capability.
func (s *Storage) Refused() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refused
}

// NewStorage returns empty storage.
func NewStorage() *Storage {
	return &Storage{
		objects:  map[proto.TargetID]map[proto.ObjectID][]byte{},
		versions: map[proto.ObjectID]uint64{},
		syncs:    map[proto.ObjectID]int{},
		calls:    map[Op]int{},
	}
}

// SetFault installs (or with nil removes) a fault injector.
func (s *Storage) SetFault(f func(op Op, t proto.TargetID, obj proto.ObjectID, off uint64, n int) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fault = f
}

func (s *Storage) enter(ctx context.Context, op Op, t proto.TargetID, obj proto.ObjectID, off uint64, n int) error {
	s.mu.Lock()
	f := s.fault
	s.calls[op]++
	key, now := s.capKey, s.capNow
	s.mu.Unlock()
	if key != nil {
		want := proto.AccessWrite
		if op == OpRead {
			want = proto.AccessRead
		}
		c, err := key.Verify(proto.CapabilityFrom(ctx), now())
		if err == nil {
			err = c.Allows(obj.Ino, obj.Gen, want, "")
		}
		if err != nil {
			s.mu.Lock()
			s.refused++
			s.mu.Unlock()
			return fmt.Errorf("fake: %s refused: %w: %w", op, err, syscall.EACCES)
		}
	}
	if f != nil {
		if err := f(op, t, obj, off, n); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return syscall.ETIMEDOUT
	}
	return nil
}

// Calls reports how many operations of a kind were attempted.
func (s *Storage) Calls(op Op) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[op]
}

// Syncs reports how many times obj was synced.
func (s *Storage) Syncs(obj proto.ObjectID) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.syncs[obj]
}

// Object returns a copy of an object's bytes and whether it exists on t.
func (s *Storage) Object(t proto.TargetID, obj proto.ObjectID) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.objects[t][obj]
	return slices.Clone(b), ok
}

// Read implements proto.StorageService.
func (s *Storage) Read(ctx context.Context, t proto.TargetID, obj proto.ObjectID, off uint64, p []byte) (int, error) {
	if err := s.enter(ctx, OpRead, t, obj, off, len(p)); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.objects[t][obj]
	if off >= uint64(len(b)) {
		return 0, nil
	}
	return copy(p, b[off:]), nil
}

// Write implements proto.StorageService.
func (s *Storage) Write(ctx context.Context, t proto.TargetID, obj proto.ObjectID, off uint64, data []byte) (uint64, error) {
	if err := s.enter(ctx, OpWrite, t, obj, off, len(data)); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	objs := s.objects[t]
	if objs == nil {
		objs = map[proto.ObjectID][]byte{}
		s.objects[t] = objs
	}
	b := objs[obj]
	if end := off + uint64(len(data)); end > uint64(len(b)) {
		b = append(b, make([]byte, end-uint64(len(b)))...)
	}
	copy(b[off:], data)
	objs[obj] = b
	s.versions[obj]++
	return s.versions[obj], nil
}

// Truncate implements proto.StorageService.
func (s *Storage) Truncate(ctx context.Context, t proto.TargetID, obj proto.ObjectID, size uint64) error {
	if err := s.enter(ctx, OpTruncate, t, obj, size, 0); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	objs := s.objects[t]
	if objs == nil {
		objs = map[proto.ObjectID][]byte{}
		s.objects[t] = objs
	}
	b := objs[obj]
	if size <= uint64(len(b)) {
		b = b[:size:size]
	} else {
		b = append(b, make([]byte, size-uint64(len(b)))...)
	}
	objs[obj] = b
	s.versions[obj]++
	return nil
}

// Sync implements proto.StorageService.
func (s *Storage) Sync(ctx context.Context, t proto.TargetID, obj proto.ObjectID) error {
	if err := s.enter(ctx, OpSync, t, obj, 0, 0); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.syncs[obj]++
	return nil
}

// Space implements proto.StorageService: punched and zeroed ranges become
// zeros, allocation grows the object. The fake has no holes.
func (s *Storage) Space(ctx context.Context, t proto.TargetID, obj proto.ObjectID, mode proto.SpaceMode, off, n uint64) error {
	if err := s.enter(ctx, OpSpace, t, obj, off, int(n)); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	objs := s.objects[t]
	if objs == nil {
		objs = map[proto.ObjectID][]byte{}
		s.objects[t] = objs
	}
	b := objs[obj]
	if mode != proto.SpaceAllocate && off < uint64(len(b)) {
		clear(b[off:min(off+n, uint64(len(b)))])
	}
	if mode != proto.SpacePunch && off+n > uint64(len(b)) {
		b = append(b, make([]byte, off+n-uint64(len(b)))...)
	}
	objs[obj] = b
	s.versions[obj]++
	return nil
}

// Seek implements proto.StorageService: every byte of an object is data.
func (s *Storage) Seek(ctx context.Context, t proto.TargetID, obj proto.ObjectID, off uint64, what proto.SeekWhat) (uint64, error) {
	if err := s.enter(ctx, OpSeek, t, obj, off, 0); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	size := uint64(len(s.objects[t][obj]))
	switch {
	case what == proto.SeekHole:
		return max(off, size), nil
	case off < size:
		return off, nil
	}
	return 0, syscall.ENXIO
}

// Allocated implements proto.StorageService: the fake has no holes, so
// an object holds its length.
func (s *Storage) Allocated(_ context.Context, t proto.TargetID, obj proto.ObjectID) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return uint64(len(s.objects[t][obj])), nil
}

// Copy implements proto.StorageService, as a Read and a Write.
func (s *Storage) Copy(ctx context.Context, t proto.TargetID, dst proto.ObjectID, dstOff uint64, srcT proto.TargetID, src proto.ObjectID, srcOff, n uint64, _ []byte) error {
	buf := make([]byte, n)
	got, err := s.Read(ctx, srcT, src, srcOff, buf)
	if err != nil {
		return err
	}
	clear(buf[got:])
	_, err = s.Write(ctx, t, dst, dstOff, buf)
	return err
}

// Remove implements proto.StorageService.
func (s *Storage) Remove(_ context.Context, t proto.TargetID, obj proto.ObjectID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.objects[t], obj)
	return nil
}

// RemoveMany implements proto.StorageService.
func (s *Storage) RemoveMany(ctx context.Context, t proto.TargetID, objs []proto.ObjectID) error {
	for _, obj := range objs {
		if err := s.Remove(ctx, t, obj); err != nil {
			return err
		}
	}
	return nil
}

var (
	_ proto.MetaService    = (*Meta)(nil)
	_ proto.StorageService = (*Storage)(nil)
)
