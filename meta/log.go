package meta

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
)

// commitLog is the commit path, the seam between the proposer side (the
// Server methods, which decide everything that is not a function of the
// state and build a Command) and the state machine. An implementation
// orders the proposed commands, makes them durable, and applies them in
// that order, each exactly once, through stateMachine.applyAt with the
// command's log index; propose returns what applying its command did.
//
// Two implementations fill it: localLog (below), the group commit of a
// single server, whose index is a local counter; and a replicated log
// (package meta/raftlog), whose index is the raft entry index. Neither
// changes the state machine or the commands.
type commitLog interface {
	// propose hands c to the log and waits until it is applied and
	// durable. Once the log has taken c it waits for the outcome even if
	// ctx ends, so a caller is never told that a change failed which in
	// fact happened. An error is either the command's own (the state
	// machine refused it, nothing changed) or the log's (EIO: not durable;
	// for a replicated log also "not leader" and timeouts, where the
	// command's fate may be unknown).
	propose(ctx context.Context, c *Command) (applyResult, error)
	// stats returns how many groups (batches of entries applied together)
	// and commands were applied.
	stats() (groups, commands uint64)
}

// localLog is the group commit of a single server: the log is the
// sequence of commands that changed something, so a command's index is one
// more than the store's applied counter (a command that fails or changes
// nothing takes no index), and durability comes from syncing the store
// itself.
//
// Group commit without a dedicated goroutine: the proposer that finds no
// leader becomes it, takes the waiting commands (its own first, up to
// maxGroup) as a group, applies each as its own unsynced batch (visible to
// the next command at once) except the last, which is committed synced and
// so makes the whole group durable with one WAL sync; only then are the
// group's proposers woken. Commands proposed meanwhile wait; when the
// leader is done it hands the lead to the first of them, whose group is all
// of them. A lone caller therefore applies and syncs on its own goroutine,
// with no hand-off.
type localLog struct {
	sm       *stateMachine
	maxGroup int
	hook     func(*Command) // Options.applyHook
	logErr   func(msg string, args ...any)
	// durable is told the applied counter once a group is durable (the
	// durable mark may claim it).
	durable func(applied uint64)

	mu      sync.Mutex
	waiting []*proposal
	leading bool

	groups, commands atomic.Uint64
}

type proposal struct {
	cmd *Command
	res applyResult
	err error
	// wake receives false once the command's group is durable (res and err
	// are set), or true when its proposer must become the leader.
	wake chan bool
}

func newLocalLog(sm *stateMachine, maxGroup int, hook func(*Command), logErr func(string, ...any), durable func(uint64)) *localLog {
	return &localLog{sm: sm, maxGroup: maxGroup, hook: hook, logErr: logErr, durable: durable}
}

func (l *localLog) propose(ctx context.Context, c *Command) (applyResult, error) {
	p := &proposal{cmd: c, wake: make(chan bool, 1)}
	l.mu.Lock()
	l.waiting = append(l.waiting, p)
	lead := !l.leading
	l.leading = true
	l.mu.Unlock()
	// Once queued the command will be applied; wait for the outcome even if
	// ctx ends, so the caller never reports failure for a change that happened.
	if !lead {
		lead = <-p.wake
	}
	if lead {
		l.lead(p)
	}
	return p.res, p.err
}

func (l *localLog) stats() (groups, commands uint64) {
	return l.groups.Load(), l.commands.Load()
}

// queued returns how many proposals wait for a leader (tests).
func (l *localLog) queued() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.waiting)
}

// lead applies one group, which starts with self (the leader's own
// proposal is the first waiting one), then wakes its proposers and passes
// the lead on if more commands wait.
func (l *localLog) lead(self *proposal) {
	l.mu.Lock()
	n := min(len(l.waiting), l.maxGroup)
	group := append([]*proposal(nil), l.waiting[:n]...)
	l.waiting = l.waiting[n:]
	if len(l.waiting) == 0 {
		l.waiting = nil // let the backing array go
	}
	l.mu.Unlock()
	if group[0] != self {
		panic("meta: group commit leader is not the first waiting proposal")
	}
	l.applyGroup(group)
	for _, q := range group[1:] {
		q.wake <- false
	}
	l.mu.Lock()
	if len(l.waiting) == 0 {
		l.leading = false
		l.mu.Unlock()
		return
	}
	next := l.waiting[0]
	l.mu.Unlock()
	next.wake <- true
}

// applyGroup applies the commands of a group in order and makes them
// durable with one sync: the last batch is committed synced (which syncs
// every earlier one too), or, if the last command wrote nothing, a separate
// sync follows.
func (l *localLog) applyGroup(group []*proposal) {
	wrote, synced := false, false
	for i, q := range group {
		if l.hook != nil {
			l.hook(q.cmd)
		}
		q.res, q.err = l.sm.applyAt(q.cmd, l.sm.applied+1, i == len(group)-1)
		wrote = wrote || q.res.wrote
		synced = q.res.synced
	}
	ok := true
	if wrote && !synced {
		if err := l.sm.st.Sync(); err != nil {
			ok = false
			l.logErr("meta: group sync failed", "err", err)
			for _, q := range group {
				if q.err == nil {
					q.err = fmt.Errorf("meta: sync: %v: %w", err, syscall.EIO)
				}
			}
		}
	}
	if ok && l.durable != nil {
		l.durable(l.sm.applied)
	}
	l.groups.Add(1)
	l.commands.Add(uint64(len(group)))
}
