package client

import (
	"context"
	"errors"
	"testing"
	"time"
)

type testKey struct{}

// TestLazyDeadline: the context behaves as context.WithTimeout (its
// deadline, its parent's values and cancellation, its end by deadline or
// cancel, the children it ends), and makes no timer until something
// waits on it.
func TestLazyDeadline(t *testing.T) {
	base := context.WithValue(context.Background(), testKey{}, "v")
	ctx, cancel := withLazyDeadline(base, 50*time.Millisecond)
	defer cancel()
	if ctx.Value(testKey{}) != "v" {
		t.Fatal("the parent's value is lost")
	}
	if d, ok := ctx.Deadline(); !ok || time.Until(d) > 50*time.Millisecond {
		t.Fatalf("deadline %v, %v", d, ok)
	}
	if err := ctx.Err(); err != nil {
		t.Fatalf("Err before the deadline: %v", err)
	}
	if ctx.(*lazyDeadline).inner != nil {
		t.Fatal("a timer was started before anything waited")
	}
	child, cancelChild := context.WithCancel(ctx)
	defer cancelChild()
	grandchild, cancelGrandchild := withLazyDeadline(child, time.Hour)
	defer cancelGrandchild()
	if d, _ := grandchild.Deadline(); time.Until(d) > 50*time.Millisecond {
		t.Fatalf("a child's deadline %v is later than its parent's", d)
	}
	if grandchild.Value(testKey{}) != "v" {
		t.Fatal("a child lost the value")
	}
	select {
	case <-grandchild.Done():
	case <-time.After(time.Minute):
		t.Fatal("Done never closed at the deadline")
	}
	<-ctx.Done()
	<-child.Done()
	for name, c := range map[string]context.Context{"ctx": ctx, "child": child, "grandchild": grandchild} {
		if !errors.Is(c.Err(), context.DeadlineExceeded) {
			t.Fatalf("after the deadline, %s: %v", name, c.Err())
		}
	}

	// Past its deadline, never waited on: Err says so, and Done is closed.
	ctx, cancel = withLazyDeadline(context.Background(), time.Millisecond)
	defer cancel()
	time.Sleep(2 * time.Millisecond)
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("Err past the deadline: %v", ctx.Err())
	}
	<-ctx.Done()

	// Cancelled itself or through its parent, before and after a wait.
	for _, waitFirst := range []bool{false, true} {
		for _, byParent := range []bool{false, true} {
			parent, cancelParent := context.WithCancel(context.Background())
			ctx, cancel := withLazyDeadline(parent, time.Hour)
			if waitFirst {
				_ = ctx.Done()
			}
			if byParent {
				cancelParent()
			} else {
				cancel()
			}
			if !errors.Is(ctx.Err(), context.Canceled) {
				t.Fatalf("wait first %v, by parent %v: Err after cancel: %v", waitFirst, byParent, ctx.Err())
			}
			<-ctx.Done()
			cancel()
			cancelParent()
			if !errors.Is(ctx.Err(), context.Canceled) {
				t.Fatalf("wait first %v, by parent %v: Err after a second cancel: %v", waitFirst, byParent, ctx.Err())
			}
		}
	}
}
