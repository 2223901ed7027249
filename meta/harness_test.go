package meta

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/weft-fs/weft/meta/store"
	"github.com/weft-fs/weft/proto"
)

// clock is a manual clock for tests: time moves only when told.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

var testEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newClock() *clock { return &clock{t: testEpoch} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// fakeStorage records removals; a target in down fails them with EIO.
type fakeStorage struct {
	mu      sync.Mutex
	removed []GCObject
	down    map[proto.TargetID]bool
	batches map[proto.TargetID]int // RemoveMany calls that succeeded
}

func newFakeStorage() *fakeStorage {
	return &fakeStorage{down: map[proto.TargetID]bool{}, batches: map[proto.TargetID]int{}}
}

func (f *fakeStorage) Batches(t proto.TargetID) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.batches[t]
}

func (f *fakeStorage) setDown(t proto.TargetID, down bool) {
	f.mu.Lock()
	f.down[t] = down
	f.mu.Unlock()
}

func (f *fakeStorage) Removed() []GCObject {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.removed)
}

func (f *fakeStorage) Read(context.Context, proto.TargetID, proto.ObjectID, uint64, []byte) (int, error) {
	return 0, syscall.ENOSYS
}
func (f *fakeStorage) Write(context.Context, proto.TargetID, proto.ObjectID, uint64, []byte) (uint64, error) {
	return 0, syscall.ENOSYS
}
func (f *fakeStorage) Truncate(context.Context, proto.TargetID, proto.ObjectID, uint64) error {
	return syscall.ENOSYS
}
func (f *fakeStorage) Sync(context.Context, proto.TargetID, proto.ObjectID) error { return nil }
func (f *fakeStorage) Space(context.Context, proto.TargetID, proto.ObjectID, proto.SpaceMode, uint64, uint64) error {
	return syscall.ENOSYS
}
func (f *fakeStorage) Allocated(context.Context, proto.TargetID, proto.ObjectID) (uint64, error) {
	return 0, syscall.ENOSYS
}
func (f *fakeStorage) Copy(context.Context, proto.TargetID, proto.ObjectID, uint64, proto.TargetID, proto.ObjectID, uint64, uint64, []byte) error {
	return syscall.ENOSYS
}
func (f *fakeStorage) Seek(context.Context, proto.TargetID, proto.ObjectID, uint64, proto.SeekWhat) (uint64, error) {
	return 0, syscall.ENOSYS
}
func (f *fakeStorage) Remove(ctx context.Context, t proto.TargetID, o proto.ObjectID) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down[t] {
		return fmt.Errorf("fake: target %d down: %w", t, syscall.EIO)
	}
	f.removed = append(f.removed, GCObject{Target: t, Obj: o})
	return nil
}
func (f *fakeStorage) RemoveMany(ctx context.Context, t proto.TargetID, objs []proto.ObjectID) error {
	for _, o := range objs {
		if err := f.Remove(ctx, t, o); err != nil {
			return err
		}
	}
	f.mu.Lock()
	f.batches[t]++
	f.mu.Unlock()
	return nil
}

// env is a server on an in-memory store with a manual clock.
type env struct {
	t       testing.TB
	st      store.Store
	clock   *clock
	storage *fakeStorage
	srv     *Server
	opts    Options
}

func newEnv(t testing.TB, mod ...func(*Options)) *env {
	t.Helper()
	e := &env{t: t, st: store.NewMem(), clock: newClock(), storage: newFakeStorage()}
	e.opts = Options{
		Store: e.st, Storage: e.storage, Now: e.clock.Now, Seed: 1,
		OrphanGrace: time.Hour, GCInterval: 20 * time.Millisecond,
		HeartbeatTimeout: 10 * time.Second,
	}
	for _, m := range mod {
		m(&e.opts)
	}
	e.st = e.opts.Store
	e.start()
	t.Cleanup(func() {
		e.srv.Close()
		e.st.Close()
	})
	return e
}

func (e *env) start() {
	e.t.Helper()
	srv, err := New(e.opts)
	if err != nil {
		e.t.Fatal(err)
	}
	e.srv = srv
}

// restart closes the server and opens a new one on the same store.
func (e *env) restart() {
	e.t.Helper()
	e.srv.Close()
	e.start()
}

var ctx = context.Background()

// resolve walks an absolute path from the root.
func (e *env) resolve(p string) (proto.Attr, error) {
	a, err := e.srv.GetAttr(ctx, proto.RootIno)
	if err != nil {
		return a, err
	}
	for _, name := range strings.Split(strings.Trim(p, "/"), "/") {
		if name == "" {
			continue
		}
		if a, err = e.srv.Lookup(ctx, a.Ino, name); err != nil {
			return a, err
		}
	}
	return a, nil
}

// parentOf resolves the directory of p and returns it with p's last name.
func (e *env) parentOf(p string) (proto.Ino, string, error) {
	i := strings.LastIndex(p, "/")
	dir, name := p[:i+1], p[i+1:]
	a, err := e.resolve(dir)
	return a.Ino, name, err
}

func (e *env) must(err error) {
	e.t.Helper()
	if err != nil {
		e.t.Fatal(err)
	}
}

// addTarget registers a target that is up with the given free space.
func (e *env) addTarget(uuid string, free uint64) proto.TargetID {
	e.t.Helper()
	id, err := e.srv.RegisterTarget(ctx, uuid, proto.TargetInfo{Addr: "host:" + uuid, Total: free * 2, Used: free, Free: free})
	e.must(err)
	return id
}

// waitFor polls cond (for up to 2 minutes, a hang guard).
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute) // a hang guard
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// errName renders an error as its errno name (ENOENT) for scenario output.
func errName(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return unix.ErrnoName(errno)
	}
	return err.Error()
}

func modeString(m uint32) string {
	t := "?"
	switch m & syscall.S_IFMT {
	case syscall.S_IFDIR:
		t = "d"
	case syscall.S_IFREG:
		t = "-"
	case syscall.S_IFLNK:
		t = "l"
	case syscall.S_IFIFO:
		t = "p"
	case syscall.S_IFSOCK:
		t = "s"
	case syscall.S_IFCHR:
		t = "c"
	case syscall.S_IFBLK:
		t = "b"
	}
	return fmt.Sprintf("%s%04o", t, m&07777)
}

// fmtAttr renders attributes with times in seconds since the test epoch.
func fmtAttr(a proto.Attr) string {
	ts := func(ns int64) string {
		d := time.Duration(ns - testEpoch.UnixNano())
		return fmt.Sprintf("%g", d.Seconds())
	}
	s := fmt.Sprintf("ino=%d %s nlink=%d uid=%d gid=%d size=%d atime=%s mtime=%s ctime=%s",
		a.Ino, modeString(a.Mode), a.Nlink, a.Uid, a.Gid, a.Size, ts(a.Atime), ts(a.Mtime), ts(a.Ctime))
	if a.Rdev != 0 {
		s += fmt.Sprintf(" rdev=%d", a.Rdev)
	}
	if a.IsRegular() || a.IsDir() {
		s += fmt.Sprintf(" layout=%d/%d%v", a.Layout.StripeSize>>10, a.Layout.StripeCount, a.Layout.Targets)
	}
	return s
}

// tree renders the namespace under ino, one entry per line.
func (e *env) tree(b *strings.Builder, ino proto.Ino, prefix string, attrs bool) {
	after := ""
	for {
		ents, err := e.srv.ReadDir(ctx, ino, after, 2)
		if err != nil {
			fmt.Fprintf(b, "%s: error %s\n", prefix, errName(err))
			return
		}
		if len(ents) == 0 {
			return
		}
		for _, de := range ents {
			p := prefix + "/" + de.Name
			if attrs {
				fmt.Fprintf(b, "%s %s\n", p, fmtAttr(de.Attr))
			} else {
				fmt.Fprintf(b, "%s %s ino=%d nlink=%d\n", p, modeString(de.Attr.Mode), de.Attr.Ino, de.Attr.Nlink)
			}
			if de.Attr.IsSymlink() {
				tgt, _ := e.srv.Readlink(ctx, de.Attr.Ino)
				fmt.Fprintf(b, "%s -> %s\n", strings.Repeat(" ", len(p)), tgt)
			}
			if de.Attr.IsDir() {
				e.tree(b, de.Attr.Ino, p, attrs)
			}
		}
		after = ents[len(ents)-1].Name
	}
}
