package fuse

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	gofuse "github.com/hanwen/go-fuse/v2/fuse"

	"github.com/weft-fs/weft/client"
	"github.com/weft-fs/weft/internal/checks"
	"github.com/weft-fs/weft/proto"
)

// groupsTTL is how long the supplementary groups of a process are reused
// before /proc is read again. A process rarely changes its groups (login
// shells do it once, before any file access), and reading /proc/PID/status
// per request would cost a syscall round per metadata operation; one read
// per process and second is noise even for mdtest.
const groupsTTL = time.Second

// maxCachedProcs bounds the cache; past it, expired entries are dropped.
const maxCachedProcs = 4096

// creds maps FUSE callers to the credentials the metadata server checks:
// uid and gid from the request header, supplementary groups from
// /proc/PID/status, cached per process for groupsTTL; and to the job id
// their requests are counted for (client.JobIDSource, cached alike).
type creds struct {
	mu    sync.Mutex
	procs map[uint32]procCred
	now   func() time.Time
	read  func(pid uint32) ([]uint32, error) // readGroups; tests replace it
	job   func(pid, uid uint32) string       // the mount's client.JobIDSource.JobID
	reads int                                // /proc reads done (for tests)
}

type procCred struct {
	uid, gid uint32
	groups   []uint32
	job      string
	until    time.Time
}

func newCreds(jobs client.JobIDSource) *creds {
	c := &creds{procs: map[uint32]procCred{}, now: time.Now, read: readGroups}
	if jobs != "" {
		c.job = jobs.JobID
	}
	return c
}

// with returns ctx carrying the credentials of the process that made the
// FUSE request served with ctx. A ctx without a FUSE caller (the mount's
// own work) is returned unchanged: the metadata client then sends the
// mount process's own credentials.
func (c *creds) with(ctx context.Context) context.Context {
	caller, ok := gofuse.FromContext(ctx)
	if !ok {
		return ctx
	}
	cr, job := c.lookup(caller.Uid, caller.Gid, caller.Pid)
	return proto.WithCredJob(ctx, cr, job)
}

// withJob returns ctx carrying only the job of the FUSE caller (reads,
// which need no credentials), or ctx itself when there is none.
func (c *creds) withJob(ctx context.Context) context.Context {
	if c.job == nil {
		return ctx
	}
	caller, ok := gofuse.FromContext(ctx)
	if !ok {
		return ctx
	}
	if _, job := c.lookup(caller.Uid, caller.Gid, caller.Pid); job != "" {
		return proto.WithJob(ctx, job)
	}
	return ctx
}

// withoutJob is with for requests a process may make while it is in the
// middle of execve: the FLUSH of every close-on-exec file it had open on
// the mount (and the RELEASE after it). Such a process holds its exec
// lock until the FLUSH is answered, and reading its /proc/PID/environ
// (for the job id) takes that lock: the mount would wait for the process
// and the process for the mount, for ever. So a credentials cache miss
// here reads only the groups (/proc/PID/status takes no such lock) and is
// not cached; a hit gives the cached job too.
func (c *creds) withoutJob(ctx context.Context) context.Context {
	caller, ok := gofuse.FromContext(ctx)
	if !ok {
		return ctx
	}
	cr, job := c.lookupEnv(caller.Uid, caller.Gid, caller.Pid, false)
	return proto.WithCredJob(ctx, cr, job)
}

func (c *creds) cred(uid, gid, pid uint32) proto.Cred {
	cr, _ := c.lookup(uid, gid, pid)
	return cr
}

// lookup returns the credentials and job id of process pid.
func (c *creds) lookup(uid, gid, pid uint32) (proto.Cred, string) {
	return c.lookupEnv(uid, gid, pid, true)
}

// lookupEnv is lookup; with env false, a cache miss reads no job id (no
// /proc/PID/environ) and is not cached (see withoutJob).
func (c *creds) lookupEnv(uid, gid, pid uint32, env bool) (proto.Cred, string) {
	now := c.now()
	c.mu.Lock()
	e, ok := c.procs[pid]
	c.mu.Unlock()
	// A pid whose uid or gid changed (setuid, or the pid was reused) is
	// read again.
	if ok && e.uid == uid && e.gid == gid && now.Before(e.until) {
		return proto.Cred{Uid: uid, Gid: gid, Groups: e.groups}, e.job
	}
	var groups []uint32
	var job string
	if pid != 0 {
		// A process that is gone (or a kernel thread) keeps its primary
		// group only, and has no job.
		if !checks.Off {
			groups, _ = c.read(pid)
		}
		if c.job != nil && env {
			job = c.job(pid, uid)
		}
	}
	if !env {
		return proto.Cred{Uid: uid, Gid: gid, Groups: groups}, ""
	}
	c.mu.Lock()
	c.reads++
	if len(c.procs) >= maxCachedProcs {
		for p, e := range c.procs {
			if !now.Before(e.until) {
				delete(c.procs, p)
			}
		}
		if len(c.procs) >= maxCachedProcs {
			clear(c.procs)
		}
	}
	c.procs[pid] = procCred{uid: uid, gid: gid, groups: groups, job: job, until: now.Add(groupsTTL)}
	c.mu.Unlock()
	return proto.Cred{Uid: uid, Gid: gid, Groups: groups}, job
}

// readGroups returns the supplementary groups of process pid, from the
// "Groups:" line of /proc/PID/status.
func readGroups(pid uint32) ([]uint32, error) {
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/status")
	if err != nil {
		return nil, err
	}
	return parseGroups(b)
}

func parseGroups(status []byte) ([]uint32, error) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		line, ok := bytes.CutPrefix(sc.Bytes(), []byte("Groups:"))
		if !ok {
			continue
		}
		var gs []uint32
		for _, f := range bytes.Fields(line) {
			g, err := strconv.ParseUint(string(f), 10, 32)
			if err != nil {
				return nil, fmt.Errorf("fuse: bad group %q in /proc status", f)
			}
			if len(gs) < proto.MaxGroups {
				gs = append(gs, uint32(g))
			}
		}
		return gs, nil
	}
	return nil, fmt.Errorf("fuse: no Groups line in /proc status")
}
