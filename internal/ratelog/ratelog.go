package ratelog

import (
	"log/slog"
	"sync"
	"time"
)

// DefaultBurst is the lines per second a zero Limiter lets through.
const DefaultBurst = 10

// Limiter lets at most Burst events per second through and counts the
// rest. The zero value is ready to use (Burst DefaultBurst). It is safe for
// concurrent use.
type Limiter struct {
	Burst int

	mu      sync.Mutex
	window  time.Time
	n       int
	dropped int
}

// Allow reports whether an event at now may be logged, and how many were
// held back since the last one that was.
func (l *Limiter) Allow(now time.Time) (ok bool, suppressed int) {
	burst := l.Burst
	if burst <= 0 {
		burst = DefaultBurst
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.window) >= time.Second || now.Before(l.window) {
		l.window, l.n = now, 0
	}
	if l.n >= burst {
		l.dropped++
		return false, 0
	}
	l.n++
	d := l.dropped
	l.dropped = 0
	return true, d
}

// Warn logs msg with args at warn level on log, if the limiter allows it
// now, adding the count of lines held back before it.
func (l *Limiter) Warn(log *slog.Logger, msg string, args ...any) {
	if ok, n := l.Allow(time.Now()); ok {
		if n > 0 {
			args = append(args, "suppressed", n)
		}
		log.Warn(msg, args...)
	}
}
