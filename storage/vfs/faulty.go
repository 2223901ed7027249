package vfs

import (
	"io"
	"os"
	"strings"
	"sync"
)

// Op is a set of operations that a fault Rule applies to.
type Op uint32

const (
	OpOpen     Op = 1 << iota // Create, Open, OpenFile, OpenDir
	OpRead                    // File.ReadAt
	OpWrite                   // File.WriteAt
	OpTruncate                // File.Truncate
	OpSync                    // File.Sync
	OpRemove                  // FS.Remove
	OpRename                  // FS.Rename
	OpMkdir                   // FS.MkdirAll
	OpStat                    // FS.Stat, File.Stat, FS.ReadDir, FS.Statfs

	OpAll Op = 1<<iota - 1
)

// Rule says which calls fail and how. A call matches when its operation is
// in Ops and Match (if set) accepts its path.
type Rule struct {
	Ops   Op
	Match func(path string) bool // nil matches every path
	// Err is returned by matching calls (typically a syscall.Errno such as
	// syscall.ENOSPC or syscall.EIO). With CorruptRead it is ignored.
	Err error
	// After lets this many matching calls succeed before the rule fires.
	After int
	// Times bounds how many calls fail; 0 means every call after After.
	Times int
	// CorruptRead makes matching ReadAt calls succeed but flip the bits of
	// the first byte they return, instead of failing.
	CorruptRead bool
}

// Suffix returns a Match func that accepts paths ending in s.
func Suffix(s string) func(string) bool {
	return func(p string) bool { return strings.HasSuffix(p, s) }
}

// Contains returns a Match func that accepts paths containing s.
func Contains(s string) func(string) bool {
	return func(p string) bool { return strings.Contains(p, s) }
}

// Faulty wraps an FS and injects the faults of its rules. Rules are checked
// in the order they were added; the first one that fires decides.
type Faulty struct {
	fs    FS
	mu    sync.Mutex
	rules []*ruleState
}

type ruleState struct {
	Rule
	seen, fired int
}

// NewFaulty wraps fs. With no rules it behaves exactly like fs.
func NewFaulty(fs FS) *Faulty { return &Faulty{fs: fs} }

// Inject adds a rule and returns a func that removes it.
func (f *Faulty) Inject(r Rule) (remove func()) {
	rs := &ruleState{Rule: r}
	f.mu.Lock()
	f.rules = append(f.rules, rs)
	f.mu.Unlock()
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		for i, x := range f.rules {
			if x == rs {
				f.rules = append(f.rules[:i], f.rules[i+1:]...)
				return
			}
		}
	}
}

// Reset removes every rule.
func (f *Faulty) Reset() {
	f.mu.Lock()
	f.rules = nil
	f.mu.Unlock()
}

// Fired reports how many calls the rules have failed or corrupted so far.
func (f *Faulty) Fired() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, r := range f.rules {
		n += r.fired
	}
	return n
}

// check returns the rule that fires for this call, if any.
func (f *Faulty) check(op Op, path string) *ruleState {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.rules {
		if r.Ops&op == 0 || (r.Match != nil && !r.Match(path)) {
			continue
		}
		r.seen++
		if r.seen <= r.After || (r.Times > 0 && r.fired >= r.Times) {
			continue
		}
		r.fired++
		return r
	}
	return nil
}

func (f *Faulty) fail(op Op, opName, path string) error {
	if r := f.check(op, path); r != nil && !r.CorruptRead {
		return &os.PathError{Op: opName, Path: path, Err: r.Err}
	}
	return nil
}

func (f *Faulty) wrap(name string, file File, err error) (File, error) {
	if err != nil {
		return nil, err
	}
	return &faultyFile{File: file, fs: f, name: name}, nil
}

func (f *Faulty) Create(name string) (File, error) {
	if err := f.fail(OpOpen, "open", name); err != nil {
		return nil, err
	}
	file, err := f.fs.Create(name)
	return f.wrap(name, file, err)
}

func (f *Faulty) Open(name string) (File, error) {
	if err := f.fail(OpOpen, "open", name); err != nil {
		return nil, err
	}
	file, err := f.fs.Open(name)
	return f.wrap(name, file, err)
}

func (f *Faulty) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	if err := f.fail(OpOpen, "open", name); err != nil {
		return nil, err
	}
	file, err := f.fs.OpenFile(name, flag, perm)
	return f.wrap(name, file, err)
}

func (f *Faulty) OpenDir(name string) (File, error) {
	if err := f.fail(OpOpen, "open", name); err != nil {
		return nil, err
	}
	file, err := f.fs.OpenDir(name)
	return f.wrap(name, file, err)
}

func (f *Faulty) Remove(name string) error {
	if err := f.fail(OpRemove, "remove", name); err != nil {
		return err
	}
	return f.fs.Remove(name)
}

func (f *Faulty) Rename(oldname, newname string) error {
	if err := f.fail(OpRename, "rename", oldname); err != nil {
		return err
	}
	return f.fs.Rename(oldname, newname)
}

func (f *Faulty) MkdirAll(dir string, perm os.FileMode) error {
	if err := f.fail(OpMkdir, "mkdir", dir); err != nil {
		return err
	}
	return f.fs.MkdirAll(dir, perm)
}

func (f *Faulty) Stat(name string) (os.FileInfo, error) {
	if err := f.fail(OpStat, "stat", name); err != nil {
		return nil, err
	}
	return f.fs.Stat(name)
}

func (f *Faulty) ReadDir(dir string) ([]string, error) {
	if err := f.fail(OpStat, "readdir", dir); err != nil {
		return nil, err
	}
	return f.fs.ReadDir(dir)
}

func (f *Faulty) Statfs(path string) (Usage, error) {
	if err := f.fail(OpStat, "statfs", path); err != nil {
		return Usage{}, err
	}
	return f.fs.Statfs(path)
}

func (f *Faulty) Lock(name string) (io.Closer, error) {
	if err := f.fail(OpOpen, "lock", name); err != nil {
		return nil, err
	}
	return f.fs.Lock(name)
}

type faultyFile struct {
	File
	fs   *Faulty
	name string
}

func (f *faultyFile) ReadAt(p []byte, off int64) (int, error) {
	r := f.fs.check(OpRead, f.name)
	if r != nil && !r.CorruptRead {
		return 0, &os.PathError{Op: "read", Path: f.name, Err: r.Err}
	}
	n, err := f.File.ReadAt(p, off)
	if r != nil && n > 0 {
		p[0] ^= 0xff
	}
	return n, err
}

func (f *faultyFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.fs.fail(OpWrite, "write", f.name); err != nil {
		return 0, err
	}
	return f.File.WriteAt(p, off)
}

func (f *faultyFile) Truncate(size int64) error {
	if err := f.fs.fail(OpTruncate, "truncate", f.name); err != nil {
		return err
	}
	return f.File.Truncate(size)
}

func (f *faultyFile) Sync() error {
	if err := f.fs.fail(OpSync, "sync", f.name); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f *faultyFile) Stat() (os.FileInfo, error) {
	if err := f.fs.fail(OpStat, "stat", f.name); err != nil {
		return nil, err
	}
	return f.File.Stat()
}

// NextData passes on the wrapped file's knowledge of its holes.
func (f *faultyFile) NextData(off int64) (int64, int64, error) { return NextData(f.File, off) }
