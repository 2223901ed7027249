package proto

import (
	"reflect"
	"testing"
	"time"

	"github.com/weft-fs/weft/wire"
)

func TestJobStatsRoundTrip(t *testing.T) {
	in := []JobStat{{Job: "1", Service: "meta", Server: "meta", Ops: []JobOp{{Name: "create_open", Count: 3, Errors: 1}},
		Requests: 3, Latency: time.Millisecond, FirstSeen: time.Unix(1, 2), LastSeen: time.Unix(3, 4)},
		{Job: "dd.0", Service: "storage", Server: "h:1", ReadBytes: 5, WriteBytes: 6, FirstSeen: time.Unix(0, 0), LastSeen: time.Unix(0, 0)}}
	e := wire.NewEncoder(0)
	EncodeJobStats(e, in)
	d := wire.NewDecoder(e.B)
	out := DecodeJobStats(d)
	if err := d.Done(); err != nil || !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip: %+v %v", out, err)
	}
	for i := range len(e.B) {
		d := wire.NewDecoder(e.B[:i])
		if DecodeJobStats(d); d.Done() == nil {
			t.Fatalf("truncated to %d bytes decoded", i)
		}
	}
	e.B[0] = 2
	if d := wire.NewDecoder(e.B); DecodeJobStats(d) != nil || d.Err() == nil {
		t.Fatal("format 2 decoded")
	}
}

// FuzzDecodeJobStats: the decoder never panics, and what decodes
// re-encodes to the same bytes.
func FuzzDecodeJobStats(f *testing.F) {
	e := wire.NewEncoder(0)
	EncodeJobStats(e, []JobStat{{Job: "j", Ops: []JobOp{{Name: "read", Count: 1}}}})
	f.Add(e.B)
	f.Add([]byte{1, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		d := wire.NewDecoder(b)
		st := DecodeJobStats(d)
		if d.Done() != nil {
			return
		}
		e := wire.NewEncoder(0)
		EncodeJobStats(e, st)
		if string(e.B) != string(b) {
			t.Fatalf("re-encoding differs")
		}
	})
}

func TestValidJobID(t *testing.T) {
	for id, ok := range map[string]bool{"": true, "1234": true, "dd.1000": true, "a b": false, "x\n": false, "\xff": false, string(make([]byte, MaxJobID+1)): false} {
		if err := ValidJobID(id); (err == nil) != ok {
			t.Errorf("ValidJobID(%q) = %v", id, err)
		}
	}
}
