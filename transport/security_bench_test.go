package transport_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/weft-fs/weft/transport"
)

// BenchmarkSecurity compares, in one run, the cost of no security (unit
// tests), authentication only (the default of the weft binary) and wire
// encryption (--encrypt): 1 MiB writes and reads and 64-byte round trips
// over loopback, client and server in this process.
func BenchmarkSecurity(b *testing.B) {
	data := make([]byte, 1<<20)
	ack := []byte("ok")
	small := make([]byte, 64)
	for _, mode := range []string{"none", "auth", "encrypt"} {
		newTr := func(role string) transport.Transport {
			opts := transport.TCPOptions{Logger: slog.New(slog.DiscardHandler)}
			if mode != "none" {
				opts.Security = keys(b, role).Security(mode == "encrypt")
			}
			return transport.NewTCPWith(opts)
		}
		for _, tc := range []struct {
			name     string
			h        transport.Handler
			req      []byte
			bytes    int64
			parallel int
		}{
			{"write1MiB", func(context.Context, uint16, []byte) ([]byte, error) { return ack, nil }, data, 1 << 20, 0},
			{"read1MiB", func(context.Context, uint16, []byte) ([]byte, error) { return data, nil }, ack, 1 << 20, 0},
			{"small-seq", func(_ context.Context, _ uint16, r []byte) ([]byte, error) { return r, nil }, small, 0, 0},
			{"small-par32", func(_ context.Context, _ uint16, r []byte) ([]byte, error) { return r, nil }, small, 0, 16},
		} {
			b.Run(mode+"/"+tc.name, func(b *testing.B) {
				l := listen(b, newTr("storage"), tc.h)
				c, err := newTr("client").Dial(context.Background(), l.Addr())
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				b.SetBytes(tc.bytes)
				ctx := context.Background()
				start := time.Now()
				if tc.parallel == 0 {
					for b.Loop() {
						if _, err := c.Call(ctx, 1, tc.req); err != nil {
							b.Fatal(err)
						}
					}
				} else {
					b.SetParallelism(tc.parallel)
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							if _, err := c.Call(ctx, 1, tc.req); err != nil {
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
}

// BenchmarkDial measures making a connection and its first call: TCP
// alone, and with the TLS 1.3 handshake and hello of authentication.
func BenchmarkDial(b *testing.B) {
	for _, mode := range []string{"none", "auth"} {
		b.Run(mode, func(b *testing.B) {
			newTr := func(role string) transport.Transport {
				opts := transport.TCPOptions{Logger: slog.New(slog.DiscardHandler)}
				if mode != "none" {
					opts.Security = keys(b, role).Security(false)
				}
				return transport.NewTCPWith(opts)
			}
			l := listen(b, newTr("storage"), func(_ context.Context, _ uint16, r []byte) ([]byte, error) { return r, nil })
			cli := newTr("client")
			ctx := context.Background()
			for b.Loop() {
				c, err := cli.Dial(ctx, l.Addr())
				if err != nil {
					b.Fatal(err)
				}
				if _, err := c.Call(ctx, 1, []byte("x")); err != nil {
					b.Fatal(err)
				}
				c.Close()
			}
		})
	}
}
