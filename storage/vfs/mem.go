package vfs

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// MemFS is an in-memory FS for tests. Written data is never lost (Sync does
// nothing), so reopening a target on the same MemFS models a restart after
// kill -9, when the kernel's page cache keeps every completed write.
type MemFS struct {
	mu     sync.Mutex
	root   *memNode
	total  uint64          // reported by Statfs
	locked map[string]bool // names held by Lock; guarded by mu
}

// Lock implements FS: one holder per name within this MemFS.
func (m *MemFS) Lock(name string) (io.Closer, error) {
	f, err := m.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	f.Close()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.locked[name] {
		return nil, &os.PathError{Op: "lock", Path: name, Err: ErrLocked}
	}
	if m.locked == nil {
		m.locked = map[string]bool{}
	}
	m.locked[name] = true
	return memLock{m, name}, nil
}

type memLock struct {
	m    *MemFS
	name string
}

func (l memLock) Close() error {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	delete(l.m.locked, l.name)
	return nil
}

type memNode struct {
	mu       sync.Mutex // guards data and mtime for files
	name     string
	dir      bool
	children map[string]*memNode // directories only; guarded by MemFS.mu
	data     []byte
	mtime    time.Time
}

// NewMem returns an empty in-memory filesystem whose Statfs reports total
// bytes (free is total minus the bytes held by files).
func NewMem(total uint64) *MemFS {
	return &MemFS{root: &memNode{name: "/", dir: true, children: map[string]*memNode{}}, total: total}
}

func splitPath(name string) []string {
	name = filepath.Clean("/" + name)
	if name == "/" {
		return nil
	}
	return strings.Split(name[1:], "/")
}

// walk returns the node at name, or its parent and the missing last element.
// m.mu must be held.
func (m *MemFS) walk(name string) (parent, node *memNode, base string, err error) {
	parts := splitPath(name)
	if len(parts) == 0 {
		return nil, m.root, "/", nil
	}
	cur := m.root
	for i, p := range parts {
		if !cur.dir {
			return nil, nil, "", syscall.ENOTDIR
		}
		next := cur.children[p]
		if i == len(parts)-1 {
			return cur, next, p, nil
		}
		if next == nil {
			return nil, nil, "", syscall.ENOENT
		}
		cur = next
	}
	panic("unreachable")
}

func pathErr(op, name string, err error) error {
	return &os.PathError{Op: op, Path: name, Err: err}
}

func (m *MemFS) Create(name string) (File, error) {
	return m.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
}

func (m *MemFS) Open(name string) (File, error) { return m.OpenFile(name, os.O_RDONLY, 0) }

func (m *MemFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	parent, n, base, err := m.walk(name)
	if err != nil {
		return nil, pathErr("open", name, err)
	}
	if n == nil {
		if flag&os.O_CREATE == 0 || parent == nil {
			return nil, pathErr("open", name, syscall.ENOENT)
		}
		n = &memNode{name: base, mtime: time.Now()}
		parent.children[base] = n
	} else if flag&(os.O_CREATE|os.O_EXCL) == os.O_CREATE|os.O_EXCL {
		return nil, pathErr("open", name, syscall.EEXIST)
	}
	if n.dir {
		if flag&(os.O_WRONLY|os.O_RDWR) != 0 {
			return nil, pathErr("open", name, syscall.EISDIR)
		}
		return &memFile{n: n, fs: m, name: name, readOnly: true}, nil
	}
	if flag&os.O_TRUNC != 0 {
		n.mu.Lock()
		n.data = nil
		n.mu.Unlock()
	}
	return &memFile{n: n, fs: m, name: name, readOnly: flag&(os.O_WRONLY|os.O_RDWR) == 0}, nil
}

func (m *MemFS) OpenDir(name string) (File, error) {
	f, err := m.Open(name)
	if err != nil {
		return nil, err
	}
	if !f.(*memFile).n.dir {
		return nil, pathErr("open", name, syscall.ENOTDIR)
	}
	return f, nil
}

func (m *MemFS) Remove(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	parent, n, base, err := m.walk(name)
	if err != nil {
		return pathErr("remove", name, err)
	}
	if n == nil || parent == nil {
		return pathErr("remove", name, syscall.ENOENT)
	}
	if n.dir {
		return pathErr("remove", name, syscall.EISDIR) // as unlink(2)
	}
	delete(parent.children, base)
	return nil
}

func (m *MemFS) Rename(oldname, newname string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	op, n, ob, err := m.walk(oldname)
	if err != nil || n == nil || op == nil {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: syscall.ENOENT}
	}
	np, existing, nb, err := m.walk(newname)
	if err != nil || np == nil {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: syscall.ENOENT}
	}
	if existing != nil && existing.dir {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: syscall.EISDIR}
	}
	delete(op.children, ob)
	n.name = nb
	np.children[nb] = n
	return nil
}

func (m *MemFS) MkdirAll(dir string, perm os.FileMode) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	cur := m.root
	for _, p := range splitPath(dir) {
		next := cur.children[p]
		if next == nil {
			next = &memNode{name: p, dir: true, children: map[string]*memNode{}, mtime: time.Now()}
			cur.children[p] = next
		} else if !next.dir {
			return pathErr("mkdir", dir, syscall.ENOTDIR)
		}
		cur = next
	}
	return nil
}

func (m *MemFS) Stat(name string) (os.FileInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, n, _, err := m.walk(name)
	if err == nil && n == nil {
		err = syscall.ENOENT
	}
	if err != nil {
		return nil, pathErr("stat", name, err)
	}
	return n.stat(), nil
}

func (m *MemFS) ReadDir(dir string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, n, _, err := m.walk(dir)
	if err == nil && n == nil {
		err = syscall.ENOENT
	}
	if err == nil && !n.dir {
		err = syscall.ENOTDIR
	}
	if err != nil {
		return nil, pathErr("readdir", dir, err)
	}
	names := make([]string, 0, len(n.children))
	for k := range n.children {
		names = append(names, k)
	}
	sort.Strings(names)
	return names, nil
}

func (m *MemFS) Statfs(path string) (Usage, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var used uint64
	var sum func(n *memNode)
	sum = func(n *memNode) {
		if !n.dir {
			n.mu.Lock()
			used += uint64(len(n.data))
			n.mu.Unlock()
			return
		}
		for _, c := range n.children {
			sum(c)
		}
	}
	sum(m.root)
	free := uint64(0)
	if used < m.total {
		free = m.total - used
	}
	return Usage{Total: m.total, Free: free}, nil
}

func (n *memNode) stat() os.FileInfo {
	if n.dir {
		return memInfo{name: n.name, mode: fs.ModeDir | 0o755, mtime: n.mtime}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return memInfo{name: n.name, size: int64(len(n.data)), mode: 0o644, mtime: n.mtime}
}

type memInfo struct {
	name  string
	size  int64
	mode  fs.FileMode
	mtime time.Time
}

func (i memInfo) Name() string       { return i.name }
func (i memInfo) Size() int64        { return i.size }
func (i memInfo) Mode() fs.FileMode  { return i.mode }
func (i memInfo) ModTime() time.Time { return i.mtime }
func (i memInfo) IsDir() bool        { return i.mode.IsDir() }
func (i memInfo) Sys() any           { return nil }

type memFile struct {
	n        *memNode
	fs       *MemFS
	name     string
	readOnly bool
	mu       sync.Mutex
	closed   bool
}

func (f *memFile) check(op string, write bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return pathErr(op, f.name, os.ErrClosed)
	}
	if write && f.readOnly {
		return pathErr(op, f.name, syscall.EBADF)
	}
	if write && f.n.dir {
		return pathErr(op, f.name, syscall.EISDIR)
	}
	return nil
}

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.check("read", false); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, pathErr("read", f.name, syscall.EINVAL)
	}
	if f.n.dir {
		return 0, pathErr("read", f.name, syscall.EISDIR)
	}
	f.n.mu.Lock()
	defer f.n.mu.Unlock()
	if off >= int64(len(f.n.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.n.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *memFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.check("write", true); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, pathErr("write", f.name, syscall.EINVAL)
	}
	f.n.mu.Lock()
	defer f.n.mu.Unlock()
	end := off + int64(len(p))
	if end > int64(len(f.n.data)) {
		f.n.data = growTo(f.n.data, end)
	}
	copy(f.n.data[off:], p)
	f.n.mtime = time.Now()
	return len(p), nil
}

// growTo extends b with zeros to length n, doubling capacity so that
// sequential appends stay linear.
func growTo(b []byte, n int64) []byte {
	if n <= int64(cap(b)) {
		old := len(b)
		b = b[:n]
		clear(b[old:])
		return b
	}
	nb := make([]byte, n, max(n, int64(cap(b))*2))
	copy(nb, b)
	return nb
}

func (f *memFile) Truncate(size int64) error {
	if err := f.check("truncate", true); err != nil {
		return err
	}
	if size < 0 {
		return pathErr("truncate", f.name, syscall.EINVAL)
	}
	f.n.mu.Lock()
	defer f.n.mu.Unlock()
	if size <= int64(len(f.n.data)) {
		f.n.data = f.n.data[:size]
	} else {
		f.n.data = growTo(f.n.data, size)
	}
	f.n.mtime = time.Now()
	return nil
}

func (f *memFile) Sync() error { return f.check("sync", false) }

func (f *memFile) Stat() (os.FileInfo, error) {
	if err := f.check("stat", false); err != nil {
		return nil, err
	}
	return f.n.stat(), nil
}

func (f *memFile) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return pathErr("close", f.name, os.ErrClosed)
	}
	f.closed = true
	return nil
}

func (f *memFile) String() string { return fmt.Sprintf("memfile(%s)", f.name) }
