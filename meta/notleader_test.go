package meta

import (
	"fmt"
	"syscall"
	"testing"

	"github.com/weft-fs/weft/meta/metarpc"
	"github.com/weft-fs/weft/meta/raftlog"
	"github.com/weft-fs/weft/transport"
)

// TestNotLeaderTexts: every answer of a member that a request belongs to
// another member is recognized by clients as such (they go to the leader
// and send it again), and no other EAGAIN is (a conflicting lock, a grace
// period: answers for the application).
func TestNotLeaderTexts(t *testing.T) {
	wire := func(err error) error {
		return &transport.RemoteError{Addr: "m:1", Op: 1, Errno: syscall.EAGAIN, Msg: err.Error()}
	}
	for _, err := range []error{
		&NotLeaderError{Leader: 2, Addr: "b:1", err: &raftlog.NotLeaderError{Leader: 2}},
		&NotLeaderError{Leader: 0, err: &raftlog.NotLeaderError{}},
		&NotLeaderError{Leader: 1, err: raftlog.ErrNotReady},
		raftlog.ErrNotLeader, raftlog.ErrNotReady, raftlog.ErrDropped,
		fmt.Errorf("raftlog: node %d not started: %w", 3, syscall.EAGAIN),
		errnof(syscall.EAGAIN, "inode %d was allocated before this server became leader; retry", 7),
	} {
		if !metarpc.IsNotLeader(wire(err)) {
			t.Errorf("%q is not taken for a not-leader answer", err)
		}
	}
	for _, err := range []error{
		errnof(syscall.EAGAIN, "lock on inode 5 conflicts with a lock of another owner"),
		errnof(syscall.EAGAIN, "in the grace period after a restart: no new locks"),
	} {
		if metarpc.IsNotLeader(wire(err)) {
			t.Errorf("%q is taken for a not-leader answer", err)
		}
	}
}
