package timerslack

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Default is the slack weft gives the monitor thread: long enough that
// its 20 µs naps become about a millisecond, short against the 10 ms its
// slower duties wait for.
const Default = time.Millisecond

// EnvVar names the environment variable that overrides Default for a
// process (a duration such as "5ms"; "0" leaves the runtime's own slack).
const EnvVar = "WEFT_SYSMON_SLACK"

// fromEnv is the slack a process should use: Default, or what EnvVar says.
func fromEnv() (time.Duration, error) {
	v, ok := os.LookupEnv(EnvVar)
	if !ok || v == "" {
		return Default, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("timerslack: %s=%q: want a duration such as 1ms, or 0", EnvVar, v)
	}
	return d, nil
}

// relaxMonitor sets the timer slack of the runtime's monitor thread to
// slack (0 does nothing) and returns that thread's id.
func relaxMonitor(slack time.Duration) (int, error) {
	if slack == 0 {
		return 0, nil
	}
	tid, err := monitorThread()
	if err != nil {
		return 0, err
	}
	path := fmt.Sprintf("/proc/%d/timerslack_ns", tid)
	if err := os.WriteFile(path, []byte(strconv.FormatInt(slack.Nanoseconds(), 10)), 0); err != nil {
		return 0, fmt.Errorf("timerslack: %w", err)
	}
	return tid, nil
}

// threadSlack reads a thread's timer slack.
func threadSlack(tid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/timerslack_ns", tid))
	if err != nil {
		return 0, fmt.Errorf("timerslack: %w", err)
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("timerslack: %w", err)
	}
	return time.Duration(ns), nil
}

// pidMax is the ceiling of Linux's pid_max on 64-bit systems: thread ids
// wrap below it.
const pidMax = 1 << 22

// monitorThread finds the runtime's monitor thread: of the process's
// threads other than the main one, the earliest started, ties (start
// times are in clock ticks) broken by the id handed out first after the
// process's own (ids increase, wrapping at pid_max).
func monitorThread() (int, error) {
	pid := os.Getpid()
	entries, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return 0, fmt.Errorf("timerslack: %w", err)
	}
	best, bestStart, bestDist := 0, uint64(0), 0
	for _, e := range entries {
		tid, err := strconv.Atoi(e.Name())
		if err != nil || tid == pid {
			continue
		}
		start, err := startTime(tid)
		if err != nil {
			continue // it exited meanwhile
		}
		dist := tid - pid
		if dist < 0 {
			dist += pidMax
		}
		if best == 0 || start < bestStart || (start == bestStart && dist < bestDist) {
			best, bestStart, bestDist = tid, start, dist
		}
	}
	if best == 0 {
		return 0, errors.New("timerslack: the process has no thread besides its main one")
	}
	return best, nil
}

// startTime is a thread's start time in clock ticks after boot: field 22
// of /proc/self/task/TID/stat, counted after the command name's closing
// parenthesis because the name itself may hold spaces.
func startTime(tid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/stat", tid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("timerslack: malformed %s", b)
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3
	if len(f) < 20 {
		return 0, fmt.Errorf("timerslack: short stat line %q", s)
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// Relax is what a weft program calls first in main: the monitor thread
// gets fromEnv's slack. Only a malformed EnvVar is an error; a thread that
// cannot be changed (no CAP_SYS_NICE, no /proc) leaves the process as the
// runtime made it, which is correct, only busier.
func Relax() error {
	slack, err := fromEnv()
	if err != nil {
		return err
	}
	_, _ = relaxMonitor(slack)
	return nil
}
