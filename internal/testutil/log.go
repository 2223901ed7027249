package testutil

import (
	"bytes"
	"log/slog"
	"sync"
)

// LogBuffer collects log output for assertions; it is safe for the
// concurrent writes of a server's goroutines.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// NewLogger returns a debug-level text logger writing into a new LogBuffer.
func NewLogger() (*slog.Logger, *LogBuffer) {
	lb := &LogBuffer{}
	return slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug})), lb
}
