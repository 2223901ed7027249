package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/weft-fs/weft/internal/testcluster"
)

// Heartbeats of the partition test: a target is reported down
// partitionHeartbeatTimeout after its server was last heard from.
const (
	partitionHeartbeatInterval = "1s"
	partitionHeartbeatTimeout  = 4 * time.Second
)

// dfJSON is the output of `weft df --json`.
type dfJSON struct {
	Targets []testcluster.TargetInfo `json:"targets"`
	Summary struct {
		Targets int `json:"targets"`
		Up      int `json:"up"`
	} `json:"summary"`
}

// TestPartition cuts a storage server off the network while it keeps
// running (its namespace's end of the veth goes down: packets are dropped,
// nothing is refused or reset, unlike a killed or SIGSTOPped server). I/O
// on its targets fails with EIO or ETIMEDOUT within the mount's --timeout
// instead of hanging; the namespace keeps working, since the metadata
// server is reachable; `weft df` reports the server's targets down after
// the heartbeat timeout; and once the link is back the same mounts read
// and write those targets again by themselves.
//
// Mount 0 writes; mount 1 has connections to the server when the
// partition starts (a call goes unanswered); mount 2 has none (its dial
// goes unanswered). Neither has the file read in its page cache.
func TestPartition(t *testing.T) {
	t.Parallel() // waits on timeouts, on a cluster of its own
	c := testcluster.Start(t, testcluster.Options{
		Servers: 2, Targets: 4, Mounts: 3, Timeout: "3s", NetNS: true,
		MetaArgs:    []string{"--heartbeat-timeout", partitionHeartbeatTimeout.String()},
		StorageArgs: []string{"--heartbeat-interval", partitionHeartbeatInterval},
	})
	wmnt, rmnt, fmnt := c.Mount(0), c.Mount(1), c.Mount(2)
	d := filepath.Join(wmnt, "d")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	weft(t, c, "setstripe", "-c", "4", "-S", "1M", d)

	df, server := targetServers(t, c, wmnt)
	if len(server) != 4 {
		t.Fatalf("df %+v: want 4 targets on %s and %s", df, c.StorageAddr(0), c.StorageAddr(1))
	}
	// f is read back through mounts 1 and 2, which never cached it; g is
	// rewritten through mount 0 during the partition and read by mount 1
	// before it, which connects mount 1 to both servers.
	const size = 4<<20 + 4321
	fWant, gWant := pattern(41, 0, size), pattern(42, 0, size)
	for name, data := range map[string][]byte{"f": fWant, "g": gWant} {
		p := filepath.Join(d, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		l, err := testcluster.GetLayout(p)
		if err != nil || len(l.Targets) != 4 {
			t.Fatalf("layout of %s: %+v %v, want 4 targets", p, l, err)
		}
		on0 := 0
		for _, id := range l.Targets {
			if server[id] == 0 {
				on0++
			}
		}
		if on0 != 2 {
			t.Fatalf("layout of %s: %+v has %d targets on server 0, want 2", p, l, on0)
		}
	}
	if got, err := os.ReadFile(filepath.Join(rmnt, "d", "g")); err != nil || !bytes.Equal(got, gWant) {
		t.Fatalf("read g through mount 1: %v %s", err, firstDiff(got, gWant))
	}

	c.PartitionStorage(0)
	partitioned := time.Now()
	t.Logf("partitioned storage-0 (%s, namespace %s)", c.StorageAddr(0), c.StorageNetNS(0))

	// Read: the whole file, through mounts that never read it. The
	// kernel re-reads a page after a failed read-ahead; that must not wait
	// for a second timeout.
	for _, r := range []struct{ what, mnt string }{
		{"mount 1 (connected to the server)", rmnt},
		{"mount 2 (not connected to the server)", fmnt},
	} {
		err, took := timed(t, "read from a partitioned server", func() error {
			got, err := os.ReadFile(filepath.Join(r.mnt, "d", "f"))
			if err == nil {
				err = fmt.Errorf("read %d bytes (%s)", len(got), firstDiff(got, fWant))
			}
			return err
		})
		t.Logf("read from a partitioned server through %s: %v after %v", r.what, err, took.Round(time.Millisecond))
		if !isIOFailure(err) {
			t.Errorf("read from a partitioned server through %s: %v, want EIO or ETIMEDOUT", r.what, err)
		}
	}

	// Write: the error may show at write, fsync or close, but it shows,
	// and each call waits for at most one timeout.
	err, took := timed(t, "write to a partitioned server", func() error {
		f, err := os.OpenFile(filepath.Join(d, "g"), os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		_, werr := f.WriteAt(pattern(43, 0, size), 0)
		serr := f.Sync()
		cerr := f.Close()
		return errors.Join(werr, serr, cerr)
	})
	t.Logf("write+fsync+close to a partitioned server: %v after %v", err, took.Round(time.Millisecond))
	if !isIOFailure(err) {
		t.Errorf("write+fsync+close to a partitioned server: %v, want EIO or ETIMEDOUT", err)
	}

	// The namespace still works on both mounts: meta is reachable.
	for _, mnt := range []string{wmnt, rmnt, fmnt} {
		for _, op := range []struct {
			name string
			f    func() error
		}{
			{"stat", func() error {
				fi, err := os.Stat(filepath.Join(mnt, "d", "f"))
				if err == nil && fi.Size() != size {
					err = fmt.Errorf("size %d, want %d", fi.Size(), size)
				}
				return err
			}},
			{"readdir", func() error {
				es, err := os.ReadDir(filepath.Join(mnt, "d"))
				if err == nil && len(es) < 2 {
					err = fmt.Errorf("%d entries, want f and g", len(es))
				}
				return err
			}},
			{"mkdir", func() error { return os.Mkdir(filepath.Join(mnt, "new-"+filepath.Base(mnt)), 0o755) }},
			{"rename", func() error {
				return os.Rename(filepath.Join(mnt, "new-"+filepath.Base(mnt)), filepath.Join(mnt, "renamed-"+filepath.Base(mnt)))
			}},
		} {
			err, took := timed(t, op.name+" during a partition", op.f)
			if err != nil {
				t.Errorf("%s on %s during a storage partition: %v after %v", op.name, mnt, err, took)
			}
			t.Logf("%s on %s during a storage partition took %v", op.name, mnt, took.Round(time.Millisecond))
		}
	}

	// df: the partitioned server's targets go down, the others stay up.
	var last string
	var downAt time.Duration
	for deadline := partitioned.Add(hangGuard); ; {
		ok, desc := partitionDF(t, c, rmnt, server, false)
		last = desc
		if ok {
			downAt = time.Since(partitioned)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("weft df never showed storage-0's targets down and storage-1's up (%v after the partition, heartbeat timeout %v): %s",
				time.Since(partitioned).Round(time.Millisecond), partitionHeartbeatTimeout, last)
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("weft df showed storage-0's targets down %v after the partition", downAt.Round(time.Millisecond))

	// Heal: the same mounts work again by themselves.
	// Each mount notices by itself (it probes the server); until then its
	// calls may still fail fast, so every step retries (until hangGuard).
	c.HealStorage(0)
	healed := time.Now()
	untilHealed := func(what string, f func() error) {
		t.Helper()
		var err error
		for {
			err, _ = timed(t, what, f)
			if err == nil || time.Since(healed) > hangGuard {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		back := time.Since(healed)
		t.Logf("%s worked %v after the link came back (%v)", what, back.Round(time.Millisecond), err)
		if err != nil {
			t.Fatalf("%s: no recovery within %v after the partition healed: %v", what, hangGuard, err)
		}
	}
	for _, r := range []struct{ what, mnt string }{{"read through mount 1", rmnt}, {"read through mount 2", fmnt}} {
		untilHealed(r.what, func() error {
			got, err := os.ReadFile(filepath.Join(r.mnt, "d", "f"))
			if err == nil && !bytes.Equal(got, fWant) {
				t.Fatalf("%s after the partition healed: %s", r.what, firstDiff(got, fWant))
			}
			return err
		})
	}
	// The failed write can be redone through the same mount.
	gNew := pattern(44, 0, size)
	untilHealed("rewrite through mount 0", func() error {
		f, err := os.OpenFile(filepath.Join(d, "g"), os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			return err
		}
		_, werr := f.WriteAt(gNew, 0)
		return errors.Join(werr, f.Sync(), f.Close())
	})
	got, err := within2(t, "read of the rewritten file", func() ([]byte, error) {
		return os.ReadFile(filepath.Join(fmnt, "d", "g"))
	})
	if err != nil || !bytes.Equal(got, gNew) {
		t.Errorf("rewritten file read through mount 2: %v %s", err, firstDiff(got, gNew))
	}

	// And df shows every target up again.
	for deadline := healed.Add(hangGuard); ; {
		ok, desc := partitionDF(t, c, rmnt, server, true)
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("weft df did not show every target up again %v after the partition healed: %s", time.Since(healed).Round(time.Millisecond), desc)
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("weft df showed every target up %v after the link came back", time.Since(healed).Round(time.Millisecond))
}

// partitionDF runs `weft df --json mnt` and reports whether storage-0's
// targets are up iff up0 while storage-1's are up, and what it saw.
func partitionDF(t *testing.T, c *testcluster.Cluster, mnt string, server map[uint32]int, up0 bool) (bool, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := c.Weft(ctx, "df", "--json", mnt)
	if err != nil {
		return false, err.Error()
	}
	var df dfJSON
	if err := json.Unmarshal([]byte(out), &df); err != nil {
		t.Fatalf("weft df --json: %v: %s", err, out)
	}
	if len(df.Targets) != 4 || df.Summary.Targets != 4 {
		return false, out
	}
	up := 0
	for _, ti := range df.Targets {
		want := server[ti.ID] == 1 || up0
		if ti.Up != want {
			return false, out
		}
		if ti.Up {
			up++
		}
	}
	return df.Summary.Up == up, out
}

// within2 is within for a call that also returns a value.
func within2[T any](t testing.TB, what string, f func() (T, error)) (T, error) {
	t.Helper()
	var v T
	err := within(t, what, func() error {
		var err error
		v, err = f()
		return err
	})
	return v, err
}
