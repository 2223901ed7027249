package cputime

import (
	"syscall"
	"time"
)

// Self returns the user and system CPU time this process has used so far
// (all its threads; not what the kernel does for it elsewhere, such as a
// journal commit).
func Self() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
