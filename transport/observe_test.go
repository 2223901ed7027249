package transport

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

type recordingObserver struct {
	mu    sync.Mutex
	begun map[uint16]int
	ended map[uint16]int
	in    int
	out   int
	errs  int
}

func (o *recordingObserver) Begin(op uint16) OpEnd {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.begun == nil {
		o.begun = map[uint16]int{}
	}
	o.begun[op]++
	return recordingEnd{o, op}
}

type recordingEnd struct {
	o  *recordingObserver
	op uint16
}

func (e recordingEnd) End(start time.Time, in, out int, err error) {
	o, op := e.o, e.op
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ended == nil {
		o.ended = map[uint16]int{}
	}
	o.ended[op]++
	o.in += in
	o.out += out
	if err != nil {
		o.errs++
	}
}

func TestObservedCountsBothSides(t *testing.T) {
	var srv, cl recordingObserver
	tr := Observed(NewTCP(), &srv, &cl)
	ln, err := tr.Listen("127.0.0.1:0", func(ctx context.Context, op uint16, req []byte) ([]byte, error) {
		if op == 2 {
			return nil, errors.New("refused")
		}
		return append([]byte("re:"), req...), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	pool := NewPool(tr, PoolOptions{})
	defer pool.Close()
	ctx := context.Background()
	for range 3 {
		resp, err := pool.Call(ctx, ln.Addr(), 1, []byte("ab"), []byte("c"))
		if err != nil || string(resp) != "re:abc" {
			t.Fatalf("call: %q, %v", resp, err)
		}
	}
	if _, err := pool.Call(ctx, ln.Addr(), 2, []byte("x")); err == nil {
		t.Fatal("op 2 should fail")
	}
	for name, o := range map[string]*recordingObserver{"server": &srv, "client": &cl} {
		o.mu.Lock()
		if o.begun[1] != 3 || o.ended[1] != 3 || o.begun[2] != 1 || o.ended[2] != 1 {
			t.Errorf("%s: begun %v ended %v, want op1 x3 and op2 x1", name, o.begun, o.ended)
		}
		if o.in != 3*3+1 || o.out != 3*6 || o.errs != 1 {
			t.Errorf("%s: in %d out %d errs %d, want 10, 18, 1", name, o.in, o.out, o.errs)
		}
		o.mu.Unlock()
	}
}

func TestObservedConnKeepsBrokenCheck(t *testing.T) {
	var cl recordingObserver
	tr := Observed(NewTCP(), nil, &cl)
	ln, err := NewTCP().Listen("127.0.0.1:0", func(ctx context.Context, op uint16, req []byte) ([]byte, error) {
		return req, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	c, err := tr.Dial(context.Background(), ln.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b, ok := c.(interface{ isBroken() bool })
	if !ok {
		t.Fatal("observed connection hides isBroken from Pool")
	}
	if b.isBroken() {
		t.Fatal("fresh connection reported broken")
	}
	ln.Close()
	deadline := time.Now().Add(2 * time.Minute) // a hang guard
	for !b.isBroken() {
		if time.Now().After(deadline) {
			t.Fatal("connection to a closed listener never reported broken")
		}
		_, _ = c.Call(context.Background(), 1, []byte("x"))
		time.Sleep(10 * time.Millisecond)
	}
}
