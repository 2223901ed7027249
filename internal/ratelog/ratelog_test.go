package ratelog

import (
	"testing"
	"time"
)

func TestLimiter(t *testing.T) {
	l := Limiter{Burst: 3}
	t0 := time.Unix(1000, 0)
	for i := 0; i < 3; i++ {
		if ok, n := l.Allow(t0); !ok || n != 0 {
			t.Fatalf("event %d: got (%v, %d), want (true, 0)", i, ok, n)
		}
	}
	for i := 0; i < 5; i++ {
		if ok, _ := l.Allow(t0.Add(500 * time.Millisecond)); ok {
			t.Fatalf("event %d over the burst passed", i)
		}
	}
	if ok, n := l.Allow(t0.Add(time.Second)); !ok || n != 5 {
		t.Fatalf("first event of the next window: got (%v, %d), want (true, 5)", ok, n)
	}
	if ok, n := l.Allow(t0.Add(time.Second)); !ok || n != 0 {
		t.Fatalf("second event of the next window: got (%v, %d), want (true, 0)", ok, n)
	}
}

func TestLimiterClockBack(t *testing.T) {
	var l Limiter
	t0 := time.Unix(1000, 0)
	for i := 0; i < DefaultBurst; i++ {
		l.Allow(t0)
	}
	if ok, _ := l.Allow(t0.Add(-time.Minute)); !ok {
		t.Fatal("a clock that went back must start a new window")
	}
}
