package metarpc

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"syscall"
	"testing"

	"github.com/weft-fs/weft/proto"
)

func scrubSamples() []message {
	st := proto.ScrubTarget{Target: 7, Running: true, Start: 1, End: -2, Bytes: 3, Objects: 4, Passes: 5, Corrupt: 6, Total: 7}
	return []message{
		&scrubReportReq{proto.ScrubReport{ScrubTarget: st, Found: []proto.ObjectID{{Ino: 1, Stripe: 2, Gen: 3}, {Ino: 4}}}},
		&scrubReportReq{proto.ScrubReport{ScrubTarget: st}},
		&scrubStartResp{[]proto.TargetID{1, 2, 9}},
		&scrubStatusResp{proto.ScrubStatus{
			Targets: []proto.ScrubTargetStatus{{ScrubTarget: st, Reported: 8, Repaired: 9, Lost: 10, Heard: 11}, {}},
			Lost:    []proto.LostObject{{Target: 3, Obj: proto.ObjectID{Ino: 5, Stripe: 1, Gen: 2}}},
		}},
	}
}

// TestScrubCodec: every scrub message round-trips, every truncation and a
// trailing byte fail, and another version is refused.
func TestScrubCodec(t *testing.T) {
	for _, m := range scrubSamples() {
		b := marshal(m)
		got := reflect.New(reflect.TypeOf(m).Elem()).Interface().(message)
		if err := unmarshal(b, got); err != nil {
			t.Fatalf("%T: %v", m, err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Fatalf("%T: round trip gave %+v, want %+v", m, got, m)
		}
		for i := range len(b) {
			if err := unmarshal(b[:i], reflect.New(reflect.TypeOf(m).Elem()).Interface().(message)); err == nil {
				t.Fatalf("%T: truncated to %d bytes decoded", m, i)
			}
		}
		if err := unmarshal(append(b, 0), got); err == nil {
			t.Fatalf("%T: trailing byte accepted", m)
		}
		b[0] = scrubVersion + 1
		if err := unmarshal(b, got); err == nil {
			t.Fatalf("%T: version %d decoded", m, b[0])
		}
	}
}

// TestScrubOpsServed: the handler knows the scrub ops and refuses garbage
// with EINVAL before the service sees it; a service without a scrub
// answers ENOSYS.
func TestScrubOpsServed(t *testing.T) {
	h := NewHandler(nopService{}, nil, nil)
	for _, op := range []uint16{OpScrubReport, OpScrubStart, OpScrubStatus} {
		if OpName(op) == "" {
			t.Errorf("op %d has no name", op)
		}
		if _, err := h(context.Background(), op, []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("op %d with garbage: %v", op, err)
		}
	}
	if _, err := h(context.Background(), OpScrubStatus, withHeader(nil)); !errors.Is(err, syscall.ENOSYS) {
		t.Errorf("scrub status of a service without one: %v", err)
	}
}

func FuzzScrubDecode(f *testing.F) {
	for _, m := range scrubSamples() {
		f.Add(marshal(m))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, op := range []uint16{OpScrubReport, OpScrubStart, OpScrubStatus} {
			req, resp, _ := scrubMessages(op)
			for _, m := range []message{req, resp} {
				if err := unmarshal(b, m); err != nil {
					continue
				}
				b2 := marshal(m)
				m2 := reflect.New(reflect.TypeOf(m).Elem()).Interface().(message)
				if err := unmarshal(b2, m2); err != nil || !bytes.Equal(marshal(m2), b2) {
					t.Fatalf("op %d %T: re-encoding is not stable: %v", op, m, err)
				}
			}
		}
	})
}
