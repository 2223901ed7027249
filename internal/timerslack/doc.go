// Package timerslack lets the Go runtime's monitor thread (sysmon) sleep
// less precisely, so that it wakes up less often.
//
// Why: sysmon sleeps 20 µs between checks while a process is busy, and
// again after every wake-up from a syscall that idled the whole process.
// A weft server alternates between idle and a short burst of work for
// every request or raft round, so its sysmon never backs off: with the
// kernel's default timer slack (50 µs) it woke 3,000 to 7,500 times a
// second in each metadata server under a create load and took 35 to 98 ms
// of CPU a second (thread CPU from /proc/PID/task/TID/schedstat), 5 to 10 %
// of this 2-core machine across the servers. With 1 ms of slack on that
// one thread it takes 7 to 17 ms a second, and creates through the mount
// went up 7 % with one metadata server and 12 % with three
// (docs/performance.md, "Fewer wake-ups and one round trip less per
// create").
//
// Only the monitor thread is changed: the slack of the threads that run
// goroutines, and so the precision of every timer weft sets, stay as they
// were. What sysmon does on its wake-ups (retaking a processor from a
// thread blocked in a syscall, preempting a goroutine that ran for 10 ms,
// polling the network when nothing else did for 10 ms) happens up to the
// slack later; processors idle meanwhile still steal the blocked one's
// work.
//
// Invariants and limits:
//   - The monitor thread is the first thread the process made after its
//     main one (runtime.main starts it before any other code runs), so it
//     is the earliest-started of the others for the life of the process.
//   - Writing another thread's timerslack_ns needs CAP_SYS_NICE (Linux
//     checks it even within one process). Without it, or off Linux, Relax
//     changes nothing and does not fail: the process runs as the runtime
//     made it, only busier. Only a malformed EnvVar is an error.
package timerslack
