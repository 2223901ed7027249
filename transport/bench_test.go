package transport

import (
	"context"
	"log/slog"
	"testing"
	"time"
)

func benchConn(b *testing.B, h Handler) Conn {
	tr := NewTCPWith(TCPOptions{Logger: slog.New(slog.DiscardHandler)})
	l := serve(b, tr, h)
	return dial(b, tr, l.Addr())
}

// BenchmarkCall1MiB moves 1 MiB per call over loopback: "write" sends it in
// the request (like a storage write), "read" gets it in the response. The
// parallel variants keep several calls in flight on one connection.
func BenchmarkCall1MiB(b *testing.B) {
	data := make([]byte, 1<<20)
	ack := []byte("ok")
	for _, tc := range []struct {
		name     string
		h        Handler
		req      []byte
		parallel bool
	}{
		{"write", func(context.Context, uint16, []byte) ([]byte, error) { return ack, nil }, data, false},
		{"read", func(context.Context, uint16, []byte) ([]byte, error) { return data, nil }, ack, false},
		{"write-par4", func(context.Context, uint16, []byte) ([]byte, error) { return ack, nil }, data, true},
		{"read-par4", func(context.Context, uint16, []byte) ([]byte, error) { return data, nil }, ack, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			c := benchConn(b, tc.h)
			b.SetBytes(1 << 20)
			ctx := context.Background()
			if !tc.parallel {
				for b.Loop() {
					if _, err := c.Call(ctx, 1, tc.req); err != nil {
						b.Fatal(err)
					}
				}
				return
			}
			b.SetParallelism(2) // 2 x GOMAXPROCS goroutines
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := c.Call(ctx, 1, tc.req); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkCallSmall measures round trips of a 64-byte request and
// response, one at a time and with 32 calls in flight.
func BenchmarkCallSmall(b *testing.B) {
	msg := make([]byte, 64)
	for _, tc := range []struct {
		name     string
		parallel int
	}{{"seq", 0}, {"par32", 16}} {
		b.Run(tc.name, func(b *testing.B) {
			c := benchConn(b, echo)
			ctx := context.Background()
			start := time.Now()
			if tc.parallel == 0 {
				for b.Loop() {
					if _, err := c.Call(ctx, 1, msg); err != nil {
						b.Fatal(err)
					}
				}
			} else {
				b.SetParallelism(tc.parallel)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if _, err := c.Call(ctx, 1, msg); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "calls/s")
		})
	}
}
