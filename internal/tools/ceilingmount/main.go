package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/weft-fs/weft/bench/fuseceiling"
	"github.com/weft-fs/weft/internal/timerslack"
)

func main() {
	// The same runtime tuning as weft's servers and mount, so that the
	// ceiling stays the ceiling.
	if err := timerslack.Relax(); err != nil {
		fmt.Fprintln(os.Stderr, "ceilingmount:", err)
		os.Exit(2)
	}
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: ceilingmount BACKING MOUNTPOINT")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "ceilingmount:", err)
		os.Exit(1)
	}
}

func run(backing, mnt string) error {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	m, err := fuseceiling.New(backing, mnt)
	if err != nil {
		return err
	}
	fmt.Println("mounted")
	<-sig
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return m.Unmount(ctx)
}
