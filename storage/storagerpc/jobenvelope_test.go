package storagerpc

import "testing"

// FuzzJobEnvelope: the envelope decoder never panics, accepts only valid
// job ids around the op its code allows, and what it accepts re-encodes to
// the same bytes.
func FuzzJobEnvelope(f *testing.F) {
	f.Add(OpJobRead, append(jobEnvelope(OpRead, "42"), 1, 2, 3))
	f.Add(OpJob, jobEnvelope(OpSync, "dd.1000"))
	f.Add(OpJobWrite, []byte{1})
	f.Fuzz(func(t *testing.T, outer uint16, b []byte) {
		op, job, rest, err := decodeJobEnvelope(outer, b)
		if err != nil {
			return
		}
		if jobOp(op) != outer {
			t.Fatalf("op %d accepted in envelope %d", op, outer)
		}
		if string(append(jobEnvelope(op, job), rest...)) != string(b) {
			t.Fatal("re-encoding differs")
		}
	})
}
