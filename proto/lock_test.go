package proto

import (
	"reflect"
	"testing"
)

func TestLockApply(t *testing.T) {
	w := func(s, e uint64) Lock { return Lock{Type: LockWrite, Start: s, End: e} }
	r := func(s, e uint64) Lock { return Lock{Type: LockRead, Start: s, End: e} }
	u := func(s, e uint64) Lock { return Lock{Type: LockUnlock, Start: s, End: e} }
	fl := Lock{Flock: true, Type: LockRead, End: LockEOF}
	for _, tc := range []struct {
		name     string
		held     []Lock
		req      Lock
		want     []Lock
		released bool
	}{
		{"take", nil, w(0, 9), []Lock{w(0, 9)}, false},
		{"unlock nothing", nil, u(0, LockEOF), []Lock{}, false},
		{"unlock all", []Lock{w(0, 9), r(20, 29)}, u(0, LockEOF), []Lock{}, true},
		{"unlock the middle", []Lock{w(0, 99)}, u(20, 79), []Lock{w(0, 19), w(80, 99)}, true},
		{"write over part of a read", []Lock{r(0, 99)}, w(50, LockEOF), []Lock{r(0, 49), w(50, LockEOF)}, true},
		{"disjoint", []Lock{w(0, 9)}, w(10, 19), []Lock{w(0, 9), w(10, 19)}, false},
		{"flock leaves ranges", []Lock{w(0, 9)}, fl, []Lock{w(0, 9), fl}, false},
		{"flock replaced", []Lock{fl}, Lock{Flock: true, Type: LockWrite, End: LockEOF}, []Lock{{Flock: true, Type: LockWrite, End: LockEOF}}, true},
		{"unlock at 0 of a range from 0", []Lock{w(0, 9)}, u(0, 0), []Lock{w(1, 9)}, true},
	} {
		got, released := tc.req.Apply(tc.held)
		if !reflect.DeepEqual(got, tc.want) || released != tc.released {
			t.Errorf("%s: got %v %v, want %v %v", tc.name, got, released, tc.want, tc.released)
		}
	}
}

func TestLockConflicts(t *testing.T) {
	w := Lock{Type: LockWrite, Start: 10, End: 19}
	for _, tc := range []struct {
		h    Lock
		want bool
	}{
		{Lock{Type: LockRead, Start: 19, End: 30}, true},
		{Lock{Type: LockRead, Start: 20, End: 30}, false},
		{Lock{Type: LockWrite, Start: 0, End: 9}, false},
		{Lock{Type: LockWrite, Start: 0, End: LockEOF, Flock: true}, false},
	} {
		if got := w.Conflicts(tc.h); got != tc.want {
			t.Errorf("%+v conflicts with %+v: %v, want %v", w, tc.h, got, tc.want)
		}
	}
	if (Lock{Type: LockRead, End: 5}).Conflicts(Lock{Type: LockRead, End: 5}) {
		t.Error("two read locks conflict")
	}
}
