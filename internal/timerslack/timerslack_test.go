package timerslack

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// nanosleepNR is the nanosleep syscall number runtime.usleep uses.
var nanosleepNR = map[string]string{"amd64": "35", "arm64": "101"}

// inSyscall reports the syscall number a thread is blocked in ("" when
// running).
func inSyscall(tid string) string {
	b, err := os.ReadFile("/proc/self/task/" + tid + "/syscall")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) == 0 || f[0] == "running" {
		return ""
	}
	return f[0]
}

// TestMonitorThreadIsSysmon checks that the thread found is the one that
// naps in nanosleep while the process is busy: the runtime's monitor,
// the only thread that sleeps that way (the others block in futex or
// epoll).
func TestMonitorThreadIsSysmon(t *testing.T) {
	nr, ok := nanosleepNR[runtime.GOARCH]
	if !ok {
		t.Skipf("no nanosleep number known for %s", runtime.GOARCH)
	}
	var stop atomic.Bool
	done := make(chan struct{})
	go func() { // keep a processor busy, so sysmon naps instead of parking
		defer close(done)
		for !stop.Load() {
		}
	}()
	defer func() { stop.Store(true); <-done }()

	tid, err := monitorThread()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for i := 0; i < 200; i++ {
		entries, err := os.ReadDir("/proc/self/task")
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if inSyscall(e.Name()) == nr {
				seen[e.Name()]++
			}
		}
		time.Sleep(time.Millisecond)
	}
	mine := seen[strconv.Itoa(tid)]
	if mine == 0 {
		t.Fatalf("thread %d was never seen in nanosleep (seen: %v)", tid, seen)
	}
	for other, n := range seen {
		if other != strconv.Itoa(tid) && n > mine {
			t.Fatalf("thread %s napped in nanosleep more often (%d) than the one found, %d (%d)", other, n, tid, mine)
		}
	}
}

func TestRelaxMonitorSetsOnlyItsSlack(t *testing.T) {
	pid := os.Getpid()
	before, err := threadSlack(pid)
	if err != nil {
		t.Fatal(err)
	}
	const want = 3 * time.Millisecond
	tid, err := relaxMonitor(want)
	if err != nil {
		t.Fatalf("relaxMonitor: %v (writing another thread's slack needs CAP_SYS_NICE)", err)
	}
	if tid == pid {
		t.Fatalf("the main thread was chosen")
	}
	if got, err := threadSlack(tid); err != nil || got != want {
		t.Fatalf("monitor thread %d slack = %v, %v; want %v", tid, got, err, want)
	}
	if got, err := threadSlack(pid); err != nil || got != before {
		t.Fatalf("main thread slack = %v, %v; want it unchanged (%v)", got, err, before)
	}
	if tid2, err := relaxMonitor(0); err != nil || tid2 != 0 {
		t.Fatalf("relaxMonitor(0) = %d, %v; want nothing done", tid2, err)
	}
}

func TestFromEnv(t *testing.T) {
	for _, c := range []struct {
		set, val string
		want     time.Duration
		bad      bool
	}{
		{set: "", want: Default},
		{set: "y", val: "5ms", want: 5 * time.Millisecond},
		{set: "y", val: "0", want: 0},
		{set: "y", val: "fast", bad: true},
		{set: "y", val: "-1ms", bad: true},
	} {
		if c.set == "" {
			t.Setenv(EnvVar, "")
			os.Unsetenv(EnvVar)
		} else {
			t.Setenv(EnvVar, c.val)
		}
		got, err := fromEnv()
		if c.bad != (err != nil) || got != c.want {
			t.Errorf("%s=%q: got %v, %v; want %v (error %v)", EnvVar, c.val, got, err, c.want, c.bad)
		}
	}
}
