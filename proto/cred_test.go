package proto

import (
	"context"
	"testing"
)

// The request identity is one context value; each With* copies what ctx
// carries and changes its part, so the nearest setting of each wins and
// an outer ctx is never changed.
func TestRequestIdentityNearestWins(t *testing.T) {
	base := WithRequest(context.Background(), Cred{Uid: 1, Gid: 1}, SessionID{1}, 7, "job1")
	inner := WithCred(base, Cred{Uid: 2, Gid: 2})
	if JobFrom(inner) != "job1" {
		t.Fatalf("inner job %q, want the outer's", JobFrom(inner))
	}
	if j := WithJob(inner, "job2"); JobFrom(j) != "job2" || JobFrom(inner) != "job1" || SeqFrom(j) != 7 {
		t.Fatalf("WithJob: %q (outer %q, seq %d)", JobFrom(j), JobFrom(inner), SeqFrom(j))
	}
	if cj := WithCredJob(base, Cred{Uid: 3}, "job3"); JobFrom(cj) != "job3" || CredPtr(cj).Uid != 3 || SeqFrom(cj) != 7 {
		t.Fatalf("WithCredJob: %q %+v", JobFrom(cj), CredPtr(cj))
	}
	if c, _ := CredFrom(inner); c.Uid != 2 {
		t.Fatalf("inner cred %+v, want uid 2", c)
	}
	if s, ok := SessionFrom(inner); !ok || s != (SessionID{1}) || SeqFrom(inner) != 7 {
		t.Fatalf("inner kept session %v (%v) seq %d, want the outer's", s, ok, SeqFrom(inner))
	}
	if c, _ := CredFrom(base); c.Uid != 1 {
		t.Fatalf("outer cred changed to %+v", c)
	}
	s2 := WithSession(inner, SessionID{2})
	if s, _ := SessionFrom(s2); s != (SessionID{2}) {
		t.Fatalf("session %v, want 2", s)
	}
	if c := CredPtr(s2); c == nil || c.Uid != 2 {
		t.Fatalf("CredPtr %+v", c)
	}
	none := context.Background()
	if _, ok := CredFrom(none); ok || CredPtr(none) != nil || SeqFrom(none) != 0 {
		t.Fatal("an empty ctx carries an identity")
	}
	if _, ok := SessionFrom(WithCred(none, Cred{})); ok {
		t.Fatal("WithCred alone set a session")
	}
}
