package tests

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weft-fs/weft/internal/testcluster"
	"github.com/weft-fs/weft/meta/store"
)

// TestHAKillMembersReplay: a metadata member's store has no write-ahead
// log of its own, so a member SIGKILLed under load comes back at its
// store's last flush and applies the rest again from its raft log. Under
// a create load through a mount, a follower and then the leader are
// SIGKILLed and restarted; each restarted member's store is behind what
// it had applied (the replay is exercised); every acknowledged create is
// there exactly once, with its content; and once every member applied
// everything, the three stores, each stopped cleanly and read offline,
// hold the same keys and values: nothing lost, nothing applied twice.
func TestHAKillMembersReplay(t *testing.T) {
	t.Parallel() // waits on elections, on a cluster of its own
	c := testcluster.Start(t, testcluster.Options{Servers: 1, Targets: 1, MetaReplicas: 3, Timeout: "30s"})
	mnt := c.Mount(0)
	lead := c.WaitMetaLeader()
	load := startCreates(t, mnt, 4)

	killRestart := func(i int, what string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		st, err := c.MetaMemberStatus(ctx, i)
		cancel()
		if err != nil {
			t.Fatalf("status of meta-%d: %v", i+1, err)
		}
		t.Logf("SIGKILL %s meta-%d after %d creates (it applied %d)", what, i+1, load.total.Load(), st.Applied)
		c.StopMetaMember(i)
		load.wait(200, fmt.Sprintf("with the %s down", what))
		name := fmt.Sprintf("meta-%d", i+1)
		logged := len(c.Log(name))
		c.StartMetaMember(i)
		from := storeOpenedAt(t, func() string { return c.Log(name)[logged:] })
		if from >= st.Applied {
			t.Fatalf("meta-%d's store came back at %d, not behind the %d it had applied before the kill", i+1, from, st.Applied)
		}
		t.Logf("meta-%d's store came back at %d; the rest is replayed from its raft log", i+1, from)
	}
	load.wait(300, "before the first kill")
	killRestart((lead+1)%3, "follower")
	load.wait(300, "after the follower's restart")
	lead = c.WaitMetaLeader()
	killRestart(lead, "leader")
	load.wait(300, "after the leader's restart")
	load.stop()
	load.check()
	t.Logf("%d creates acknowledged, all there once", load.total.Load())

	// Nothing is proposed while the mount is idle: wait until every
	// member applied the leader's commit index, then stop them (the
	// leader last) and compare their stores.
	var applied uint64
	deadline := time.Now().Add(3 * time.Minute) // against hangs only
	for {
		lead = c.WaitMetaLeader()
		var as []uint64
		ok := true
		for i := range 3 {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			st, err := c.MetaMemberStatus(ctx, i)
			cancel()
			ok = ok && err == nil && st.Applied == st.Commit
			as = append(as, st.Applied)
		}
		if ok && as[0] == as[1] && as[1] == as[2] {
			applied = as[0]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the members never applied the same index: %v", as)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, i := range []int{(lead + 1) % 3, (lead + 2) % 3, lead} {
		c.StopMetaMemberClean(i)
	}
	var dumps [3]string
	for i := range 3 {
		dumps[i] = dumpMemberStore(t, c.MetaMemberDir(i))
	}
	for i := 1; i < 3; i++ {
		if dumps[i] != dumps[0] {
			t.Fatalf("meta-%d's store differs from meta-1's after applying index %d:\n%s", i+1, applied, firstLineDiff(dumps[0], dumps[i]))
		}
	}
	t.Logf("the three stores hold the same %d bytes of keys and values at index %d", len(dumps[0]), applied)
}

// storeOpenedAt waits for a member's log (since its restart: logOf) to
// say at which applied index its store opened ("meta: store opened ...
// applied=N").
func storeOpenedAt(t *testing.T, logOf func() string) uint64 {
	t.Helper()
	re := regexp.MustCompile(`meta: store opened.*applied=(\d+)`)
	deadline := time.Now().Add(2 * time.Minute) // against hangs only
	for {
		log := logOf()
		if m := re.FindStringSubmatch(log); m != nil {
			n, err := strconv.ParseUint(m[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("no 'store opened' line in the member's log since its restart:\n%s", log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// dumpMemberStore opens a stopped member's store and returns every key
// and value but the applied index (which a member records at a snapshot
// where the others may not have).
func dumpMemberStore(t *testing.T, dir string) string {
	t.Helper()
	st, err := store.OpenPebble(dir, store.PebbleOptions{NoWAL: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("open %s: %v", dir, err)
	}
	defer st.Close()
	var b bytes.Buffer
	applied := store.CounterKey(store.CounterApplied)
	if err := st.Scan(nil, nil, func(k, v []byte) bool {
		if !bytes.Equal(k, applied) {
			fmt.Fprintf(&b, "%q=%x\n", k, v)
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// firstLineDiff names the first line where a and b differ.
func firstLineDiff(a, b string) string {
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range max(len(la), len(lb)) {
		var x, y string
		if i < len(la) {
			x = la[i]
		}
		if i < len(lb) {
			y = lb[i]
		}
		if x != y {
			return fmt.Sprintf("line %d (of %d and %d):\n  %s\n  %s", i+1, len(la), len(lb), x, y)
		}
	}
	return "no difference"
}
