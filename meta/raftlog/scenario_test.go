package raftlog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/cockroachdb/pebble/v2/vfs"
	pb "go.etcd.io/raft/v3/raftpb"
)

// TestScenarios runs the scenarios in testdata/scenarios/ (the
// datadriven style of etcd raft's InteractionEnv). Which node wins an
// election is up to raft's randomized timeouts, so scenarios name nodes
// by role: "elect among=2,3 as=B" binds B to whichever of 2 and 3 leads,
// and later commands take B wherever they take a node id.
//
//	start 1 2 3 [snapshot-every=N keep=K]
//	                              start (or restart) nodes from their logs; the
//	                              first start makes the group (snapshots every
//	                              N entries, keeping K)
//	campaign 1                    node 1 campaigns; prints who leads
//	elect [among=IDS] as=NAME     tick until one of IDS (default: all live) leads
//	propose WHO k=v               prints the previous value, or the error
//	propose-async WHO k=v as=NAME propose in the background
//	read WHO                      a linearizable read (ReadIndex), then the state
//	read-async WHO as=NAME
//	check NAME...                 waiting (still out after a second), acknowledged, or the error
//	cancel                        end every background request, wait for them
//	crash WHO                     stop, dropping whatever its log had not synced
//	wipe WHO                      its disk is gone (the next start is empty)
//	join ID                       start a node in join mode (empty, not bootstrapped)
//	add-learner|add-voter|remove WHO ID
//	                              a configuration change proposed on WHO
//	partition WHO... | WHO...     cut every link between the two sides
//	heal
//	tick-until stepped-down WHO | follows WHO NAME | caught-up
//	log WHO                       the node's log bounds, its last snapshot, and
//	                              the snapshot its state was restored from
//	state                         every live node's state (nodes with the same
//	                              state on one line)
func TestScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata/scenarios", func(t *testing.T, path string) {
		s := &scenario{t: t, names: map[string]uint64{}, async: map[string]chan error{}, done: map[string]error{}}
		s.ctx, s.cancel = context.WithCancel(context.Background())
		defer s.cancelAll()
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			s.t = t
			if s.c != nil {
				s.c.t = t
			}
			return s.run(d)
		})
	})
}

type scenario struct {
	t      *testing.T
	c      *cluster
	ctx    context.Context
	names  map[string]uint64
	async  map[string]chan error
	done   map[string]error
	cancel context.CancelFunc
}

// cancelAll ends every background request and records its outcome.
func (s *scenario) cancelAll() {
	s.cancel()
	for name, ch := range s.async {
		s.done[name] = <-ch
		delete(s.async, name)
	}
}

func (s *scenario) who(w string) uint64 {
	if id, ok := s.names[w]; ok {
		return id
	}
	id, err := strconv.ParseUint(w, 10, 64)
	if err != nil {
		s.t.Fatalf("unknown node %q", w)
	}
	return id
}

func (s *scenario) arg(d *datadriven.TestData, key string) (string, bool) {
	for _, a := range d.CmdArgs {
		if a.Key == key && len(a.Vals) > 0 {
			return strings.Join(a.Vals, ","), true
		}
	}
	return "", false
}

// positional returns the arguments other than as= and among=, in order,
// as written ("k=v" stays "k=v").
func positional(d *datadriven.TestData) []string {
	var out []string
	for _, a := range d.CmdArgs {
		switch {
		case a.Key == "as" || a.Key == "among" || a.Key == "snapshot-every" || a.Key == "keep":
		case len(a.Vals) == 0:
			out = append(out, a.Key)
		default:
			out = append(out, a.Key+"="+strings.Join(a.Vals, ","))
		}
	}
	return out
}

func errClass(err error) string {
	var nl *NotLeaderError
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &nl):
		return "error: not leader"
	case errors.Is(err, ErrNotReady):
		return "error: leader not ready"
	case errors.Is(err, ErrDropped):
		return "error: dropped (not applied)"
	case errors.Is(err, ErrUnknown), errors.Is(err, context.Canceled):
		return "error: outcome unknown"
	}
	return "error: " + err.Error()
}

func (s *scenario) run(d *datadriven.TestData) string {
	pos := positional(d)
	switch d.Cmd {
	case "start":
		if s.c == nil {
			n := 0
			for _, p := range pos {
				n = max(n, int(s.who(p)))
			}
			var tune func(*Config)
			if every, ok := s.arg(d, "snapshot-every"); ok {
				e, _ := strconv.ParseUint(every, 10, 64)
				keepS, _ := s.arg(d, "keep")
				k, _ := strconv.ParseUint(keepS, 10, 64)
				tune = func(cfg *Config) { cfg.SnapshotEvery, cfg.SnapshotKeep = e, k }
			}
			s.c = newCluster(s.t, n, tune)
			return ""
		}
		for _, p := range pos {
			s.c.start(s.who(p))
		}
		return ""
	case "campaign":
		id := s.who(pos[0])
		// raft ignores a campaign while configuration changes it has
		// committed are not yet applied (a node's bootstrap entries, right
		// after start): let every node handle what it has first.
		s.c.settle()
		if err := s.c.nodes[id].Campaign(context.Background()); err != nil {
			return errClass(err)
		}
		lead := s.c.waitLeader(s.c.live())
		return fmt.Sprintf("leader: %d", lead)
	case "elect":
		ids := s.c.live()
		if among, ok := s.arg(d, "among"); ok {
			ids = nil
			for _, w := range strings.Split(among, ",") {
				ids = append(ids, s.who(w))
			}
		}
		lead := s.c.waitLeader(ids)
		if as, ok := s.arg(d, "as"); ok {
			s.names[as] = lead
		}
		return "ok"
	case "propose":
		v, err := s.c.propose(s.who(pos[0]), pos[1])
		if err != nil {
			return errClass(err)
		}
		return fmt.Sprintf("ok (was %q)", v)
	case "propose-async", "read-async":
		as, _ := s.arg(d, "as")
		n := s.c.nodes[s.who(pos[0])]
		ch := make(chan error, 1)
		ctx, read := s.ctx, d.Cmd == "read-async" // d is reused for the next command
		var data []byte
		if !read {
			data = []byte(pos[1])
		}
		go func() {
			if read {
				ch <- n.ReadIndex(ctx)
				return
			}
			_, err := n.Propose(ctx, data)
			ch <- err
		}()
		s.async[as] = ch
		return ""
	case "read":
		id := s.who(pos[0])
		if err := s.c.nodes[id].ReadIndex(context.Background()); err != nil {
			return errClass(err)
		}
		return "ok: " + s.c.sm[id].dump()
	case "check":
		// A node resolves a request (fails it, applies it) before it
		// publishes the status the last command waited for, but the
		// request's goroutine may not have reported yet: a request still
		// out is given a second before it counts as waiting.
		var b strings.Builder
		grace := time.NewTimer(time.Second)
		defer grace.Stop()
		expired := false
		for _, name := range pos {
			err, finished := s.done[name]
			if ch, ok := s.async[name]; ok && !finished {
				select {
				case err = <-ch:
					finished = true
				default:
					if expired {
						break
					}
					select {
					case err = <-ch:
						finished = true
					case <-grace.C:
						expired = true
					}
				}
				if finished {
					s.done[name] = err
					delete(s.async, name)
				}
			}
			switch {
			case !finished:
				fmt.Fprintf(&b, "%s: waiting\n", name)
			case err == nil:
				fmt.Fprintf(&b, "%s: acknowledged\n", name)
			default:
				fmt.Fprintf(&b, "%s: %s\n", name, errClass(err))
			}
		}
		return b.String()
	case "cancel":
		s.cancelAll()
		s.ctx, s.cancel = context.WithCancel(context.Background())
		return ""
	case "crash":
		s.c.crash(s.who(pos[0]))
		return ""
	case "wipe":
		// The node's disk is gone: its next start is empty.
		s.c.fs[s.who(pos[0])] = vfs.NewCrashableMem()
		return ""
	case "join":
		id := s.who(pos[0])
		if s.c.fs[id] == nil {
			s.c.fs[id] = vfs.NewCrashableMem()
		}
		s.c.join[id] = true
		s.c.start(id)
		return ""
	case "add-learner", "add-voter", "remove":
		typ := map[string]pb.ConfChangeType{"add-learner": pb.ConfChangeType_ConfChangeAddLearnerNode,
			"add-voter": pb.ConfChangeType_ConfChangeAddNode, "remove": pb.ConfChangeType_ConfChangeRemoveNode}[d.Cmd]
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // against hangs only
		defer cancel()
		cs, err := s.c.nodes[s.who(pos[0])].ChangeMembers(ctx, change(typ, s.who(pos[1])), "")
		if err != nil {
			return errClass(err)
		}
		return fmt.Sprintf("voters %v learners %v", sorted(cs.GetVoters()), sorted(cs.GetLearners()))
	case "partition":
		var sides [2][]uint64
		side := 0
		for _, p := range pos {
			if p == "|" {
				side = 1
				continue
			}
			sides[side] = append(sides[side], s.who(p))
		}
		s.c.nw.Partition(sides[0], sides[1])
		return ""
	case "heal":
		s.c.nw.Heal()
		return ""
	case "log":
		// The node's log and where its state came from.
		id := s.who(pos[0])
		first, _ := s.c.st[id].FirstIndex()
		last, _ := s.c.st[id].LastIndex()
		return fmt.Sprintf("log [%d, %d], snapshot at %d, state restored from the snapshot at %d",
			first, last, s.c.nodes[id].Status().Snapshot, s.c.sm[id].base)
	case "tick-until":
		switch pos[0] {
		case "stepped-down":
			id := s.who(pos[1])
			s.c.tickUntil(pos[1]+" steps down", func() bool { return !s.c.nodes[id].Status().IsLeader })
		case "follows":
			id, lead := s.who(pos[1]), s.who(pos[2])
			s.c.tickUntil(pos[1]+" follows "+pos[2], func() bool { return s.c.nodes[id].Status().Leader == lead })
		case "caught-up":
			var commit uint64
			for _, id := range s.c.live() {
				commit = max(commit, s.c.nodes[id].Status().Commit)
			}
			s.c.waitApplied(s.c.live(), commit)
		default:
			s.t.Fatalf("tick-until %s?", pos[0])
		}
		return ""
	case "state":
		var lines []string
		byState := map[string][]string{}
		for _, id := range s.c.live() {
			st := s.c.sm[id].dump()
			byState[st] = append(byState[st], fmt.Sprint(id))
		}
		for st, ids := range byState {
			lines = append(lines, fmt.Sprintf("%s: %s", strings.Join(ids, " "), st))
		}
		slices.Sort(lines)
		return strings.Join(lines, "\n")
	}
	s.t.Fatalf("unknown command %q", d.Cmd)
	return ""
}
